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


@dataclass(frozen=True)
class Composed(_FromJson):
    """Sequential composition of events (order is kept for the log; the cost does not depend on it)."""

    events: tuple[Event, ...]

    def __post_init__(self) -> None:
        events = tuple(self.events)
        for event in events:
            if not isinstance(event, PoissonSampledGaussian | Gaussian | Composed):
                raise EventFormatError(f"not a privacy event: {event!r}")
        object.__setattr__(self, "events", events)

    def to_json(self) -> dict[str, Any]:
        return {"type": "composed", "events": [event.to_json() for event in self.events]}


Event = PoissonSampledGaussian | Gaussian | Composed
LeafEvent = PoissonSampledGaussian | Gaussian


def leaves(events: Event | Iterable[Event]) -> Iterator[LeafEvent]:
    """The mechanism events inside `events`, with every `Composed` opened up, in order."""
    stack: list[Event] = [events] if isinstance(events, Event) else list(events)
    stack.reverse()
    while stack:
        event = stack.pop()
        if isinstance(event, Composed):
            stack.extend(reversed(event.events))
        elif isinstance(event, PoissonSampledGaussian | Gaussian):
            yield event
        else:
            raise EventFormatError(f"not a privacy event: {event!r}")


_FIELDS: dict[str, set[str]] = {
    "poisson_sampled_gaussian": {"type", "sampling_rate", "noise_multiplier", "count"},
    "gaussian": {"type", "noise_multiplier", "count"},
    "composed": {"type", "events"},
}


def from_json(data: Mapping[str, Any]) -> Event:
    """Parse one event from its JSON object; unknown types or extra / missing keys are errors."""
    if not isinstance(data, Mapping):
        raise EventFormatError(f"an event must be a JSON object, got {type(data).__name__}")
    kind = data.get("type")
    if kind not in _FIELDS:
        raise EventFormatError(f"unknown event type {kind!r}; expected one of {sorted(_FIELDS)}")
    keys = set(data)
    if keys != _FIELDS[kind]:
        missing, extra = _FIELDS[kind] - keys, keys - _FIELDS[kind]
        raise EventFormatError(
            f"{kind} event: missing keys {sorted(missing)}, unexpected keys {sorted(extra)}"
        )
    if kind == "poisson_sampled_gaussian":
        return PoissonSampledGaussian(data["sampling_rate"], data["noise_multiplier"], data["count"])
    if kind == "gaussian":
        return Gaussian(data["noise_multiplier"], data["count"])
    if not isinstance(data["events"], list):
        raise EventFormatError("composed event: 'events' must be a list")
    return Composed(tuple(from_json(item) for item in data["events"]))
