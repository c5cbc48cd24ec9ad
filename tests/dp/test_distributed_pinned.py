"""Distributed DP's outputs pinned byte for byte: a fixed plan's JSON, the run's plan from a config,
its ε, a site's share of a fixed vector under a fixed keystream (plain and layered), the layer
seeds, and the decoded sum with and without revealed layers. The digests were taken on the code
before distributed DP became one package (secure_fed/dp/distributed/); a refactor that changes any
share, plan, sum or ε fails here."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

from secure_fed.config import RunConfig
from secure_fed.dp.keystream import NoiseStream

KEY = bytes(range(32))
SEED = bytes(range(100, 132))


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()[:32]


def _vector(dim: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    return rng.normal(0.0, 3.0, dim)


def _fixed_plan():  # noqa: ANN202
    from secure_fed.dp.distributed import plan_distributed

    return plan_distributed(
        target_epsilon=4.0,
        delta=1e-5,
        sample_rate=0.05,
        steps=30,
        clip=2.0,
        dim=5000,
        honest_min=3,
        colluders=1,
        bits=32,
        max_sites=5,
        site_bound=2.0 * 64,
    )


def _run_config() -> RunConfig:
    return RunConfig.model_validate(
        {
            "seed": 11,
            "dp": {
                "enabled": True,
                "noise": "distributed",
                "accountant": "rdp",
                "target_epsilon": 8.0,
                "sample_rate": 0.1,
                "max_grad_norm": 9.0,
            },
            "fed": {"method": "fedavg", "rounds": 12},
            "train": {"local_epochs": 1},
        }
    )


def outputs() -> dict[str, Any]:
    from secure_fed.dp.distributed import (
        decode_sum,
        distributed_epsilon,
        encode_layered_share,
        encode_share,
        layers_for,
        remove_layers,
    )

    out: dict[str, Any] = {}
    plan = _fixed_plan()
    out["plan"] = plan.to_json()
    out["epsilon"] = repr(distributed_epsilon(plan, 0.05, 30, 1e-5))
    x = _vector(plan.dim)
    share = encode_share(x, plan, SEED, NoiseStream(KEY))
    out["share"] = _digest(share)
    layered, seeds = encode_layered_share(x, plan, SEED, NoiseStream(KEY))
    out["layered"] = _digest(layered)
    out["seeds"] = hashlib.sha256(b"".join(seeds)).hexdigest()[:32]
    mask = np.uint64((1 << plan.bits) - 1)
    total = (share + layered + encode_share(-x, plan, SEED, NoiseStream(bytes(32)))) & mask
    out["decoded"] = _digest(decode_sum(total, plan, SEED))
    freed = [(i, seeds[i]) for i in layers_for(plan, 5)]
    out["freed_layers"] = repr([i for i, _ in freed])
    out["decoded_freed"] = _digest(decode_sum(remove_layers(total, plan, freed), plan, SEED))
    from secure_fed.dp.distributed.run import plan_digest, plan_for, round_seed

    cfg = _run_config()
    run_plan = plan_for(cfg, 3000, 5)
    out["run_plan"] = run_plan.to_json()
    out["run_plan_digest"] = plan_digest(run_plan)
    out["round_seed"] = round_seed(cfg, 3).hex()
    return out


PINNED: dict[str, Any] = {
    "plan": {
        "amplification": "symmetric",
        "bits": 32,
        "clip": 2.0,
        "colluders": 1,
        "dim": 5000,
        "gamma": 3.2428660863162015e-06,
        "honest_min": 3,
        "l1_sensitivity": 55829069.17353813,
        "l2_sensitivity": 616829.8968740883,
        "max_sites": 5,
        "mu_total": 274877906943.99994,
        "padded_dim": 8192,
        "share_mu": 137438953471.99997,
        "site_bound": 128.0,
        "wrap_bound_sites": 53,
        "wrap_tail": 9.094947017729282e-13,
    },
    "epsilon": "3.999974602262691",
    "share": "127ea8abb897fcde3015206865e9bc75",
    "layered": "8770dd28e8c0adc7d7b1db1f3889f186",
    "seeds": "a534a229e240b9925abda0a566fc54bc",
    "decoded": "f9aa3d76b3daaf58e26dd1401a03eece",
    "freed_layers": "[0, 1]",
    "decoded_freed": "94c0faa99b9cb7d92cae12cab8c174c6",
    "run_plan": {
        "amplification": "symmetric",
        "bits": 32,
        "clip": 9.0,
        "colluders": 1,
        "dim": 3000,
        "gamma": 2.148991051434478e-05,
        "honest_min": 4,
        "l1_sensitivity": 26807435.872903842,
        "l2_sensitivity": 418866.18551412254,
        "max_sites": 5,
        "mu_total": 84753098928.04846,
        "padded_dim": 4096,
        "share_mu": 28251032976.016155,
        "site_bound": 9216.0,
        "wrap_bound_sites": 5,
        "wrap_tail": 9.094947017729282e-13,
    },
    "run_plan_digest": "ffcc3c746a8bbf67b853061ff41a75f8872e6926a2069b448d6a09c8c5a6b582",
    "round_seed": "3dea9b5dbf22fbbda2fd97d51114c2e487e1bc57e216de270bf967bb15a878dc",
}


def test_distributed_dp_outputs_are_the_pinned_ones() -> None:
    assert outputs() == PINNED


if __name__ == "__main__":
    print(json.dumps(outputs(), indent=1))


def test_the_interface_gives_the_pinned_share_and_sums() -> None:
    """`DistributedSum`, the object site and server use, encodes and decodes to the same bytes."""
    from secure_fed.dp.distributed import DistributedSum, encode_share

    dsum = DistributedSum(_fixed_plan(), SEED)
    x = _vector(dsum.plan.dim)
    share = dsum.encode(x, NoiseStream(KEY))
    assert _digest(share.ring) == PINNED["layered"]
    assert hashlib.sha256(b"".join(share.layer_seeds)).hexdigest()[:32] == PINNED["seeds"]
    mask = np.uint64((1 << dsum.bits) - 1)
    plain = encode_share(x, dsum.plan, SEED, NoiseStream(KEY))
    total = (plain + share.ring + encode_share(-x, dsum.plan, SEED, NoiseStream(bytes(32)))) & mask
    assert _digest(dsum.decode(total)) == PINNED["decoded"]
    freed = dsum.freed_layers(5)
    reveals = {2: (5, [(i, share.layer_seeds[i]) for i in freed])}
    # a reveal from a site outside the sum, or for another count, is left in
    stray = {7: (5, [(i, share.layer_seeds[i]) for i in freed]), 3: (4, [(1, share.layer_seeds[1])])}
    accepted = dsum.accepted_reveals({**reveals, **stray}, survivors={1, 2, 3})
    assert list(accepted) == [2]
    assert _digest(dsum.decode(total, accepted)) == PINNED["decoded_freed"]
