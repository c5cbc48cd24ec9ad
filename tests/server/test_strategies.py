"""Server strategies: FedAvg's weighted mean, DRFA's simplex projection, FedAdam's server step, and
whole rounds of FedAvg / FedAdam / FedTAR against a stub transport (plain sums, no crypto)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from secure_fed.algorithms.drfa.strategy import DRFA, project_simplex
from secure_fed.algorithms.fedadam.strategy import FedAdam
from secure_fed.algorithms.fedtar.strategy import FedTAR
from secure_fed.algorithms.fedtar.temporal import convex_combination, residual_chain, weighted_snapshots
from secure_fed.crypto.scalars import PLAIN_PHASE
from secure_fed.crypto.secagg_protocol import PLAIN_SUM
from secure_fed.server.aggregation import AggregationSettings
from secure_fed.server.strategies import FedAvg, RoundContext
from secure_fed.server.strategies.base import weighted_mean

# -- FedAvg ------------------------------------------------------------------------------------------


def test_weighted_mean_by_hand() -> None:
    start = np.array([1.0, -1.0, 0.0])
    # Site A: n = 3, Δ = [1, 0, 2]; site B: n = 1, Δ = [−3, 4, 2]. Upload = [n Δ, n].
    upload_a = np.array([3.0, 0.0, 6.0, 3.0])
    upload_b = np.array([-3.0, 4.0, 2.0, 1.0])
    # Σ n Δ / Σ n = [0, 4, 8] / 4 = [0, 1, 2]
    np.testing.assert_allclose(
        weighted_mean(upload_a + upload_b, 3, start), [1.0, 0.0, 2.0], rtol=0, atol=1e-15
    )


def test_weighted_mean_without_rows_keeps_start() -> None:
    start = np.array([0.25, 4.0])
    np.testing.assert_array_equal(weighted_mean(np.zeros(3), 2, start), start)


# -- DRFA's projection -----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(25))
def test_project_simplex_lands_on_simplex(seed: int) -> None:
    rng = np.random.default_rng(seed)
    v = rng.normal(scale=rng.uniform(0.1, 10.0), size=rng.integers(1, 9))
    p = project_simplex(v)
    assert (p >= 0).all()
    assert p.sum() == pytest.approx(1.0, abs=1e-12)
    # Euclidean projection: no other simplex point is closer (checked against random ones, and the
    # optimality condition ⟨v − p, q − p⟩ ≤ 0 for every vertex q).
    others = rng.dirichlet(np.ones(len(v)), size=200)
    assert np.linalg.norm(v - p) <= np.linalg.norm(v - others, axis=1).min() + 1e-12
    for q in np.eye(len(v)):
        assert (v - p) @ (q - p) <= 1e-10


@pytest.mark.parametrize("seed", range(10))
def test_project_simplex_is_identity_on_simplex(seed: int) -> None:
    rng = np.random.default_rng(seed)
    point = rng.dirichlet(np.ones(5))
    np.testing.assert_allclose(project_simplex(point), point, rtol=0, atol=1e-12)
    vertex = np.eye(4)[seed % 4]
    np.testing.assert_allclose(project_simplex(vertex), vertex, rtol=0, atol=1e-15)


def test_project_simplex_by_hand() -> None:
    # Shift by θ = (2 + 1 − 1) / 2 = 1: [2, 1, −1] → [1, 0, 0]; [0.5, 0.5, 0.5] → uniform.
    np.testing.assert_allclose(project_simplex(np.array([2.0, 1.0, -1.0])), [1.0, 0.0, 0.0], atol=1e-15)
    np.testing.assert_allclose(project_simplex(np.full(3, 0.5)), np.full(3, 1 / 3), atol=1e-15)


# -- FedAdam -----------------------------------------------------------------------------------------


def test_fedadam_moves_towards_average_update(make_config) -> None:
    cfg = make_config(fed__method="fedadam")
    dim = 6
    rng = np.random.default_rng(0)
    strategy = FedAdam(dim, cfg)
    state = rng.normal(size=dim)
    delta = rng.normal(size=dim)
    new = strategy.server_update(state, state + delta)
    step = new - state
    # First step of Adam from zero moments: lr · 0.1Δ / (0.1|Δ| + τ) — nearly lr·sign(Δ).
    np.testing.assert_array_equal(np.sign(step), np.sign(delta))
    expected = cfg.fed.fedadam_lr * 0.1 * delta / (np.sqrt(0.01 * delta**2) + 1e-3)
    np.testing.assert_allclose(step, expected, rtol=1e-12)
    assert step @ delta > 0


def test_fedadam_converges_to_a_fixed_target(make_config) -> None:
    """Sites that always pull towards the same point: the server state approaches it."""
    cfg = make_config(fed__method="fedadam")
    rng = np.random.default_rng(1)
    target = rng.normal(size=5)
    state = target + rng.normal(size=5)
    strategy = FedAdam(5, cfg)
    dist0 = np.linalg.norm(state - target)
    for _ in range(300):
        state = strategy.server_update(state, state + 0.5 * (target - state))
    assert np.linalg.norm(state - target) < 0.2 * dist0


# -- whole rounds against a stub transport -----------------------------------------------------------


class StubTransport:
    """Answers every phase from fixed per-node values, as honest sites would in plain mode."""

    def __init__(
        self,
        uploads: Mapping[int, np.ndarray],
        scalars: Mapping[int, np.ndarray] | None = None,
        train_loss: Mapping[int, float] | None = None,
    ) -> None:
        self.uploads = uploads
        self.scalars = scalars or {}
        self.train_loss = train_loss or {}
        self.requests: dict[str, dict[int, dict[str, Any]]] = {}

    def exchange(self, phase: str, requests: Mapping[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
        self.requests[phase] = dict(requests)
        replies: dict[int, dict[str, Any]] = {}
        for node in requests:
            if phase == "train":
                replies[node] = {"status": "ok", "train_loss": self.train_loss.get(node, 1.0)}
            elif phase == PLAIN_SUM:
                replies[node] = {"vector": self.uploads[node]}
            elif phase == "hypergrad":
                replies[node] = {"status": "ok", "val_loss_sum": 2.0, "val_patients": 4}
            elif phase == PLAIN_PHASE:
                replies[node] = {"scalars": self.scalars[node]}
            else:
                raise AssertionError(f"unexpected phase {phase}")
        return replies


def context(cfg: Any, transport: StubTransport, nodes: list[int]) -> RoundContext:
    return RoundContext(
        round=1,
        transport=transport,  # type: ignore[arg-type]
        nodes=nodes,
        sites={n: f"site{n}" for n in nodes},
        cfg=cfg,
        aggregation=AggregationSettings(secagg=None, he=None),
    )


def test_fedavg_round(make_config) -> None:
    cfg = make_config(fed__method="fedavg")
    start = np.array([1.0, 2.0])
    uploads = {0: np.array([2.0, 0.0, 2.0]), 1: np.array([6.0, -6.0, 3.0])}  # n=2 Δ=[1,0]; n=3 Δ=[2,−2]
    transport = StubTransport(uploads)
    result = FedAvg(2, cfg).run_round(context(cfg, transport, [0, 1]), start)
    np.testing.assert_allclose(result.global_state, start + np.array([8.0, -6.0]) / 5.0, atol=1e-15)
    assert result.participants == [0, 1]
    np.testing.assert_array_equal(transport.requests["train"][0]["global"], start)


def test_fedadam_round_steps_towards_fedavg(make_config) -> None:
    cfg = make_config(fed__method="fedadam")
    start = np.zeros(2)
    uploads = {0: np.array([2.0, -1.0, 1.0]), 1: np.array([4.0, -2.0, 2.0])}
    result = FedAdam(2, cfg).run_round(context(cfg, StubTransport(uploads), [0, 1]), start)
    average = np.array([6.0, -3.0]) / 3.0
    step = result.global_state - start
    np.testing.assert_array_equal(np.sign(step), np.sign(average))
    assert np.linalg.norm(step) < np.linalg.norm(average)  # a server learning rate, not a jump


def test_drfa_lambda_ascends_on_losses(make_config) -> None:
    cfg = make_config(fed__method="drfa")
    uploads = {0: np.array([1.0, 1.0]), 1: np.array([3.0, 1.0])}
    strategy = DRFA(1, cfg)
    transport = StubTransport(uploads, train_loss={0: 0.5, 1: 3.0})
    strategy.run_round(context(cfg, transport, [0, 1]), np.zeros(1))
    lam = np.array([strategy.lam["site0"], strategy.lam["site1"]])
    assert lam.sum() == pytest.approx(1.0)
    assert lam[1] > 0.5 > lam[0]  # the worse-off site gains weight
    # Every site was shown the same factor vector (uniform λ at the first round → all 1).
    first = transport.requests["train"]
    assert first[0]["factor_sites"] == first[1]["factor_sites"] == ["site0", "site1"]
    assert first[0]["factors"] == first[1]["factors"] == pytest.approx([1.0, 1.0])
    # later factors keep DRFA's order, average 1 and stay above the sites' floor
    later = strategy.factors(["site0", "site1"])
    floor = cfg.fed.factor_floor
    assert later[1] > 1.0 > later[0] >= floor and sum(later) == pytest.approx(2.0)


def test_drfa_factors_never_fall_below_the_floor(make_config) -> None:
    cfg = make_config(fed__method="drfa", fed__factor_floor=0.25)
    strategy = DRFA(1, cfg)
    strategy.lam = {"a": 1.0, "b": 0.0, "c": 0.0}  # DRFA's own λ may reach a vertex of the simplex
    factors = strategy.factors(["a", "b", "c"])
    assert factors == pytest.approx([0.25 + 0.75 * 3, 0.25, 0.25])
    assert sum(factors) / 3 == pytest.approx(1.0)


def test_fedtar_round_with_the_convex_reading_sends_its_directions(make_config) -> None:
    """train.fedtar_chain = "convex": the round's model is Σ_t α_t w̄^(t) and the sites are asked
    for scalars along w̄^(t) − w^(0); visit 3, which nobody has, keeps its weight on the start."""
    cfg = make_config(fed__method="fedtar", train__fedtar_chain="convex")
    dim, t_max = 3, 3
    rng = np.random.default_rng(5)
    start = rng.normal(size=dim)
    per_site = {}
    for node, counts in {0: [2.0, 1.0, 0.0], 1: [1.0, 2.0, 0.0]}.items():
        deltas = rng.normal(size=(t_max, dim))
        per_site[node] = np.concatenate(
            [np.concatenate([c * d, [c]]) for c, d in zip(counts, deltas, strict=True)]
        )
    scalars = {0: np.array([-1.0, 0.5, 0.0]), 1: np.array([-0.5, 0.2, 0.0])}
    strategy = FedTAR(dim, t_max, cfg)
    alpha_before = strategy.alpha()
    transport = StubTransport(per_site, scalars)
    result = strategy.run_round(context(cfg, transport, [0, 1]), start)
    total = (per_site[0] + per_site[1]).reshape(t_max, dim + 1)
    snaps = weighted_snapshots(start, total[:, :dim], total[:, dim])
    expected = convex_combination(start, snaps, alpha_before, present=total[:, dim] > 0)
    np.testing.assert_allclose(result.global_state, alpha_before @ snaps, rtol=0, atol=1e-12)
    np.testing.assert_allclose(result.global_state, expected.final, rtol=0, atol=1e-12)
    sent = transport.requests["hypergrad"][0]
    np.testing.assert_allclose(sent["directions"], snaps - start, atol=1e-12)
    assert not np.allclose(
        result.global_state, residual_chain(start, snaps, alpha_before, present=total[:, dim] > 0).final
    )


def test_fedtar_round_applies_chain_and_meta_step(make_config) -> None:
    cfg = make_config(fed__method="fedtar", train__meta_lr=0.05)
    dim, t_max = 3, 3
    rng = np.random.default_rng(4)
    start = rng.normal(size=dim)
    per_site = {}
    for node, counts in {0: [2.0, 1.0, 0.0], 1: [1.0, 2.0, 0.0]}.items():  # nobody has visit 3
        deltas = rng.normal(size=(t_max, dim))
        per_site[node] = np.concatenate(
            [np.concatenate([c * d, [c]]) for c, d in zip(counts, deltas, strict=True)]
        )
    # Both sites report that raising α_1 lowers their validation loss.
    scalars = {0: np.array([-1.0, 0.5, 0.0]), 1: np.array([-0.5, 0.2, 0.0])}
    strategy = FedTAR(dim, t_max, cfg)
    alpha_before = strategy.alpha()
    transport = StubTransport(per_site, scalars)
    result = strategy.run_round(context(cfg, transport, [0, 1]), start)

    total = (per_site[0] + per_site[1]).reshape(t_max, dim + 1)
    snaps = weighted_snapshots(start, total[:, :dim], total[:, dim])
    chain = residual_chain(start, snaps, alpha_before, present=total[:, dim] > 0)
    np.testing.assert_allclose(result.global_state, chain.final, rtol=0, atol=1e-12)
    sent = transport.requests["hypergrad"][0]
    np.testing.assert_allclose(sent["directions"], chain.directions, atol=1e-12)
    np.testing.assert_array_equal(sent["directions"][2], np.zeros(dim))  # absent visit 3
    assert result.val_loss == pytest.approx(4.0 / 8.0)
    assert result.alpha is not None and result.alpha[0] > alpha_before[0]
    assert sum(result.alpha) == pytest.approx(1.0, abs=1e-6)
