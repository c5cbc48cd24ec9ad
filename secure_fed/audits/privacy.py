"""Reading `privacy` audit payloads (the dp ↔ audits contract in docs/ARCHITECTURE.md).

Payload: {"site", "population": "train" | "validation", "mechanism", "event": <mechanism event>,
"delta", "epsilon": {"rdp": x, "prv": y | null}, "budget": b | null}. Optional keys the report
shows when present: "clip_norm" (C), "population_size" or "population_bucket" (a power-of-two
range such as "32-63": what sites release), "steps".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

POPULATIONS = ("train", "validation")
MECHANISMS = ("dp_sgd", "gmm_histogram", "alpha_scalars")
OPTIONAL_KEYS = ("clip_norm", "population_size", "population_bucket", "steps")
REQUIRED_KEYS = ("site", "population", "mechanism", "event", "delta", "epsilon", "budget")


class PrivacyPayloadError(ValueError):
    """A privacy payload does not follow the contract."""


@dataclass(frozen=True)
class PrivacyEntry:
    site: str
    population: str
    mechanism: str
    event: dict[str, Any]
    delta: float
    epsilon_rdp: float
    epsilon_prv: float | None
    budget: float | None
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def epsilon(self) -> float:
        """The ε the site reports: the tight (PRV) value when logged, else the RDP bound."""
        return self.epsilon_prv if self.epsilon_prv is not None else self.epsilon_rdp


def _number(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PrivacyPayloadError(f"{name} must be a number, got {value!r}")
    return float(value)


def parse_privacy(payload: Mapping[str, Any]) -> PrivacyEntry:
    """The payload as a `PrivacyEntry`; raises PrivacyPayloadError naming what is wrong."""
    missing = [key for key in REQUIRED_KEYS if key not in payload]
    if missing:
        raise PrivacyPayloadError(f"privacy payload is missing {missing}")
    if payload["population"] not in POPULATIONS:
        raise PrivacyPayloadError(
            f"population must be one of {list(POPULATIONS)}, got {payload['population']!r}"
        )
    if payload["mechanism"] not in MECHANISMS:
        raise PrivacyPayloadError(
            f"mechanism must be one of {list(MECHANISMS)}, got {payload['mechanism']!r}"
        )
    if not isinstance(payload["site"], str) or not payload["site"]:
        raise PrivacyPayloadError(f"site must be a non-empty string, got {payload['site']!r}")
    if not isinstance(payload["event"], Mapping):
        raise PrivacyPayloadError("event must be a JSON object")
    delta = _number(payload["delta"], "delta")
    if not 0.0 < delta < 1.0:
        raise PrivacyPayloadError(f"delta must lie in (0, 1), got {delta!r}")
    epsilon = payload["epsilon"]
    if not isinstance(epsilon, Mapping) or "rdp" not in epsilon:
        raise PrivacyPayloadError('epsilon must be {"rdp": x, "prv": y | null}')
    eps_rdp = _number(epsilon["rdp"], "epsilon.rdp")
    eps_prv = None if epsilon.get("prv") is None else _number(epsilon["prv"], "epsilon.prv")
    budget = None if payload["budget"] is None else _number(payload["budget"], "budget")
    if any(value is not None and (math.isnan(value) or value < 0) for value in (eps_rdp, eps_prv, budget)):
        raise PrivacyPayloadError("epsilon and budget must be non-negative numbers")
    extras = {key: payload[key] for key in OPTIONAL_KEYS if key in payload}
    return PrivacyEntry(
        site=payload["site"],
        population=payload["population"],
        mechanism=payload["mechanism"],
        event=dict(payload["event"]),
        delta=delta,
        epsilon_rdp=eps_rdp,
        epsilon_prv=eps_prv,
        budget=budget,
        extras=extras,
    )
