from __future__ import annotations

import math

import pytest

from secure_fed.verifier.accounting import EventError, StreamAccountant, prv_matches, rdp_matches, to_dp_event

from .conftest import mechanism_json, opacus_epsilon


@pytest.mark.parametrize(
    "events",
    [
        [(0.25, 1.1, 8)],
        [(0.25, 1.1, 8)] * 3,
        [(0.01, 1.0, 1000)],
        [(1.0, 5.0, 1)],
        [(1.0, 5.0, 1), (0.25, 1.1, 8), (0.25, 1.1, 8), (0.05, 0.8, 200)],
        [(1.0, 2.0, 3)],
    ],
)
@pytest.mark.parametrize("delta", [1e-5, 1e-3])
def test_rdp_agrees_with_opacus(events: list[tuple[float, float, int]], delta: float) -> None:
    stream = StreamAccountant()
    for event in events:
        stream.compose(mechanism_json(*event))
    ours, reference = stream.epsilon_rdp(delta), opacus_epsilon(events, delta)
    assert abs(ours - reference) / reference < 0.01
    assert rdp_matches(reference, ours)
    assert not rdp_matches(reference * 0.95, ours)
    # PLD is tight, RDP an upper bound.
    assert 0 < stream.epsilon_pld(delta) < ours


def test_composed_event_equals_its_parts() -> None:
    parts = [mechanism_json(0.25, 1.1, 8), mechanism_json(1.0, 5.0, 1)]
    together, apart = StreamAccountant(), StreamAccountant()
    together.compose({"type": "composed", "events": parts})
    for part in parts:
        apart.compose(part)
    assert together.epsilon_rdp(1e-5) == pytest.approx(apart.epsilon_rdp(1e-5), rel=1e-12)
    assert together.epsilon_pld(1e-5) == pytest.approx(apart.epsilon_pld(1e-5), rel=1e-9)


def test_degenerate_events() -> None:
    nothing = StreamAccountant()
    nothing.compose(mechanism_json(0.25, 1.1, 0))
    assert nothing.epsilon_rdp(1e-5) == pytest.approx(0.0, abs=1e-9) and nothing.epsilon_pld(1e-5) == 0.0
    no_noise = StreamAccountant()
    no_noise.compose(mechanism_json(1.0, 0.0, 1))
    assert math.isinf(no_noise.epsilon_rdp(1e-5)) and math.isinf(no_noise.epsilon_pld(1e-5))
    assert not rdp_matches(3.0, math.inf) and not prv_matches(3.0, math.inf)


@pytest.mark.parametrize(
    "event, message",
    [
        ({"type": "laplace", "count": 1}, "unknown mechanism event type 'laplace'"),
        ({"type": "gaussian", "noise_multiplier": 1.0, "count": -1}, "count"),
        (
            {"type": "poisson_sampled_gaussian", "sampling_rate": 1.5, "noise_multiplier": 1.0, "count": 1},
            "sampling_rate",
        ),
        ({"type": "composed", "events": "x"}, "must be a list"),
    ],
)
def test_malformed_events_are_refused(event: dict, message: str) -> None:
    with pytest.raises(EventError, match=message):
        to_dp_event(event)


def test_full_population_gaussians_are_priced_exactly_at_any_noise() -> None:
    """A stream of unsampled Gaussian releases (FedTAR's α scalars, the GMM histogram) is one
    Gaussian of μ = sqrt(Σ count/σ²), priced exactly: at a tiny σ (ε near 1e5, a noise-free probe)
    a discretised PLD of 50 such releases took the verifier about 20 minutes a log."""
    from secure_fed.dp import analytic_gaussian

    stream = StreamAccountant()
    for _ in range(50):
        stream.compose(mechanism_json(1.0, 0.0166, 1))
    mu = analytic_gaussian.composed_mu([(0.0166, 50)])
    # the verifier's value (dp_accounting) against dp's own closed form, written apart
    assert stream.epsilon_pld(1e-5) == pytest.approx(analytic_gaussian.epsilon_for_delta(mu, 1e-5), rel=1e-6)
    assert stream.epsilon_pld(1e-5) == pytest.approx(92540.05, rel=1e-6)
    assert 0 < stream.epsilon_pld(1e-5) < stream.epsilon_rdp(1e-5)


@pytest.mark.parametrize(
    "events",
    [
        [(1.0, 5.0, 1), (1.0, 2.0, 3)],
        [(1.0, 5.0, 1), (0.25, 1.1, 8), (1.0, 2.0, 1), (0.05, 0.8, 200)],
    ],
)
def test_exact_full_population_part_agrees_with_the_discretised_pld(
    events: list[tuple[float, float, int]],
) -> None:
    """The exact pricing of the unsampled part moves ε by no more than the PLD's own
    discretisation did when every release was a PLD leaf (the value the logs were checked against)."""
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    stream = StreamAccountant()
    for event in events:
        stream.compose(mechanism_json(*event))
    composed = None
    for q, sigma, count in events:
        leaf = pld_lib.from_gaussian_mechanism(
            sigma, sampling_prob=q, value_discretization_interval=1e-4, use_connect_dots=True
        ).self_compose(count)
        composed = leaf if composed is None else composed.compose(leaf)
    assert composed is not None
    assert stream.epsilon_pld(1e-5) == pytest.approx(composed.get_epsilon_for_delta(1e-5), rel=2e-3)
