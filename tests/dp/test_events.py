import json

import pytest

from secure_fed.dp.events import (
    Composed,
    EventFormatError,
    Gaussian,
    PoissonSampledGaussian,
    from_json,
    leaves,
)


def test_json_shapes_are_the_architecture_contract() -> None:
    assert PoissonSampledGaussian(0.04, 1.5, 10).to_json() == {
        "type": "poisson_sampled_gaussian",
        "sampling_rate": 0.04,
        "noise_multiplier": 1.5,
        "count": 10,
    }
    assert Gaussian(2.0, 1).to_json() == {"type": "gaussian", "noise_multiplier": 2.0, "count": 1}


def test_round_trip_through_json_text_including_nesting() -> None:
    event = Composed((PoissonSampledGaussian(0.1, 1.1, 3), Composed((Gaussian(4.0, 2),)), Gaussian(1, 1)))
    parsed = from_json(json.loads(json.dumps(event.to_json())))
    assert parsed == event
    assert Composed.from_json(event.to_json()) == event
    assert list(leaves(parsed)) == [PoissonSampledGaussian(0.1, 1.1, 3), Gaussian(4.0, 2), Gaussian(1.0, 1)]


def test_events_are_immutable() -> None:
    event = Gaussian(1.0, 1)
    with pytest.raises(AttributeError):
        event.count = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    "data",
    [
        {"type": "laplace", "scale": 1.0},
        {"type": "gaussian", "noise_multiplier": 1.0},
        {"type": "gaussian", "noise_multiplier": 1.0, "count": 1, "extra": 0},
        {"type": "gaussian", "noise_multiplier": -1.0, "count": 1},
        {"type": "gaussian", "noise_multiplier": 1.0, "count": 1.5},
        {"type": "gaussian", "noise_multiplier": 1.0, "count": True},
        {"type": "poisson_sampled_gaussian", "sampling_rate": 1.5, "noise_multiplier": 1.0, "count": 1},
        {"type": "composed", "events": {"type": "gaussian"}},
    ],
)
def test_malformed_events_are_refused(data: dict) -> None:
    with pytest.raises(EventFormatError):
        from_json(data)


def test_typed_from_json_checks_the_type() -> None:
    with pytest.raises(EventFormatError, match="expected a Gaussian"):
        Gaussian.from_json(PoissonSampledGaussian(0.1, 1.0, 1).to_json())
