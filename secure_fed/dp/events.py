"""The privacy event algebra: immutable descriptions of what was released.

An event says which mechanism ran and with which parameters, never how much privacy it cost:
the cost is the accountants' business (`accountants.py`), so one logged event can be re-priced
by any accountant, including the independent one the audit verifier uses. The JSON shapes are
the dp ↔ audits contract in docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any


class EventFormatError(ValueError):
    """A privacy event (or its JSON) is malformed."""


def _check_count(count: object) -> int:
    # bool is an int subclass; True steps would be a silent typo.
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise EventFormatError(f"count must be a non-negative integer, got {count!r}")
    return count


def _check_noise(noise_multiplier: object) -> float:
    if isinstance(noise_multiplier, bool) or not isinstance(noise_multiplier, int | float):
        raise EventFormatError(f"noise_multiplier must be a number, got {noise_multiplier!r}")
    value = float(noise_multiplier)
    if not math.isfinite(value) or value < 0:
        raise EventFormatError(f"noise_multiplier must be finite and >= 0, got {noise_multiplier!r}")
    return value


def _check_rate(sampling_rate: object) -> float:
    if isinstance(sampling_rate, bool) or not isinstance(sampling_rate, int | float):
        raise EventFormatError(f"sampling_rate must be a number, got {sampling_rate!r}")
    value = float(sampling_rate)
    if not 0.0 <= value <= 1.0:
        raise EventFormatError(f"sampling_rate must lie in [0, 1], got {sampling_rate!r}")
    return value


class _FromJson:
    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Any:
        event = from_json(data)
        if not isinstance(event, cls):
            raise EventFormatError(f"expected a {cls.__name__} event, got {data.get('type')!r}")
        return event


@dataclass(frozen=True)
class PoissonSampledGaussian(_FromJson):
    """`count` steps of a Gaussian mechanism on a Poisson sample (each unit in with prob. q).

    noise_multiplier = noise std / L2 sensitivity (the per-unit clipping bound).
    """

    sampling_rate: float
    noise_multiplier: float
    count: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "sampling_rate", _check_rate(self.sampling_rate))
        object.__setattr__(self, "noise_multiplier", _check_noise(self.noise_multiplier))
        object.__setattr__(self, "count", _check_count(self.count))

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "poisson_sampled_gaussian",
            "sampling_rate": self.sampling_rate,
            "noise_multiplier": self.noise_multiplier,
            "count": self.count,
        }


@dataclass(frozen=True)
class Gaussian(_FromJson):
    """`count` releases of a Gaussian mechanism over the whole population (no sampling)."""

    noise_multiplier: float
    count: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "noise_multiplier", _check_noise(self.noise_multiplier))
        object.__setattr__(self, "count", _check_count(self.count))

    def to_json(self) -> dict[str, Any]:
        return {"type": "gaussian", "noise_multiplier": self.noise_multiplier, "count": self.count}


# Float64 rotation error is far below one integer unit at the granularities dp.distributed allows;
# one whole unit of slack in Δ₂ covers it (see dp/distributed/).
ROUNDING_FLOAT_SLACK = 1.0


def rounded_sensitivities(clip: float, gamma: float, padded_dim: int) -> tuple[float, float]:
    """(Δ₂, Δ₁) of one patient in the integer sum after scaling by 1/γ, rotation and randomised
    rounding of a site's sum: coupling the roundings of neighbouring sums through the same
    uniforms, each coordinate moves by less than its exact change plus one, so
    Δ₂ = C/γ + √D (+ float slack) and, for an integer vector, Δ₁ ≤ min(√D·Δ₂, Δ₂²), D being the
    number of rounded coordinates (the share's length)."""
    l2 = clip / gamma + math.sqrt(padded_dim) + ROUNDING_FLOAT_SLACK
    return l2, min(math.sqrt(padded_dim) * l2, l2 * l2)


def _positive(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise EventFormatError(f"{name} must be a number, got {value!r}")
    number = float(value)
    if not (math.isfinite(number) and number > 0):
        raise EventFormatError(f"{name} must be finite and > 0, got {value!r}")
    return number


# "symmetric": the exact expansion, valid because a Skellam vector and its shift are a symmetric
# pair (dp/distributed/); "general": Zhu & Wang's bound for any mechanism, what an event logged
# without the key (before the symmetric bound) was priced with.
SKELLAM_AMPLIFICATIONS = ("symmetric", "general")
UNMARKED_AMPLIFICATION = "general"  # what a plan or event without the key was priced with
_SKELLAM_FIELDS = (
    "sampling_rate",
    "count",
    "clip",
    "gamma",
    "dim",
    "padded_dim",
    "mu_total",
    "l2_sensitivity",
    "l1_sensitivity",
    "bits",
    "honest_min",
    "colluders",
)


@dataclass(frozen=True)
class SkellamSum(_FromJson):
    """`count` rounds of the distributed Skellam sum (dp/distributed/) on a Poisson sample of
    the patients of all sites (each in with probability q).

    Priced from (q, count, mu_total, Δ₁, Δ₂): mu_total is the Skellam variance per coordinate the
    honest survivors' shares carry (integer units), Δ₁/Δ₂ one patient's sensitivities after
    scaling by 1/gamma, rotation to padded_dim coordinates and rounding; they must be the ones
    `rounded_sensitivities(clip, gamma, padded_dim)` gives. bits, honest_min and colluders are the
    ring and the trust assumption the noise was sized for (logged, not priced).
    """

    sampling_rate: float
    count: int
    clip: float
    gamma: float
    dim: int
    padded_dim: int
    mu_total: float
    l2_sensitivity: float
    l1_sensitivity: float
    bits: int
    honest_min: int
    colluders: int
    amplification: str = "symmetric"  # the Poisson-subsampling bound it is priced with

    def __post_init__(self) -> None:
        if self.amplification not in SKELLAM_AMPLIFICATIONS:
            raise EventFormatError(
                f"skellam_sum: amplification must be one of {SKELLAM_AMPLIFICATIONS}, "
                f"got {self.amplification!r}"
            )
        object.__setattr__(self, "sampling_rate", _check_rate(self.sampling_rate))
        object.__setattr__(self, "count", _check_count(self.count))
        for name in ("clip", "gamma", "mu_total", "l2_sensitivity", "l1_sensitivity"):
            object.__setattr__(self, name, _positive(getattr(self, name), name))
        for name in ("dim", "padded_dim", "bits", "honest_min", "colluders"):
            _check_count(getattr(self, name))
        if self.padded_dim < max(self.dim, 1):
            raise EventFormatError(f"padded_dim {self.padded_dim} is below dim {self.dim}")
        if self.honest_min <= self.colluders:
            raise EventFormatError(f"honest_min {self.honest_min} must exceed colluders {self.colluders}")
        l2, l1 = rounded_sensitivities(self.clip, self.gamma, self.padded_dim)
        if not (
            math.isclose(l2, self.l2_sensitivity, rel_tol=1e-12)
            and math.isclose(l1, self.l1_sensitivity, rel_tol=1e-12)
        ):
            raise EventFormatError(
                f"skellam_sum: l2_sensitivity {self.l2_sensitivity!r} / l1_sensitivity "
                f"{self.l1_sensitivity!r} do not follow from clip, gamma and padded_dim ({l2!r}, {l1!r})"
            )

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "skellam_sum",
            **{name: getattr(self, name) for name in _SKELLAM_FIELDS},
            "amplification": self.amplification,
        }


@dataclass(frozen=True)
class Composed(_FromJson):
    """Sequential composition of events (order is kept for the log; the cost does not depend on it)."""

    events: tuple[Event, ...]

    def __post_init__(self) -> None:
        events = tuple(self.events)
        for event in events:
            if not isinstance(event, PoissonSampledGaussian | Gaussian | SkellamSum | Composed):
                raise EventFormatError(f"not a privacy event: {event!r}")
        object.__setattr__(self, "events", events)

    def to_json(self) -> dict[str, Any]:
        return {"type": "composed", "events": [event.to_json() for event in self.events]}


Event = PoissonSampledGaussian | Gaussian | SkellamSum | Composed
LeafEvent = PoissonSampledGaussian | Gaussian | SkellamSum


def leaves(events: Event | Iterable[Event]) -> Iterator[LeafEvent]:
    """The mechanism events inside `events`, with every `Composed` opened up, in order."""
    stack: list[Event] = [events] if isinstance(events, Event) else list(events)
    stack.reverse()
    while stack:
        event = stack.pop()
        if isinstance(event, Composed):
            stack.extend(reversed(event.events))
        elif isinstance(event, PoissonSampledGaussian | Gaussian | SkellamSum):
            yield event
        else:
            raise EventFormatError(f"not a privacy event: {event!r}")


_FIELDS: dict[str, set[str]] = {
    "poisson_sampled_gaussian": {"type", "sampling_rate", "noise_multiplier", "count"},
    "gaussian": {"type", "noise_multiplier", "count"},
    "composed": {"type", "events"},
    "skellam_sum": {"type", *_SKELLAM_FIELDS},
}


def from_json(data: Mapping[str, Any]) -> Event:
    """Parse one event from its JSON object; unknown types or extra / missing keys are errors."""
    if not isinstance(data, Mapping):
        raise EventFormatError(f"an event must be a JSON object, got {type(data).__name__}")
    kind = data.get("type")
    if kind not in _FIELDS:
        raise EventFormatError(f"unknown event type {kind!r}; expected one of {sorted(_FIELDS)}")
    keys = set(data)
    if kind == "skellam_sum":
        keys.discard("amplification")  # optional: absent in logs written before it existed
    if keys != _FIELDS[kind]:
        missing, extra = _FIELDS[kind] - keys, keys - _FIELDS[kind]
        raise EventFormatError(
            f"{kind} event: missing keys {sorted(missing)}, unexpected keys {sorted(extra)}"
        )
    if kind == "poisson_sampled_gaussian":
        return PoissonSampledGaussian(data["sampling_rate"], data["noise_multiplier"], data["count"])
    if kind == "gaussian":
        return Gaussian(data["noise_multiplier"], data["count"])
    if kind == "skellam_sum":
        return SkellamSum(
            **{name: data[name] for name in _SKELLAM_FIELDS},
            amplification=data.get("amplification", UNMARKED_AMPLIFICATION),
        )
    if not isinstance(data["events"], list):
        raise EventFormatError("composed event: 'events' must be a list")
    return Composed(tuple(from_json(item) for item in data["events"]))
