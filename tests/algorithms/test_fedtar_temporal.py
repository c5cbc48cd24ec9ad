"""Temporal residual aggregation (FedTAR server math): snapshots, the residual chain, its
derivatives and the meta-learned α. Pure numpy/torch, no model, no transport."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from secure_fed.algorithms.fedtar.strategy import FedTAR, meta_rate
from secure_fed.algorithms.fedtar.temporal import (
    MetaUpdater,
    TemporalMetaLearner,
    alpha_bounds,
    chain_weights,
    convex_combination,
    matched_step_scale,
    residual_chain,
    temporal_step,
    weighted_snapshots,
)

SEEDS = range(40)


def convex_weights(alpha: np.ndarray, present: np.ndarray) -> np.ndarray:
    """Thm. 1 with w^(0)'s weight first: w^(T) = c_0 w^(0) + Σ_t c_t w̄^(t)."""
    c = chain_weights(alpha, present)
    return np.concatenate([[1.0 - c.sum()], c])


def random_case(seed: int, dim: int = 7, t_max: int = 4) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    start = rng.normal(size=dim)
    snapshots = start + rng.normal(scale=rng.uniform(0.1, 3.0), size=(t_max, dim))
    # Half the seeds use α from the simplex (what the learner outputs), half arbitrary α ∈ [0, 1]:
    # the theorems need only the latter.
    alpha = rng.dirichlet(np.ones(t_max)) if seed % 2 else rng.uniform(0.0, 1.0, size=t_max)
    return start, snapshots, alpha


# -- hand-computed example: 2 sites, T = 3, D = 2 -----------------------------------------------


def hand_example() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    start = np.array([0.0, 1.0])
    # Site A has no third visit; the uploads are Σ n Δ per visit index and n, as in a FedTAR round.
    n_a, d_a = np.array([2.0, 1.0, 0.0]), np.array([[1.0, 0.0], [0.0, 2.0], [0.0, 0.0]])
    n_b, d_b = np.array([2.0, 3.0, 4.0]), np.array([[3.0, 2.0], [4.0, -2.0], [-1.0, 1.0]])
    sums = n_a[:, None] * d_a + n_b[:, None] * d_b
    counts = n_a + n_b
    alpha = np.array([0.5, 0.25, 0.25])
    return start, sums, counts, alpha


def test_weighted_snapshots_by_hand() -> None:
    start, sums, counts, _ = hand_example()
    # t=1: (2·[1,0] + 2·[3,2]) / 4 = [2, 1]   → [2, 2]
    # t=2: (1·[0,2] + 3·[4,−2]) / 4 = [3, −1] → [3, 0]
    # t=3: (0 + 4·[−1,1]) / 4 = [−1, 1]       → [−1, 2]
    expected = np.array([[2.0, 2.0], [3.0, 0.0], [-1.0, 2.0]])
    np.testing.assert_allclose(weighted_snapshots(start, sums, counts), expected, rtol=0, atol=1e-15)


def test_weighted_snapshot_without_visits_keeps_start() -> None:
    start = np.array([0.5, -1.0, 2.0])
    sums = np.array([[3.0, 3.0, 3.0], [0.0, 0.0, 0.0]])
    snaps = weighted_snapshots(start, sums, np.array([3.0, 0.0]))
    np.testing.assert_array_equal(snaps[0], start + 1.0)
    np.testing.assert_array_equal(snaps[1], start)  # no 0/0
    assert np.isfinite(snaps).all()


def test_residual_chain_by_hand() -> None:
    start, sums, counts, alpha = hand_example()
    chain = residual_chain(start, weighted_snapshots(start, sums, counts), alpha)
    # w1 = [0,1] + ½([2,2] − [0,1]) = [1, 1.5]
    # w2 = [1,1.5] + ¼([3,0] − [1,1.5]) = [1.5, 1.125]
    # w3 = [1.5,1.125] + ¼([−1,2] − [1.5,1.125]) = [0.875, 1.34375]
    expected_states = np.array([[0.0, 1.0], [1.0, 1.5], [1.5, 1.125], [0.875, 1.34375]])
    np.testing.assert_allclose(chain.states, expected_states, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(chain.final, chain.states[-1])
    # ∂w3/∂α3 = w̄3 − w2 = [−2.5, 0.875]
    # ∂w3/∂α2 = (1 − α3)(w̄2 − w1) = ¾[2, −1.5] = [1.5, −1.125]
    # ∂w3/∂α1 = (1 − α3)(1 − α2)(w̄1 − w0) = (9/16)[2, 1] = [1.125, 0.5625]
    expected_dirs = np.array([[1.125, 0.5625], [1.5, -1.125], [-2.5, 0.875]])
    np.testing.assert_allclose(chain.directions, expected_dirs, rtol=0, atol=1e-15)
    # Thm. 1 weights: c0 = c1 = ½·¾·¾ = 0.28125, c2 = ¼·¾ = 0.1875, c3 = ¼.
    np.testing.assert_allclose(
        convex_weights(alpha, np.ones(3, bool)), [0.28125, 0.28125, 0.1875, 0.25], rtol=0, atol=1e-15
    )


# -- Theorems 1 and 2, property style --------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_final_state_in_convex_hull(seed: int) -> None:
    """Thm. 1: w^(T) is a convex combination of w^(0) and the snapshots. The weights are recovered
    by solving the linear system (D > T + 1, so the points are affinely independent almost surely),
    then compared with the closed form."""
    start, snapshots, alpha = random_case(seed)
    present = np.ones(len(alpha), dtype=bool)
    chain = residual_chain(start, snapshots, alpha)
    points = np.vstack([start, snapshots])  # (T + 1, D)
    system = np.vstack([points.T, np.ones(len(points))])  # (D + 1, T + 1)
    rhs = np.concatenate([chain.final, [1.0]])
    solved, *_ = np.linalg.lstsq(system, rhs, rcond=None)
    np.testing.assert_allclose(system @ solved, rhs, atol=1e-10)
    assert solved.min() >= -1e-10
    assert solved.sum() == pytest.approx(1.0, abs=1e-10)
    closed = convex_weights(alpha, present)
    np.testing.assert_allclose(solved, closed, atol=1e-8)
    np.testing.assert_allclose(closed @ points, chain.final, atol=1e-12)
    # Every intermediate state too: w^(t) is in the hull of w^(0), w̄^(1..t).
    for t in range(1, len(alpha) + 1):
        c = convex_weights(alpha[:t], present[:t])
        assert c.min() >= 0 and c.sum() == pytest.approx(1.0, abs=1e-12)
        np.testing.assert_allclose(c @ points[: t + 1], chain.states[t], atol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_matched_step_scale_makes_the_chained_noise_one_step(seed: int) -> None:
    """Snapshots that are the start plus independent unit noise each: scaled by the factor, the
    chain's displacement has the size of one of them (what FedAvg's round moves at the same lr)."""
    rng = np.random.default_rng(seed)
    t_max, dim = 5, 200_000
    alpha = rng.dirichlet(np.ones(t_max)) if seed % 2 else np.full(t_max, 1.0 / t_max)
    start = rng.normal(size=dim)
    steps = rng.normal(size=(t_max, dim))
    scale = matched_step_scale(alpha)
    moved = residual_chain(start, start + scale * steps, alpha).final - start
    assert np.sqrt(np.mean(moved**2)) == pytest.approx(1.0, rel=0.01)


def test_matched_step_scale_by_hand() -> None:
    # uniform α at T = 5: c = 0.2·(0.8⁴, 0.8³, 0.8², 0.8, 1), Σc² = 0.0992…
    c = 0.2 * 0.8 ** np.arange(4, -1, -1)
    assert matched_step_scale(np.full(5, 0.2)) == pytest.approx(1 / np.sqrt(np.sum(c**2)), rel=1e-12)
    assert matched_step_scale(np.full(5, 0.2)) == pytest.approx(3.175, abs=1e-3)
    assert matched_step_scale(np.array([0.0, 0.0, 1.0, 0.0, 0.0])) == pytest.approx(1.0)


@pytest.mark.parametrize("seed", SEEDS)
def test_step_length_is_alpha_times_residual(seed: int) -> None:
    """Thm. 2: ‖w^(t) − w^(t−1)‖ ≤ α_t ‖w̄^(t) − w^(t−1)‖, and the chain meets it with equality."""
    start, snapshots, alpha = random_case(seed)
    chain = residual_chain(start, snapshots, alpha)
    for t in range(len(alpha)):
        step = np.linalg.norm(chain.states[t + 1] - chain.states[t])
        residual = np.linalg.norm(snapshots[t] - chain.states[t])
        assert step <= alpha[t] * residual * (1 + 1e-12) + 1e-15
        assert step == pytest.approx(alpha[t] * residual, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("seed", SEEDS)
def test_directions_are_derivatives(seed: int) -> None:
    """∂w^(T)/∂α_t by central differences. w^(T) is affine in each α_t separately, so the central
    difference is exact up to rounding and the tolerance can be tight."""
    rng = np.random.default_rng(1000 + seed)
    start, snapshots, alpha = random_case(seed)
    present = rng.random(len(alpha)) < 0.75
    chain = residual_chain(start, snapshots, alpha, present=present)
    h = 1e-4
    for t in range(len(alpha)):
        up, down = alpha.copy(), alpha.copy()
        up[t] += h
        down[t] -= h
        fd = (
            residual_chain(start, snapshots, up, present=present).final
            - residual_chain(start, snapshots, down, present=present).final
        ) / (2 * h)
        np.testing.assert_allclose(chain.directions[t], fd, rtol=1e-7, atol=1e-9)


def test_absent_visit_index_is_skipped() -> None:
    rng = np.random.default_rng(3)
    start = rng.normal(size=5)
    snapshots = rng.normal(size=(3, 5))
    # The absent snapshot is deliberately far from everything: it must not pull the chain anywhere.
    snapshots[1] = 1e6
    alpha = np.array([0.3, 0.4, 0.3])
    present = np.array([True, False, True])
    chain = residual_chain(start, snapshots, alpha, present=present)
    np.testing.assert_array_equal(chain.states[2], chain.states[1])
    np.testing.assert_array_equal(chain.directions[1], np.zeros(5))
    # Same result as the chain over the present indices only, with the absent α never applied:
    # the earlier direction is scaled by (1 − α_3) only, not by (1 − α_2).
    reduced = residual_chain(start, snapshots[[0, 2]], alpha[[0, 2]])
    np.testing.assert_allclose(chain.final, reduced.final, rtol=0, atol=1e-12)
    np.testing.assert_allclose(chain.directions[[0, 2]], reduced.directions, rtol=0, atol=1e-12)
    assert np.abs(chain.final).max() < 10  # nothing of the 1e6 leaked in
    # Without the mask the zero-count snapshot (= start, from weighted_snapshots) would pull back.
    snaps_from_sums = weighted_snapshots(
        start, np.zeros((3, 5)) + np.array([[1.0], [0.0], [2.0]]), np.array([1.0, 0.0, 1.0])
    )
    masked = residual_chain(start, snaps_from_sums, alpha, present=np.array([True, False, True]))
    unmasked = residual_chain(start, snaps_from_sums, alpha)
    assert not np.allclose(masked.final, unmasked.final)


def test_all_absent_keeps_start() -> None:
    start = np.arange(4.0)
    chain = residual_chain(start, np.ones((3, 4)) * 9.0, np.full(3, 1 / 3), present=np.zeros(3, bool))
    np.testing.assert_array_equal(chain.final, start)
    np.testing.assert_array_equal(chain.directions, np.zeros((3, 4)))


# -- the meta-learner --------------------------------------------------------------------------------


@pytest.mark.parametrize("t_max", [1, 3, 6])
def test_learner_starts_uniform_and_sums_to_one(t_max: int) -> None:
    learner = TemporalMetaLearner(t_max, embed_dim=16, seed=5)
    alpha = learner.alpha()
    assert alpha.shape == (t_max,)
    np.testing.assert_allclose(alpha, np.full(t_max, 1.0 / t_max), rtol=0, atol=1e-7)
    assert alpha.sum() == pytest.approx(1.0, abs=1e-7)
    # Still on the simplex after arbitrary updates.
    updater = MetaUpdater(learner, lr=0.1)
    rng = np.random.default_rng(t_max)
    for _ in range(5):
        alpha = updater.step(rng.normal(size=t_max))
        assert (alpha > 0).all()
        assert alpha.sum() == pytest.approx(1.0, abs=1e-6)


def test_alpha_moves_towards_favoured_visit_index() -> None:
    """∂L_val/∂α_2 < 0 (a larger α_2 lowers the loss) → α_2 grows and becomes the largest."""
    learner = TemporalMetaLearner(3, embed_dim=32, seed=0)
    updater = MetaUpdater(learner, lr=0.01)
    before = learner.alpha()
    grad = np.array([0.2, -1.0, 0.3])
    for _ in range(10):
        alpha = updater.step(grad)
    assert alpha[1] > before[1] + 0.05
    assert int(np.argmax(alpha)) == 1
    # α_1 and α_3 have positive hypergradients: they lose weight.
    assert alpha[0] < before[0] and alpha[2] < before[2]


def test_alpha_learns_from_chain_hypergradients() -> None:
    """End to end on the server math: L(α) = ½‖w^(T)(α) − w̄^(2)‖², hypergradient ⟨∇L, ∂w^(T)/∂α_t⟩
    from the chain's directions; descending it must raise α_2 and lower L."""
    rng = np.random.default_rng(11)
    start = rng.normal(size=6)
    snapshots = start + rng.normal(size=(3, 6))
    target = snapshots[1]
    learner = TemporalMetaLearner(3, seed=1)
    updater = MetaUpdater(learner, lr=0.02)

    def loss_and_grad(alpha: np.ndarray) -> tuple[float, np.ndarray]:
        chain = residual_chain(start, snapshots, alpha)
        resid = chain.final - target
        return 0.5 * float(resid @ resid), chain.directions @ resid

    alpha = learner.alpha()
    loss0, _ = loss_and_grad(alpha)
    for _ in range(30):
        _, grad = loss_and_grad(alpha)
        alpha = updater.step(grad)
    loss1, _ = loss_and_grad(alpha)
    assert loss1 < 0.8 * loss0
    assert int(np.argmax(alpha)) == 1


def test_meta_step_is_chain_rule_through_softmax() -> None:
    """The gradient reaching ψ equals J_softmax(u)ᵀ g: the α-gradient in the direction of the
    all-ones vector (which leaves α on the simplex unchanged) must have no effect."""
    learner = TemporalMetaLearner(4, seed=2)
    before = [p.detach().clone() for p in learner.parameters()]
    updater = MetaUpdater(learner, lr=0.1)
    updater.step(np.full(4, 3.0))
    grads = [p.grad for p in learner.parameters()]
    assert all(g is not None and torch.allclose(g, torch.zeros_like(g), atol=1e-7) for g in grads)
    # Adam with a zero gradient leaves the parameters where they were.
    for b, p in zip(before, learner.parameters(), strict=True):
        torch.testing.assert_close(p.detach(), b, atol=1e-7, rtol=0)


@pytest.mark.parametrize("step", ["chained", "matched"])
def test_distributed_fedtar_scales_its_copies_steps_only_when_matched(make_config, monkeypatch, step) -> None:
    """The same released gradient: 'matched' moves every visit index's snapshot by the scale of the
    round's α times the 'chained' step, so the chain's displacement grows by that factor."""
    from secure_fed.algorithms.fedtar import distributed

    dim, t_max = 6, 5
    gradient = np.random.default_rng(0).normal(size=t_max * dim)
    start = np.linspace(-1.0, 1.0, dim)
    moved: dict[str, np.ndarray] = {}
    for kind in ("chained", step):
        cfg = make_config(train__fedtar_step=kind, train__fedtar_release="copies")
        strategy = distributed.DistributedFedTAR(dim, t_max, cfg)
        monkeypatch.setattr(strategy, "train_phase", lambda ctx, state: ([0], {}, {}))
        monkeypatch.setattr(distributed, "noisy_gradient", lambda *a: (gradient, None))
        monkeypatch.setattr(strategy, "combine", lambda ctx, g, snaps, *a: snaps - g)
        moved[kind] = strategy.run_round(None, start)  # type: ignore[arg-type]
        alpha = strategy.alpha()
    factor = matched_step_scale(alpha) if step == "matched" else 1.0
    np.testing.assert_allclose(moved[step], factor * moved["chained"], rtol=1e-12)
    assert np.abs(moved["chained"]).max() > 0


# -- the convex reading (train.fedtar_chain = "convex"): w = Σ_t α_t w̄^(t) ------------------------


def test_convex_combination_by_hand() -> None:
    start, sums, counts, alpha = hand_example()
    snaps = weighted_snapshots(start, sums, counts)  # [2, 2], [3, 0], [−1, 2]
    step = convex_combination(start, snaps, alpha)
    # ½[2, 2] + ¼[3, 0] + ¼[−1, 2] = [1.5, 1.5]: none of w^(0) = [0, 1] is kept
    np.testing.assert_allclose(step.final, [1.5, 1.5], rtol=0, atol=1e-15)
    np.testing.assert_allclose(step.directions, snaps - start, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(step.states[0], start)
    np.testing.assert_allclose(chain_weights(alpha, kind="convex"), alpha)


def test_the_chain_keeps_a_third_of_the_start_and_the_convex_reading_none() -> None:
    """The two readings at uniform α, T = 5: the chain keeps Π(1 − α_t) = 0.8⁵ ≈ 0.33 of the round's
    start; the convex combination keeps nothing of it."""
    alpha = np.full(5, 0.2)
    assert 1.0 - chain_weights(alpha).sum() == pytest.approx(0.8**5, rel=1e-12)
    assert 0.8**5 == pytest.approx(0.328, abs=1e-3)
    assert 1.0 - chain_weights(alpha, kind="convex").sum() == pytest.approx(0.0, abs=1e-15)


@pytest.mark.parametrize("seed", SEEDS)
def test_convex_final_state_is_the_alpha_weighted_snapshots(seed: int) -> None:
    """Thm. 1 for the convex reading: with α on the simplex, w is a convex combination of the
    snapshots with weights α (solved from the points, then compared with α); an absent visit
    index's weight stays with the round's start."""
    rng = np.random.default_rng(2000 + seed)
    start, snapshots, _ = random_case(seed)
    alpha = rng.dirichlet(np.ones(len(snapshots)))
    step = convex_combination(start, snapshots, alpha)
    system = np.vstack([snapshots.T, np.ones(len(snapshots))])  # (D + 1, T)
    solved, *_ = np.linalg.lstsq(system, np.concatenate([step.final, [1.0]]), rcond=None)
    assert solved.min() >= -1e-10
    np.testing.assert_allclose(solved, alpha, atol=1e-8)
    np.testing.assert_allclose(alpha @ snapshots, step.final, atol=1e-12)
    present = np.array([True, False, True, True])
    partial = convex_combination(start, snapshots, alpha, present)
    expected = alpha[~present].sum() * start + alpha[present] @ snapshots[present]
    np.testing.assert_allclose(partial.final, expected, atol=1e-12)
    np.testing.assert_array_equal(partial.directions[1], np.zeros_like(start))


def softmax(u: np.ndarray) -> np.ndarray:
    e = np.exp(u - u.max())
    return e / e.sum()


@pytest.mark.parametrize("seed", range(10))
def test_convex_hypergradient_matches_finite_differences(seed: int) -> None:
    """∂L/∂u for the meta-learner's scores u (α = softmax(u)) of L(w) = ½‖w − y‖², w = Σ_t α_t w̄^(t):
    the directions' scalars ⟨∇L(w), d_t⟩, projected through the softmax Jacobian as MetaUpdater
    does, equal central differences of L in u. The sent directions w̄^(t) − w^(0) differ from
    ∂w/∂α_t = w̄^(t) by a shift common to every t, which the projection removes: both give the
    same gradient."""
    rng = np.random.default_rng(3000 + seed)
    start, snapshots, _ = random_case(seed, dim=9, t_max=5)
    target = rng.normal(size=start.size)
    u = rng.normal(size=5)

    def loss(scores: np.ndarray) -> float:
        w = convex_combination(start, snapshots, softmax(scores)).final
        return 0.5 * float(np.sum((w - target) ** 2))

    alpha = softmax(u)
    step = convex_combination(start, snapshots, alpha)
    grad_w = step.final - target
    jacobian = np.diag(alpha) - np.outer(alpha, alpha)
    sent = jacobian.T @ (step.directions @ grad_w)
    exact = jacobian.T @ (snapshots @ grad_w)  # ∂w/∂α_t = w̄^(t)
    h = 1e-6
    fd = np.array([(loss(u + h * np.eye(5)[t]) - loss(u - h * np.eye(5)[t])) / (2 * h) for t in range(5)])
    np.testing.assert_allclose(exact, fd, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(sent, fd, rtol=1e-6, atol=1e-8)
    # and through the real meta-learner: ψ receives the same gradient from either set of scalars
    grads = []
    for scalars in (step.directions @ grad_w, snapshots @ grad_w):
        learner = TemporalMetaLearner(5, seed=seed)
        MetaUpdater(learner, lr=0.1).step(scalars)
        grads.append(torch.cat([p.grad.flatten() for p in learner.parameters()]))
    # float32 ψ: the softmax's shift-invariant direction (the last bias) is 0 only up to the
    # rounding of the larger, uncentred scalars
    scale = float(np.abs(snapshots @ grad_w).max())
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-6 * scale)


def test_temporal_step_reads_the_configured_kind() -> None:
    start, snapshots, alpha = random_case(1)
    for kind, step in (("residual", residual_chain), ("convex", convex_combination)):
        np.testing.assert_array_equal(
            temporal_step(kind, start, snapshots, alpha).final, step(start, snapshots, alpha).final
        )
    # uniform α, T = 5: the matched scale of the convex reading is √5
    assert matched_step_scale(np.full(5, 0.2), "convex") == pytest.approx(np.sqrt(5.0), rel=1e-12)


# -- the floor and the default ψ update (issue 63) ---------------------------------------------------


def random_scores(seed: int, t_max: int) -> torch.Tensor:
    """Scores u from mild to saturating: up to ±1e4, where a plain softmax is one-hot in float64."""
    rng = np.random.default_rng(seed)
    return torch.tensor(rng.normal(size=t_max) * 10.0 ** rng.uniform(-2, 4), dtype=torch.float64)


@pytest.mark.parametrize("t_max", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("floor", [0.05, 0.1, 0.2, 0.3])
def test_the_floored_alpha_stays_within_its_bounds_for_every_score(t_max: int, floor: float) -> None:
    low, high = alpha_bounds(t_max, floor)
    assert low == pytest.approx(min(floor, 1.0 / t_max))
    if t_max >= 2 and floor * t_max <= 1:
        assert high == pytest.approx(1.0 - (t_max - 1) * floor)
    learner = TemporalMetaLearner(t_max, embed_dim=8, seed=3, floor=floor, init="torch")
    for seed in SEEDS:
        alpha = learner._floored(random_scores(seed, t_max)).numpy()
        assert alpha.min() >= low - 1e-12 and alpha.max() <= high + 1e-12
        assert alpha.sum() == pytest.approx(1.0, abs=1e-12)


def test_the_write_ups_bounds_hold_at_the_default_floor() -> None:
    """§4.1's α_t ∈ [0.1, 0.9] with weights that sum to 1: [0.1, 0.9] at T = 2, [0.1, 0.6] at T = 5."""
    assert alpha_bounds(2, 0.1) == pytest.approx((0.1, 0.9))
    assert alpha_bounds(5, 0.1) == pytest.approx((0.1, 0.6))
    # a floor above 1/T leaves α uniform: λ = 1
    assert alpha_bounds(4, 0.3) == pytest.approx((0.25, 0.25))


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_learned_alpha_keeps_the_floor_after_any_hypergradients(optimizer: str) -> None:
    """Huge, steady and noisy hypergradients alike: α never leaves [0.1, 0.6] at T = 5, where the
    plain softmax (floor 0) goes one-hot under the same steps."""
    for seed in range(6):
        floored = MetaUpdater(TemporalMetaLearner(5, seed=seed, floor=0.1, init="torch"), 0.5, optimizer)
        plain = MetaUpdater(TemporalMetaLearner(5, seed=seed, floor=0.0, init="torch"), 0.5, optimizer)
        rng = np.random.default_rng(seed)
        for _ in range(60):
            grad = rng.normal(size=5) * 1e3
            grad[seed % 5] -= 5e3  # a steady pull far larger than any real one
            alpha = floored.step(grad)
            assert alpha.min() >= 0.1 - 1e-9 and alpha.max() <= 0.6 + 1e-9
            assert alpha.sum() == pytest.approx(1.0, abs=1e-9)
            plain_alpha = plain.step(grad)
        assert plain_alpha.max() > 0.99  # the same steps saturate the plain softmax


@pytest.mark.parametrize("seed", SEEDS)
def test_theorems_one_and_two_hold_with_the_floored_alpha(seed: int) -> None:
    """The learner's floored α (after steps) in the residual chain and the convex reading: w^(T) is
    a convex combination of w^(0) and the snapshots (Thm. 1) and each step is
    α_t‖w̄^(t) − w^(t−1)‖ (Thm. 2)."""
    start, snapshots, _ = random_case(seed)
    meta = MetaUpdater(TemporalMetaLearner(len(snapshots), seed=seed, floor=0.1, init="torch"), 1.0, "sgd")
    rng = np.random.default_rng(seed)
    for _ in range(5):
        alpha = meta.step(rng.normal(size=len(snapshots)) * 100.0)
    present = np.ones(len(alpha), dtype=bool)
    weights = convex_weights(alpha, present)
    assert weights.min() >= 0 and weights.sum() == pytest.approx(1.0, abs=1e-12)
    chain = residual_chain(start, snapshots, alpha)
    np.testing.assert_allclose(weights @ np.vstack([start, snapshots]), chain.final, atol=1e-10)
    for t in range(len(alpha)):
        step = np.linalg.norm(chain.states[t + 1] - chain.states[t])
        assert step == pytest.approx(alpha[t] * np.linalg.norm(snapshots[t] - chain.states[t]), rel=1e-12)
    convex = convex_combination(start, snapshots, alpha)
    np.testing.assert_allclose(convex.final, alpha @ snapshots, atol=1e-10)


def test_the_sgd_update_is_free_of_the_hypergradients_units() -> None:
    """ĝ = g / max(‖g‖, RMS so far): the same hypergradients times 1e-3 or 1e3 give the same α path,
    so one travel budget serves a sum over 10 validation reports or 10,000, with or without DP."""
    rng = np.random.default_rng(0)
    grads = rng.normal(size=(12, 5)) + np.array([-0.5, 0, 0, 0, 0])
    paths = []
    for unit in (1e-3, 1.0, 1e3):
        meta = MetaUpdater(TemporalMetaLearner(5, seed=1, floor=0.1, init="torch"), 0.2, "sgd")
        paths.append(np.array([meta.step(g * unit) for g in grads]))
    np.testing.assert_allclose(paths[0], paths[1], atol=1e-9)
    np.testing.assert_allclose(paths[2], paths[1], atol=1e-9)


def test_the_sgd_steps_add_up_to_at_most_the_travel() -> None:
    """Each ĝ_r is at most one unit long, so ψ's steps at lr = travel / rounds sum to ≤ travel in
    these units; an outlier round (1e6 × the rest) takes a unit step, not a 1e6 one; a round smaller
    than the run's typical size takes a proportionally smaller step (it shrinks with the gradient)."""
    meta = MetaUpdater(TemporalMetaLearner(5, seed=0, floor=0.1, init="torch"), 0.1, "sgd")
    rng = np.random.default_rng(1)
    sizes = []
    for r in range(30):
        g = rng.normal(size=5) * (1e6 if r == 10 else 1.0)
        sizes.append(float(np.linalg.norm(meta.scaled(g))))
    assert max(sizes) <= 1.0 + 1e-12
    assert sizes[10] == pytest.approx(1.0)
    # after the outlier the run's RMS is ~1e6/√r: ordinary rounds now take tiny steps
    assert max(sizes[11:]) < 1e-3
    quiet = MetaUpdater(TemporalMetaLearner(5, seed=0, floor=0.1, init="torch"), 0.1, "sgd")
    base = np.array([1.0, -2.0, 0.5, 0.0, 0.5])
    for _ in range(5):
        quiet.scaled(base)
    assert np.linalg.norm(quiet.scaled(base * 0.1)) == pytest.approx(0.1 * np.sqrt(6 / 5.01), rel=1e-9)
    # the size is the centred part's, the part that moves α: a large shift common to every α_t
    # (without DP most of g: every copy's step lowers the loss) neither moves α nor shrinks the step
    shifted = MetaUpdater(TemporalMetaLearner(5, seed=0, floor=0.1, init="torch"), 0.1, "sgd")
    assert base.mean() == 0
    np.testing.assert_allclose(shifted.scaled(base + 1e4), base / np.linalg.norm(base), atol=1e-9)


def test_the_sgd_update_follows_a_steady_pull_and_ignores_the_all_ones_direction() -> None:
    meta = MetaUpdater(TemporalMetaLearner(4, seed=2, floor=0.1, init="torch"), 0.2, "sgd")
    before = [p.detach().clone() for p in meta.learner.parameters()]
    meta.step(np.full(4, 3.0))  # a shift common to every α_t: the simplex does not move
    for b, p in zip(before, meta.learner.parameters(), strict=True):
        torch.testing.assert_close(p.detach(), b, atol=1e-7, rtol=0)
    for _ in range(20):
        alpha = meta.step(np.array([0.3, -1.0, 0.2, 0.5]))
    assert int(np.argmax(alpha)) == 1 and alpha[1] > 0.3


def test_the_default_rate_is_the_travel_over_the_rounds_and_resume_keeps_its_units(make_config) -> None:
    cfg = make_config(fed__method="fedtar", fed__rounds=20)
    assert cfg.train.meta_optimizer == "sgd" and cfg.train.alpha_floor == 0.1
    assert cfg.train.meta_lr is None and meta_rate(cfg) == pytest.approx(cfg.train.meta_travel / 20)
    assert meta_rate(make_config(train__meta_lr=0.05)) == 0.05  # an explicit rate wins (old records)
    first = FedTAR(4, 5, cfg)
    assert first.alpha() == pytest.approx(np.full(5, 0.2))
    for g in ([1.0, -2.0, 0.0, 0.5, 0.1], [0.2, 0.1, -0.3, 0.0, 0.4]):
        first.meta.step(np.array(g))
    resumed = FedTAR(4, 5, cfg)
    resumed.load_state_dict(first.state_dict())
    np.testing.assert_array_equal(resumed.alpha(), first.alpha())
    assert resumed.meta.state_dict() == first.meta.state_dict()
    step = np.array([0.5, 0.0, -0.5, 0.1, 0.0])
    np.testing.assert_allclose(resumed.meta.step(step), first.meta.step(step), atol=1e-12)
