"""The "symmetric" amplification bound the Skellam sum is priced with, checked against exact
divergences (the proof: docs/THREAT_MODEL.md, "Why the Skellam sum is amplified like the Gaussian").

For a pair (P, Q) and M = (1 − q)P + qQ (a patient sampled with probability q), RDP needs both
D_α(M || P) and D_α(P || M). The bound expands the first exactly; the proof shows the second is no
larger when the pair is symmetric. These tests compute both directions by summing over the support
of real Skellam noise, and show that the lemma fails for an asymmetric pair, so it is the symmetry
that carries the proof, not the check.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from scipy.special import gammaln, logsumexp
from scipy.stats import skellam

from secure_fed.dp.accountants import epsilon_rdp
from secure_fed.dp.events import SkellamSum, from_json, rounded_sensitivities
from secure_fed.dp.skellam import ORDERS, _subsampled_curve, skellam_rdp
from secure_fed.verifier.accounting import StreamAccountant


def _two_point_gap(q: float, ratio: float, alpha: float) -> mpmath.mpf:
    """ψ(ℓ) / a^α, the lemma's two-point inequality E[W^α] − E[W^(1−α)] at ℓ = ratio, rescaled;
    in 50-digit arithmetic, since at q = 1 it is exactly zero and floats leave 1e-9 residues."""
    with mpmath.workdps(50):
        q_, ratio_, alpha_ = mpmath.mpf(q), mpmath.mpf(ratio), mpmath.mpf(alpha)
        a, b = 1 - q_ + q_ * ratio_, 1 - q_ + q_ / ratio_
        return (a**alpha_ - a ** (1 - alpha_) + ratio_ * (b**alpha_ - b ** (1 - alpha_))) / a**alpha_


def test_the_two_point_lemma_holds_on_a_grid() -> None:
    gaps = [
        _two_point_gap(q, ratio, alpha)
        for q in np.linspace(0.001, 1.0, 25)
        for ratio in np.exp(np.linspace(1e-3, 12.0, 60))
        for alpha in (1.1, 1.5, 2.0, 3.0, 8.0, 32.0, 256.0)
    ]
    assert min(gaps) >= -(mpmath.mpf(10) ** -40)  # equality only at q = 1: the directions coincide
    assert max(gaps) > 0.1


def _log_pmfs(mu: float, shift: tuple[int, ...], radius: int) -> tuple[np.ndarray, np.ndarray]:
    """log P and log Q on the grid [−radius, radius]^d: Skellam of variance mu per coordinate
    and its shift by `shift`."""
    axis = np.arange(-radius, radius + 1)
    grids = np.meshgrid(*([axis] * len(shift)), indexing="ij")
    log_p = sum(skellam.logpmf(g, mu / 2, mu / 2) for g in grids)
    log_q = sum(skellam.logpmf(g - v, mu / 2, mu / 2) for g, v in zip(grids, shift, strict=True))
    return np.ravel(log_p), np.ravel(log_q)


def _renyi(log_a: np.ndarray, log_b: np.ndarray, alpha: float) -> float:
    """D_α(A || B) by summation."""
    return float(logsumexp(alpha * log_a + (1 - alpha) * log_b) / (alpha - 1))


def _expansion(q: float, alpha: int, divergence: dict[int, float]) -> float:
    terms = [alpha * math.log1p(-q), math.log(alpha * q) + (alpha - 1) * math.log1p(-q)]
    for level in range(2, alpha + 1):
        log_choose = gammaln(alpha + 1) - gammaln(level + 1) - gammaln(alpha - level + 1)
        terms.append(
            log_choose
            + level * math.log(q)
            + (alpha - level) * math.log1p(-q)
            + (level - 1) * divergence[level]
        )
    return float(logsumexp(terms) / (alpha - 1))


CASES = [  # (mu, shift, q): coarse noise, where the Skellam differs from a Gaussian most
    (4.0, (3,), 0.1),
    (1.0, (2,), 0.5),
    (25.0, (7,), 0.02),
    (2.0, (5,), 0.9),
    (3.0, (2, -1), 0.1),
    (6.0, (3, 3), 0.3),
]


@pytest.mark.parametrize(("mu", "shift", "q"), CASES)
def test_on_skellam_noise_the_reverse_direction_is_no_larger(
    mu: float, shift: tuple[int, ...], q: float
) -> None:
    log_p, log_q = _log_pmfs(mu, shift, radius=90 if len(shift) == 1 else 40)
    log_m = np.logaddexp(math.log1p(-q) + log_p, math.log(q) + log_q)
    exact = {level: _renyi(log_q, log_p, level) for level in range(2, 17)}
    l2 = math.sqrt(sum(v * v for v in shift))
    l1 = float(sum(abs(v) for v in shift))
    bound = _subsampled_curve(q, skellam_rdp(np.arange(2, 17, dtype=np.float64), l1, l2, mu), "symmetric")
    for alpha in (2, 3, 5, 8, 16):
        forward = _renyi(log_m, log_p, alpha)  # sampled vs. unsampled
        reverse = _renyi(log_p, log_m, alpha)
        assert reverse <= forward + 1e-12
        # the expansion is exact for the forward direction...
        assert forward == pytest.approx(_expansion(q, alpha, exact), rel=1e-9, abs=1e-12)
        # ...and the accounted curve (Agarwal et al.'s bound on each E[L^l]) lies above both
        assert max(forward, reverse) <= bound[alpha - 2] * (1 + 1e-9) + 1e-12


def test_for_an_asymmetric_pair_the_reverse_direction_can_be_larger() -> None:
    """Without the symmetry the expansion is not an RDP bound: here D_α(P || M) exceeds it."""
    log_p = np.log(np.array([0.5, 0.5]))
    log_q = np.log(np.array([0.001, 0.999]))
    q = 0.9
    log_m = np.logaddexp(math.log1p(-q) + log_p, math.log(q) + log_q)
    exact = {level: _renyi(log_q, log_p, level) for level in range(2, 9)}
    reverse = _renyi(log_p, log_m, 8)
    assert reverse > _renyi(log_m, log_p, 8)
    assert reverse > _expansion(q, 8, exact)


def test_the_factor_three_is_what_separates_the_two_bounds() -> None:
    base = np.arange(2, 40, dtype=np.float64) / (2 * 1.3**2)  # a Gaussian's curve, z = 1.3
    general = _subsampled_curve(0.1, base, "general")
    symmetric = _subsampled_curve(0.1, base, "symmetric")
    assert np.all(symmetric <= general)
    assert symmetric[0] == general[0]  # order 2 has no term of order ≥ 3
    assert np.all(symmetric[1:] < general[1:])
    with pytest.raises(ValueError, match="amplification"):
        _subsampled_curve(0.1, base, "tight")


def test_the_symmetric_gaussian_curve_is_opacus_sampled_gaussian() -> None:
    """On a Gaussian's base curve the symmetric expansion is the sampled Gaussian's exact RDP at
    integer orders (Mironov, Talwar & Zhang 2019), which Opacus computes independently."""
    from opacus.accountants.analysis import rdp as rdp_analysis

    orders = np.asarray(ORDERS[:60], dtype=np.float64)
    for q, z in ((0.1, 0.9), (0.02, 1.6), (0.5, 3.0)):
        ours = _subsampled_curve(q, orders / (2 * z * z), "symmetric")
        theirs = np.asarray(rdp_analysis.compute_rdp(q=q, noise_multiplier=z, steps=1, orders=list(orders)))
        np.testing.assert_allclose(ours, theirs, rtol=1e-6)


def _event(amplification: str | None) -> dict[str, object]:
    l2, l1 = rounded_sensitivities(1.0, 1e-4, 1024)
    event = SkellamSum(
        sampling_rate=0.1,
        count=50,
        clip=1.0,
        gamma=1e-4,
        dim=1000,
        padded_dim=1024,
        mu_total=(1.5 * l2) ** 2,
        l2_sensitivity=l2,
        l1_sensitivity=l1,
        bits=48,
        honest_min=4,
        colluders=1,
        amplification=amplification or "general",
    ).to_json()
    if amplification is None:
        del event["amplification"]  # as logged before the key existed
    return event


def test_a_logged_event_is_priced_with_its_own_bound_by_the_site_and_the_verifier() -> None:
    prices = {}
    for amplification in ("symmetric", "general", None):
        logged = _event(amplification)
        mine = epsilon_rdp([from_json(logged)], 1e-5)
        stream = StreamAccountant()
        stream.compose(logged)
        assert stream.epsilon_rdp(1e-5) == pytest.approx(mine, rel=1e-9)
        prices[amplification] = mine
    assert prices[None] == prices["general"]  # an old log re-derives as it was logged
    assert prices["symmetric"] < prices["general"]


def test_an_unknown_bound_is_refused_by_the_site_and_the_verifier() -> None:
    from secure_fed.dp.events import EventFormatError
    from secure_fed.verifier.accounting import EventError

    forged = {**_event("symmetric"), "amplification": "none"}
    with pytest.raises(EventFormatError, match="amplification"):
        from_json(forged)
    with pytest.raises(EventError, match="amplification"):
        StreamAccountant().compose(forged)
