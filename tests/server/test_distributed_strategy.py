"""The server's side of distributed DP: it decodes only a sum encoded with its own plan, divides by
q × the sites' public patient floors and takes an Adam step (plain transport: no masks here; the
secure sum of the shares is tested in tests/crypto and tests/adversarial)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from secure_fed.crypto.secagg_protocol import PLAIN_SUM
from secure_fed.dp.distributed import decode_sum, encode_share
from secure_fed.dp.distributed.run import plan_digest, plan_for, round_seed
from secure_fed.dp.keystream import NoiseStream
from secure_fed.server.aggregation import AggregationSettings
from secure_fed.server.strategies import RoundContext, make_strategy
from secure_fed.server.strategies.distributed import DistributedFedAvg

DIM = 64
NODES = [1, 2, 3]


class SiteReplies:
    """Sites that trained with `digests[n]` and upload their shares in the clear."""

    def __init__(
        self, shares: dict[int, np.ndarray], digests: dict[int, str], floors: dict[int, int]
    ) -> None:
        self.shares, self.digests, self.floors = shares, digests, floors

    def exchange(self, phase: str, requests: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
        if phase == "train":
            return {
                n: {"status": "ok", "distributed_plan": self.digests[n], "public_patients": self.floors[n]}
                for n in requests
            }
        assert phase == PLAIN_SUM
        return {n: {"vector": self.shares[n].astype(np.float64)} for n in requests}


@pytest.fixture(scope="module")
def cfg() -> Any:
    from secure_fed.config import build_config

    return build_config(
        {
            "dp": {"enabled": True, "target_epsilon": 4.0, "noise": "distributed", "sample_rate": 0.25},
            "fed": {"method": "fedavg", "rounds": 3},
            "train": {"local_epochs": 1, "lr": 0.01},
        }
    )


def _round(cfg: Any, digests: dict[int, str]) -> tuple[np.ndarray, np.ndarray, Any]:
    plan = plan_for(cfg, DIM, len(NODES))
    rng = np.random.default_rng(0)
    clipped = {n: rng.normal(0, 0.1, DIM) for n in NODES}
    shares = {
        n: encode_share(clipped[n], plan, round_seed(cfg, 1), NoiseStream(bytes([n]) * 32)) for n in NODES
    }
    floors = {1: 8, 2: 16, 3: 4}
    ctx = RoundContext(
        round=1,
        transport=SiteReplies(shares, digests, floors),  # type: ignore[arg-type]
        nodes=NODES,
        sites={n: f"site{n}" for n in NODES},
        cfg=cfg,
        aggregation=AggregationSettings(secagg=None, he=None),
    )
    strategy = make_strategy("fedavg", DIM, 3, cfg)
    assert isinstance(strategy, DistributedFedAvg)
    start = np.zeros(DIM)
    result = strategy.run_round(ctx, start)
    total = np.sum([shares[n].astype(np.uint64) for n in NODES], axis=0)
    gradient = decode_sum(total, plan, round_seed(cfg, 1)) / (0.25 * sum(floors.values()))
    return result.global_state, gradient, plan


def test_the_server_steps_on_the_decoded_sum_over_the_expected_batch(cfg: Any) -> None:
    plan = plan_for(cfg, DIM, len(NODES))
    state, gradient, _ = _round(cfg, {n: plan_digest(plan) for n in NODES})
    # Adam's first step is lr · g / (|g| + eps): lr against the sign of every decoded coordinate
    np.testing.assert_allclose(state, -0.01 * gradient / (np.abs(gradient) + 1e-8), rtol=1e-6)


def test_a_site_on_another_plan_stops_the_round_before_anything_is_decoded(cfg: Any) -> None:
    plan = plan_for(cfg, DIM, len(NODES))
    digests = {n: plan_digest(plan) for n in NODES}
    digests[2] = plan_digest(plan_for(cfg, DIM, 4))  # a site that counted four sites
    with pytest.raises(ValueError, match="site2 encoded with another distributed-DP plan"):
        _round(cfg, digests)


def test_a_site_priced_with_the_other_subsampling_bound_is_on_another_plan(cfg: Any) -> None:
    # the bound sets the share's variance: a server decoding it with the other bound's plan would
    # subtract the wrong noise scale, so the bound is part of what the digests compare
    plan = plan_for(cfg, DIM, len(NODES))
    assert plan.amplification == "symmetric"
    general = plan_for(
        cfg.model_copy(update={"dp": cfg.dp.model_copy(update={"amplification": "general"})}), DIM, len(NODES)
    )
    assert general.mu_total != plan.mu_total
    digests = {n: plan_digest(plan) for n in NODES}
    digests[3] = plan_digest(general)
    with pytest.raises(ValueError, match="site3 encoded with another distributed-DP plan"):
        _round(cfg, digests)


def test_the_servers_adam_resumes_from_a_checkpoint(tmp_path) -> None:
    from secure_fed.server.checkpoint import load_checkpoint, save_checkpoint
    from secure_fed.server.strategies.distributed import Adam

    adam = Adam((3,), 1e-3)
    state = adam.step(np.zeros(3), np.array([1.0, -2.0, 0.5]))
    save_checkpoint(tmp_path, 1, state, adam.state_dict(), {})
    loaded = load_checkpoint(tmp_path)
    assert loaded is not None
    resumed = Adam((3,), 1e-3)
    resumed.load_state_dict(loaded.strategy)
    assert resumed.steps == 1
    gradient = np.array([0.3, 0.1, -0.2])
    np.testing.assert_array_equal(resumed.step(state, gradient), adam.step(state, gradient))
