"""Visits with their pixels loaded, grouped by site, and split by patient."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from secure_fed.data.manifest import load_records, resolve_input
from secure_fed.data.records import VisitRecord

# Fixed, data-independent scaling: 8-bit grey levels to [0, 1]. Statistics fitted on a site's images
# would be one more release of private data.
PIXEL_SCALE = 255.0


@dataclass(frozen=True, eq=False)
class Visit:
    patient_id: str
    visit_index: int
    study_date: str | None
    image: np.ndarray  # float32 [H, W] in [0, 1]
    report: str
    age: float | None
    sex: str
    site: str
    labels: dict[str, Any] | None = None
    split: str | None = None


@dataclass
class Cohort:
    sites: dict[str, list[Visit]]

    @property
    def visits(self) -> list[Visit]:
        return [v for site in self.sites.values() for v in site]


def load_image(path: Path, image_size: int) -> np.ndarray:
    with Image.open(path) as im:
        grey = im.convert("L")
        if grey.size != (image_size, image_size):
            grey = grey.resize((image_size, image_size), Image.Resampling.BILINEAR)
        return np.asarray(grey, dtype=np.float32) / np.float32(PIXEL_SCALE)


def _read_labels(path: Path) -> dict[tuple[str, int], dict[str, Any]]:
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            out[(row["patient_id"], int(row["visit_index"]))] = {
                "findings": row["findings"],
                "progression": row["progression"],
            }
    return out


def to_visit(record: VisitRecord, base: Path, image_size: int, labels: dict[str, Any] | None) -> Visit:
    """A record with its first image loaded (for IU-Xray: the frontal view, listed first)."""
    return Visit(
        patient_id=record.patient_id,
        visit_index=record.visit_index,
        study_date=record.study_date,
        image=load_image(base / record.image_paths[0], image_size),
        report=record.report,
        age=record.age,
        sex=record.sex,
        site=record.site,
        labels=labels,
        split=record.split,
    )


def partition_by_site(
    visits: list[Visit], n_sites: int | None = None, seed: int = 0
) -> dict[str, list[Visit]]:
    """Group by each visit's site; with ``n_sites``, deal whole patients to ``site0..`` at random instead.

    The second form turns a single-source data set (IU-Xray) into ``n_sites`` federated sites.
    """
    if n_sites is None:
        out: dict[str, list[Visit]] = {}
        for v in visits:
            out.setdefault(v.site, []).append(v)
        return out
    if n_sites < 1:
        raise ValueError("n_sites must be >= 1")
    patients = sorted({v.patient_id for v in visits})
    order = np.random.default_rng(seed).permutation(len(patients))
    home = {patients[p]: f"site{rank % n_sites}" for rank, p in enumerate(order)}
    dealt: dict[str, list[Visit]] = {f"site{k}": [] for k in range(n_sites)}
    for v in visits:
        dealt[home[v.patient_id]].append(dataclasses.replace(v, site=home[v.patient_id]))
    return dealt


def load_cohort(
    manifest_path: str | Path, image_size: int, n_sites: int | None = None, seed: int = 0
) -> Cohort:
    """Manifest or annotation file (or a folder holding one), with ``labels.jsonl`` beside it if present."""
    path = resolve_input(manifest_path)
    records = load_records(path)
    labels_path = path.parent / "labels.jsonl"
    labels = _read_labels(labels_path) if labels_path.is_file() else {}
    visits = [
        to_visit(r, path.parent, image_size, labels.get((r.patient_id, r.visit_index))) for r in records
    ]
    visits.sort(key=lambda v: (v.site, v.patient_id, v.visit_index))
    return Cohort(partition_by_site(visits, n_sites, seed))


def _split_sizes(n: int, val_fraction: float, test_fraction: float) -> tuple[int, int]:
    n_val, n_test = round(n * val_fraction), round(n * test_fraction)
    if n >= 3:  # every split non-empty when there are patients enough for it
        n_val, n_test = max(n_val, 1 if val_fraction > 0 else 0), max(n_test, 1 if test_fraction > 0 else 0)
    if n - n_val - n_test < 1:
        raise ValueError(f"{n} patient(s) cannot fill train, val ({val_fraction}) and test ({test_fraction})")
    return n_val, n_test


def split_patients(
    visits: list[Visit], val_fraction: float, test_fraction: float, seed: int
) -> tuple[list[Visit], list[Visit], list[Visit]]:
    """(train, val, test) with each patient's visits all in one of them, visits kept in input order."""
    patients = sorted({v.patient_id for v in visits})
    n_val, n_test = _split_sizes(len(patients), val_fraction, test_fraction)
    order = np.random.default_rng(seed).permutation(len(patients))
    test_ids = {patients[i] for i in order[:n_test]}
    val_ids = {patients[i] for i in order[n_test : n_test + n_val]}
    train = [v for v in visits if v.patient_id not in test_ids | val_ids]
    val = [v for v in visits if v.patient_id in val_ids]
    test = [v for v in visits if v.patient_id in test_ids]
    return train, val, test
