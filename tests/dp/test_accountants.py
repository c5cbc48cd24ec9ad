import math

import dp_accounting as dpa
import pytest
from dp_accounting import pld, rdp

from secure_fed.dp.accountants import DEFAULT_ORDERS, epsilon_prv, epsilon_rdp, prv_epsilon
from secure_fed.dp.events import Composed, Gaussian, PoissonSampledGaussian

# σ and q change between rounds, and a one-shot Gaussian (the GMM histogram) is composed in.
SCHEDULE = [(0.02, 1.2, 300), (0.05, 1.0, 200), (0.01, 2.0, 500)]
HISTOGRAM_SIGMA = 8.0


def _our_events() -> list:
    return [PoissonSampledGaussian(q, s, n) for q, s, n in SCHEDULE] + [Gaussian(HISTOGRAM_SIGMA, 1)]


def _google_event() -> dpa.DpEvent:
    steps = [
        dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(s)), n)
        for q, s, n in SCHEDULE
    ]
    return dpa.ComposedDpEvent([*steps, dpa.GaussianDpEvent(HISTOGRAM_SIGMA)])


def test_default_orders_are_opacus_own() -> None:
    """The orders are written out so that importing the accountants does not import Opacus; they must
    stay Opacus' (every pinned ε below is priced on them)."""
    from opacus.accountants import RDPAccountant

    assert DEFAULT_ORDERS == tuple(float(a) for a in RDPAccountant.DEFAULT_ALPHAS)


def test_opacus_rdp_reference_value() -> None:
    # The classic Abadi et al. setting priced by Opacus' RDP analysis with the Balle et al. (2020)
    # RDP→DP conversion, which Opacus has used since 1.0 (the older log(1/δ)/(α-1) rule gives 8.07).
    assert epsilon_rdp([PoissonSampledGaussian(0.04, 1.5, 2250)], 1e-5) == pytest.approx(7.3291, abs=5e-5)


def test_prv_is_tighter_than_rdp_on_the_reference_setting() -> None:
    result = prv_epsilon([PoissonSampledGaussian(0.04, 1.5, 2250)], 1e-5)
    assert result.method == "prv"
    assert result.epsilon == pytest.approx(6.779, abs=5e-3)


def test_rdp_matches_google_dp_accounting_on_a_heterogeneous_schedule() -> None:
    google = rdp.RdpAccountant(orders=list(DEFAULT_ORDERS))
    google.compose(_google_event())
    assert epsilon_rdp(_our_events(), 1e-5) == pytest.approx(google.get_epsilon(1e-5), rel=1e-9)


def test_prv_matches_google_pld_on_a_heterogeneous_schedule() -> None:
    google = pld.PLDAccountant()
    google.compose(_google_event())
    ours = epsilon_prv(_our_events(), 1e-5)
    assert ours is not None
    assert ours == pytest.approx(google.get_epsilon(1e-5), rel=0.02)
    assert ours < epsilon_rdp(_our_events(), 1e-5)


def test_gaussian_only_composition_is_exact() -> None:
    google = pld.PLDAccountant()
    google.compose(dpa.GaussianDpEvent(2.0), 3)
    result = prv_epsilon([Gaussian(2.0, 2), Gaussian(2.0, 1)], 1e-5)
    assert result.method == "analytic_gaussian"
    assert result.epsilon == pytest.approx(google.get_epsilon(1e-5), rel=1e-3)
    assert epsilon_rdp([Gaussian(2.0, 3)], 1e-5) > result.epsilon


def test_order_and_grouping_do_not_change_the_price() -> None:
    events = _our_events()
    regrouped = [Composed(tuple(reversed(events[:2]))), *events[2:]]
    split = [PoissonSampledGaussian(0.02, 1.2, 100), PoissonSampledGaussian(0.02, 1.2, 200), *events[1:]]
    assert epsilon_rdp(regrouped, 1e-5) == pytest.approx(epsilon_rdp(events, 1e-5), rel=1e-12)
    assert epsilon_rdp(split, 1e-5) == pytest.approx(epsilon_rdp(events, 1e-5), rel=1e-12)
    assert epsilon_prv(split, 1e-5) == pytest.approx(epsilon_prv(events, 1e-5), rel=1e-9)


def test_degenerate_events() -> None:
    nothing = [PoissonSampledGaussian(0.0, 1.0, 10), Gaussian(1.0, 0)]
    assert epsilon_rdp(nothing, 1e-5) == 0.0
    assert epsilon_prv(nothing, 1e-5) == 0.0
    noiseless = [PoissonSampledGaussian(0.1, 0.0, 1)]
    assert math.isinf(epsilon_rdp(noiseless, 1e-5))
    assert math.isinf(epsilon_prv(noiseless, 1e-5))
    with pytest.raises(ValueError, match="delta"):
        epsilon_rdp(_our_events(), 0.0)


def test_prv_reports_why_it_cannot_price_instead_of_a_number() -> None:
    result = prv_epsilon([PoissonSampledGaussian(0.04, 1.5, 2250)], 1e-5, max_domain_points=1000)
    assert result.epsilon is None
    assert result.method == "none"
    assert "points" in (result.reason or "")
