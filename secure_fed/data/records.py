"""One visit of one patient, as a manifest line or an annotation entry describes it."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator

Sex = Literal["M", "F", "U"]

_SEX_SPELLINGS: dict[str, Sex] = {
    "m": "M",
    "male": "M",
    "man": "M",
    "f": "F",
    "female": "F",
    "woman": "F",
    "u": "U",
    "unknown": "U",
    "other": "U",
}

MIN_AGE, MAX_AGE = 0.0, 120.0


class VisitRecord(BaseModel):
    """Image paths are relative to the manifest's folder and stay inside it (checked by
    `data/manifest.py`: no absolute path, no '..')."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    patient_id: str
    visit_index: int
    study_date: str | None
    image: str | list[str]
    report: str
    age: float | None
    sex: Sex
    site: str
    split: Literal["train", "val", "test"] | None = None

    @field_validator("patient_id", "site")
    @classmethod
    def _non_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("empty")
        return value

    @field_validator("visit_index")
    @classmethod
    def _one_based(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"must be >= 1 (visits are numbered from 1), got {value}")
        return value

    @field_validator("study_date")
    @classmethod
    def _iso_date(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            parsed = dt.date.fromisoformat(value)
        except ValueError:
            parsed = None
        if parsed is None or parsed.isoformat() != value:
            raise ValueError(f"expected a date YYYY-MM-DD, got {value!r}")
        return value

    @field_validator("image")
    @classmethod
    def _has_image(cls, value: str | list[str]) -> str | list[str]:
        paths = [value] if isinstance(value, str) else value
        if not paths or any(not p.strip() for p in paths):
            raise ValueError("empty path")
        return value

    @field_validator("report")
    @classmethod
    def _has_text(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("empty")
        return value

    @field_validator("age")
    @classmethod
    def _plausible_age(cls, value: float | None) -> float | None:
        if value is not None and not MIN_AGE <= value <= MAX_AGE:
            raise ValueError(f"must be between {MIN_AGE:g} and {MAX_AGE:g}, got {value:g}")
        return value

    @field_validator("sex", mode="before")
    @classmethod
    def _sex_spelling(cls, value: Any) -> Any:
        if value is None:
            return "U"
        if isinstance(value, str) and value.strip().lower() in _SEX_SPELLINGS:
            return _SEX_SPELLINGS[value.strip().lower()]
        raise ValueError(f"unknown value {value!r} (expected M, F, U, male, female or unknown)")

    @property
    def image_paths(self) -> list[str]:
        return [self.image] if isinstance(self.image, str) else list(self.image)

    @property
    def year(self) -> int | None:
        return None if self.study_date is None else int(self.study_date[:4])
