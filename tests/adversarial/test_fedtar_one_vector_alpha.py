"""A one-vector FedTAR site (`train.fedtar_release = "one-vector"`, distributed DP) weighs its
patients' per-visit gradients with the round's α from the server's training instruction. α is
public, but the site takes it only as ψ could have made it: T finite weights on the simplex within
the floor's bounds. Anything else (missing, the wrong length, NaN, off the simplex, past the floor)
is refused with a signed reason before anything is drawn or charged; whatever α it takes, a
patient's vector is still clipped to C as one vector (tests/algorithms/test_fedtar_one_vector.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.adversarial.harness import MaliciousServer
from tests.conftest import DISTRIBUTED_DP

MALFORMED: list[tuple[str, dict[str, Any]]] = [
    ("missing", {}),
    ("short", {"alpha": np.array([0.5, 0.5])}),
    ("nan", {"alpha": np.array([0.5, 0.5, np.nan])}),
    ("off the simplex", {"alpha": np.array([0.6, 0.6, 0.6])}),
    ("one-hot", {"alpha": np.array([1.0, 0.0, 0.0])}),  # past the floor's [0.1, 0.8] at T = 3
]


@pytest.mark.slow  # rounds of three sites in process: make test-fast leaves it out
def test_a_malformed_alpha_is_refused_uncharged_and_a_sound_one_trains(make_config, one_torch_thread) -> None:  # noqa: ANN001
    cfg = make_config(**DISTRIBUTED_DP, fed__method="fedtar", fed__rounds=2)
    assert cfg.train.fedtar_release == "one-vector"
    server = MaliciousServer(cfg)
    site = server.victim
    folder = site.runtime.folder
    charged = len(site.events("privacy"))
    honest = server.honest_train(1)  # what our server sends: ψ's α at the round's start, uniform
    np.testing.assert_array_equal(honest["alpha"], np.full(cfg.data.max_visits, 1 / cfg.data.max_visits))
    for name, extra in MALFORMED:
        request = {k: v for k, v in server.honest_train(1).items() if k != "alpha"}
        reply = site.send("train", {**request, **extra})
        assert reply["status"] == "refused" and reply["code"] == "bad_request", (name, reply)
        assert "release input" in reply["error"], (name, reply["error"])
        assert not (folder / "release-r1.npy").exists(), name
        assert len(site.events("privacy")) == charged, f"{name}: charged for a refused round"
    refusals = [r["payload"] for r in site.events("instruction") if r["payload"]["phase"] == "train"]
    assert [r["outcome"] for r in refusals] == ["refused"] * len(MALFORMED)
    assert all(r["code"] == "bad_request" for r in refusals)

    reply = site.send("train", server.honest_train(1))
    assert reply["status"] == "ok", reply
    assert (folder / "release-r1.npy").exists()
    assert len(site.events("privacy")) > charged


@pytest.mark.parametrize("release", ["copies", "one-vector"])
def test_the_server_sends_alpha_only_for_the_one_vector_release(make_config, release: str) -> None:  # noqa: ANN001
    from secure_fed.algorithms.fedtar.distributed import DistributedFedTAR

    cfg = make_config(**DISTRIBUTED_DP, fed__method="fedtar", train__fedtar_release=release)
    strategy = DistributedFedTAR(10, cfg.data.max_visits, cfg)
    options = strategy.train_options(1)
    if release == "copies":
        assert options == {}
    else:
        np.testing.assert_array_equal(options["alpha"], strategy.alpha())
