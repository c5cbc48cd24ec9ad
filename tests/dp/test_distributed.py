"""Distributed DP (dp/distributed/): the encoding, the noise shares, the ring and the accounting."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from opacus.accountants.analysis import rdp as opacus_rdp
from scipy import stats
from scipy.special import logsumexp

from secure_fed.dp.accountants import epsilon_rdp, prv_epsilon
from secure_fed.dp.distributed import (
    DistributedPlan,
    centre,
    decode_sum,
    distributed_epsilon,
    encode_share,
    padded_size,
    plan_distributed,
    rotate,
    unrotate,
)
from secure_fed.dp.events import EventFormatError, SkellamSum, from_json, rounded_sensitivities
from secure_fed.dp.keystream import NoiseStream
from secure_fed.dp.skellam import ORDERS, poisson_subsampled_rdp, skellam_rdp

SEED = bytes(range(32))
Q, STEPS, DELTA = 0.02, 200, 1e-5


def _plan(**overrides: object) -> DistributedPlan:
    kwargs: dict[str, object] = dict(
        target_epsilon=2.0,
        delta=DELTA,
        sample_rate=Q,
        steps=STEPS,
        clip=1.0,
        dim=1000,
        honest_min=3,
        colluders=1,
        bits=32,
        max_sites=10,
        site_bound=4.0,
    )
    kwargs.update(overrides)
    return plan_distributed(**kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def plan() -> DistributedPlan:
    return _plan()


def _ring_sum(shares: list[np.ndarray], bits: int) -> np.ndarray:
    total = np.zeros_like(shares[0])
    for share in shares:
        total += share  # uint64 wraps mod 2^64, a multiple of 2^bits
    return total & np.uint64((1 << bits) - 1)


def test_the_rotation_is_orthogonal() -> None:
    padded = 16
    basis = np.stack([rotate(np.eye(padded)[i], SEED, padded) for i in range(padded)])
    np.testing.assert_allclose(basis @ basis.T, np.eye(padded), atol=1e-12)
    np.testing.assert_allclose(np.abs(basis), 1 / math.sqrt(padded), atol=1e-12)  # spikes spread evenly
    x = np.random.default_rng(1).normal(size=1000)
    y = rotate(x, SEED, 1024)
    assert math.isclose(float(np.linalg.norm(y)), float(np.linalg.norm(x)), rel_tol=1e-12)
    np.testing.assert_allclose(unrotate(y, SEED, 1000), x, atol=1e-12)
    # the signs come from the seed: another round rotates differently
    assert not np.allclose(rotate(x, bytes(32), 1024), y)
    # past one block (4096) the rotation is blockwise: 5000 coordinates pad to 8192, not more
    assert padded_size(5000) == 8192 and padded_size(68_000) == 69_632 and padded_size(1000) == 1024
    x = np.random.default_rng(2).normal(size=5000)
    y = rotate(x, SEED, 8192)
    assert math.isclose(float(np.linalg.norm(y)), float(np.linalg.norm(x)), rel_tol=1e-12)
    np.testing.assert_allclose(unrotate(y, SEED, 5000), x, atol=1e-12)
    assert float(np.abs(y[4096:]).max()) > 0.1  # the second block is rotated too


def test_the_sum_of_k_shares_decodes_to_the_sum_within_the_rounding_error(plan: DistributedPlan) -> None:
    rng = np.random.default_rng(2)
    k = 5
    vectors = [rng.normal(size=plan.dim) for _ in range(k)]
    vectors = [v * (3.0 / np.linalg.norm(v)) for v in vectors]
    quiet = dataclasses.replace(plan, share_mu=0.0)
    shares = [encode_share(v, quiet, SEED, NoiseStream(bytes([10 + i]) * 32)) for i, v in enumerate(vectors)]
    assert all(s.dtype == np.uint64 and s.shape == (plan.padded_dim,) for s in shares)
    assert all(int(s.max()) < 2**plan.bits for s in shares)
    error = decode_sum(_ring_sum(shares, plan.bits), quiet, SEED) - sum(vectors)
    # each site's rounding moves each rotated coordinate by < 1 unit; the inverse rotation is orthogonal
    assert float(np.linalg.norm(error)) <= k * math.sqrt(plan.padded_dim) * plan.gamma
    # ... and is unbiased: the error is far below its worst case
    assert float(np.linalg.norm(error)) < 0.2 * k * math.sqrt(plan.padded_dim) * plan.gamma
    # with the noise, the decoded sum carries k shares' Skellam variance per coordinate
    noisy = [encode_share(v, plan, SEED, NoiseStream(bytes([20 + i]) * 32)) for i, v in enumerate(vectors)]
    noise = decode_sum(_ring_sum(noisy, plan.bits), plan, SEED) - sum(vectors)
    expected = plan.gamma * math.sqrt(k * plan.share_mu)
    assert abs(float(noise.std()) / expected - 1) < 0.1


def test_a_site_sum_beyond_site_bound_is_projected_onto_the_ball(plan: DistributedPlan) -> None:
    quiet = dataclasses.replace(plan, share_mu=0.0)
    big = np.full(plan.dim, 1.0)  # norm √1000 ≈ 31.6 > site_bound 4
    decoded = decode_sum(encode_share(big, quiet, SEED, NoiseStream(bytes([3]) * 32)), quiet, SEED)
    assert abs(float(np.linalg.norm(decoded)) - plan.site_bound) < math.sqrt(plan.padded_dim) * plan.gamma


def test_one_patient_moves_the_rounded_share_by_at_most_the_accounted_sensitivity() -> None:
    # The accounting charges Δ₂ = C/γ + √D (+ slack) and Δ₁ ≤ min(√D·Δ₂, Δ₂²). Neighbouring site
    # sums S and S + g (‖g‖ = C) encoded with the same secret randomness differ exactly by the
    # coupled rounding of g. Coarse granularity (few units per C) makes the rounding matter.
    # (a plan would refuse such an inflation; the encoder's arithmetic is the same at any γ)
    plan = _with_gamma(_plan(bits=16, dim=64, site_bound=2.0, max_sites=3), 0.25)
    quiet = dataclasses.replace(plan, share_mu=0.0)
    noisy = plan
    rng = np.random.default_rng(4)
    largest = 0.0
    for trial in range(200):
        base = rng.normal(size=plan.dim)
        base *= rng.uniform(0, 1.0) / np.linalg.norm(base)
        g = rng.normal(size=plan.dim)
        g *= plan.clip / np.linalg.norm(g)
        for encoding in (quiet, noisy):
            a = encode_share(base, encoding, SEED, NoiseStream(bytes([trial]) * 32))
            b = encode_share(base + g, encoding, SEED, NoiseStream(bytes([trial]) * 32))
            v = centre(b.astype(np.int64) - a.astype(np.int64), plan.bits).astype(np.float64)
            assert float(np.linalg.norm(v)) <= plan.l2_sensitivity
            assert float(np.abs(v).sum()) <= plan.l1_sensitivity
            largest = max(largest, float(np.linalg.norm(v)))
    # the rounding inflation is real: charging C/γ alone would under-count one patient's influence
    assert largest > plan.clip / plan.gamma


def test_the_honest_shares_sum_to_mu_total(plan: DistributedPlan) -> None:
    l2, l1 = rounded_sensitivities(plan.clip, plan.gamma, 1 << 16)
    big = dataclasses.replace(plan, dim=1 << 16, padded_dim=1 << 16, l2_sensitivity=l2, l1_sensitivity=l1)
    honest = big.honest_min - big.colluders
    zero = np.zeros(big.dim)
    shares = [encode_share(zero, big, SEED, NoiseStream(bytes([30 + i]) * 32)) for i in range(honest)]
    total = centre(_ring_sum(shares, big.bits), big.bits).astype(np.float64)
    # 65536 coordinates: the sample variance is within ~0.55% (one s.e.) of the true one
    assert abs(float(total.var()) / big.mu_total - 1) < 0.025
    assert abs(float(total.mean())) < 4 * math.sqrt(big.mu_total / big.dim)
    assert math.isclose(big.share_mu * honest, big.mu_total, rel_tol=1e-12)


def _with_gamma(plan: DistributedPlan, gamma: float) -> DistributedPlan:
    l2, l1 = rounded_sensitivities(plan.clip, gamma, plan.padded_dim)
    return dataclasses.replace(plan, gamma=gamma, l2_sensitivity=l2, l1_sensitivity=l1)


def test_max_sites_worst_case_inputs_do_not_wrap_and_more_sites_do() -> None:
    plan = _plan(bits=24, dim=1024, max_sites=8, site_bound=1.0)
    # the worst input for the ring: every site's vector rotates onto one coordinate at full norm
    spike = unrotate(np.eye(plan.padded_dim)[0] * plan.site_bound, SEED, plan.dim)
    assert plan.wrap_bound_sites >= plan.max_sites

    def error(sites: int) -> float:
        shares = [encode_share(spike, plan, SEED, NoiseStream(bytes([40 + i]) * 32)) for i in range(sites)]
        decoded = decode_sum(_ring_sum(shares, plan.bits), plan, SEED)
        return float(np.abs(decoded - sites * spike).max())

    noise_bound = 8 * plan.gamma * math.sqrt(plan.wrap_bound_sites * plan.share_mu)
    assert error(plan.wrap_bound_sites) < noise_bound
    # the check can fail: enough sites at full norm overflow the ring by a whole modulus
    overflow = int(2 ** (plan.bits - 1) * plan.gamma / plan.site_bound) + 2
    assert error(overflow) > 2 ** (plan.bits - 2) * plan.gamma / math.sqrt(plan.padded_dim)


def test_skellam_rdp_bounds_the_exact_divergence_and_tends_to_the_gaussian() -> None:
    # exact Rényi divergence of a shifted 1-D Skellam of variance mu, by summing its pmf
    for mu in (2.0, 10.0, 50.0):
        lam = mu / 2
        k = np.arange(-int(40 * math.sqrt(mu)) - 60, int(40 * math.sqrt(mu)) + 60)
        for shift in (1, 3):
            lp = stats.skellam.logpmf(k, lam, lam)
            lq = stats.skellam.logpmf(k - shift, lam, lam)
            ok = np.isfinite(lp) & np.isfinite(lq)
            for alpha in (2, 5, 20):
                exact = float(logsumexp(alpha * lq[ok] + (1 - alpha) * lp[ok])) / (alpha - 1)
                assert exact <= skellam_rdp(alpha, shift, shift, mu) + 1e-12
    # as mu grows at a fixed noise multiplier σ = √mu / Δ₂, the bound is the Gaussian's α/(2σ²)
    sigma = 1.3
    for alpha in (2, 10, 64):
        values = [skellam_rdp(alpha, 100 * l2, l2, (sigma * l2) ** 2) for l2 in (10.0, 1e3, 1e5)]
        gaussian = alpha / (2 * sigma**2)
        assert values[0] > values[1] > values[2] >= gaussian
        assert values[2] / gaussian - 1 < 1e-6


def test_the_subsampled_bound_lies_between_the_exact_gaussian_and_the_unsampled() -> None:
    sigma = 1.1
    gaussian = lambda level: level / (2 * sigma**2)  # noqa: E731
    for q in (0.001, 0.01, 0.1):
        for alpha in (2, 3, 8, 32):
            bound = poisson_subsampled_rdp(alpha, q, gaussian)
            exact = float(opacus_rdp.compute_rdp(q=q, noise_multiplier=sigma, steps=1, orders=[alpha])[0])
            assert exact <= bound * (1 + 1e-9)
            assert bound < gaussian(alpha)  # sampling amplifies
    assert poisson_subsampled_rdp(5, 1.0, gaussian) == gaussian(5)
    assert poisson_subsampled_rdp(5, 0.0, gaussian) == 0.0
    with pytest.raises(ValueError, match="integer"):
        poisson_subsampled_rdp(2.5, 0.1, gaussian)  # type: ignore[arg-type]


def test_calibration_hits_the_target_and_the_ledger_prices_the_same(plan: DistributedPlan) -> None:
    eps = distributed_epsilon(plan, Q, STEPS, DELTA)
    assert 2.0 - 1e-3 <= eps <= 2.0
    event = plan.event(Q, STEPS)
    assert epsilon_rdp([event], DELTA) == eps
    assert epsilon_rdp(iter([event]), DELTA) == eps  # a generator of events is priced, not spent
    assert prv_epsilon([event], DELTA).epsilon is None  # no PRV for it: the RDP value is used
    # composed with a Gaussian release it costs more than either alone
    from secure_fed.dp.events import Gaussian

    assert epsilon_rdp([event, Gaussian(5.0, 1)], DELTA) > eps
    # the Skellam noise is never below the Gaussian's at the same (ε, δ): z = √mu / Δ₂ ≥ σ
    from secure_fed.dp.calibration import calibrate_noise

    sigma = calibrate_noise(2.0, DELTA, Q, STEPS, tolerance=1e-4)
    z = math.sqrt(plan.mu_total) / plan.l2_sensitivity
    assert z >= sigma
    assert z / sigma < 1.15  # pinned: the general amplification bound costs 5-7% here
    assert sorted(ORDERS) == list(range(2, 257))


def test_too_few_bits_are_refused_naming_the_knob() -> None:
    with pytest.raises(ValueError, match=r"bits=12.*dp\.ring_bits"):
        _plan(bits=12, dim=68000, max_sites=50, site_bound=20.0)
    with pytest.raises(ValueError, match="honest_min"):
        _plan(honest_min=2, colluders=2)


def test_plan_and_event_json_round_trip_and_tampering_is_refused(plan: DistributedPlan) -> None:
    assert DistributedPlan.from_json(plan.to_json()) == plan
    event = plan.event(Q, STEPS)
    assert from_json(event.to_json()) == event
    assert SkellamSum.from_json(event.to_json()) == event
    forged = {**event.to_json(), "l2_sensitivity": event.l2_sensitivity / 2}
    with pytest.raises(EventFormatError, match="do not follow"):
        from_json(forged)
    with pytest.raises(ValueError, match="missing keys"):
        DistributedPlan.from_json({k: v for k, v in plan.to_json().items() if k != "gamma"})


def test_calibration_with_fixed_releases_meets_the_target_of_the_composition() -> None:
    # the GMM histogram (a Gaussian on the same patients) and the rounds are priced together by the
    # ledger; calibrating the rounds alone to the rest of ε would leave the composition off target
    from secure_fed.dp.calibration import calibrate_gaussian
    from secure_fed.dp.events import Gaussian

    histogram = Gaussian(calibrate_gaussian(0.2, DELTA), 1)
    plan = _plan(fixed_events=[histogram])
    together = epsilon_rdp([histogram, plan.event(Q, STEPS)], DELTA)
    assert 2.0 - 1e-3 <= together <= 2.0
    assert distributed_epsilon(plan, Q, STEPS, DELTA) < together
    with pytest.raises(ValueError, match="already spend"):
        _plan(fixed_events=[Gaussian(0.3, 1)])


@pytest.mark.parametrize("accountant", ["rdp", "prv"])
def test_the_budget_guard_admits_every_planned_round_and_refuses_the_next(
    plan: DistributedPlan, accountant: str
) -> None:
    # a site charges one event a round; a budget equal to the target admits exactly the plan
    from secure_fed.dp.budget import BudgetGuard
    from secure_fed.dp.ledger import PrivacyLedger

    guard = BudgetGuard(PrivacyLedger(), 2.0, accountant=accountant)  # type: ignore[arg-type]
    step = [("dp_sgd", plan.event(Q, 1))]
    admitted = [guard.admit("a", "train", step, DELTA, round=r).ok for r in range(1, STEPS + 1)]
    assert all(admitted)
    refused = guard.admit("a", "train", step, DELTA, round=STEPS + 1)
    assert not refused.ok and "over its budget" in refused.reason
