"""A distributed-DP site's plan (ring, noise shares, the step's length) is its own, made for the
method in its own config. A server that asks a FedTAR site for a FedAvg step (a vector T times
shorter, on a plan the site never made) is refused before anything is drawn or charged; the FedTAR
step the site planned covers every visit index's copy (`train.fedtar_release = "copies"`), or is the
one-vector release of the model and T sketches, which needs the round's α."""

from __future__ import annotations

import numpy as np
import pytest

from secure_fed.dp.distributed import padded_size
from tests.adversarial.harness import MaliciousServer
from tests.conftest import DISTRIBUTED_DP


@pytest.mark.slow
@pytest.mark.parametrize("release", ["copies", "one-vector"])
def test_a_distributed_site_trains_only_the_method_it_planned(make_config, one_torch_thread, release) -> None:  # noqa: ANN001
    cfg = make_config(
        **DISTRIBUTED_DP,
        fed__method="fedtar",
        fed__rounds=2,
        train__fedtar_release=release,
    )
    t_max = cfg.data.max_visits
    server = MaliciousServer(cfg)
    site = server.victim
    folder = site.runtime.folder
    before = len(site.events("privacy"))

    reply = site.send("train", server.honest_train(1, method="fedavg"))
    assert reply["status"] == "refused" and "planned for fedtar, not fedavg" in reply["error"]
    assert not (folder / "release-r1.npy").exists()
    assert len(site.events("privacy")) == before  # nothing charged

    dim = server.global_state.size
    alpha = {"alpha": np.full(t_max, 1.0 / t_max)} if release == "one-vector" else {}
    reply = site.send("train", server.honest_train(1, **alpha))
    assert reply["status"] == "ok", reply
    step = t_max * dim if release == "copies" else dim + t_max * cfg.train.fedtar_sketch_dim
    assert reply["dim"] == padded_size(step)
    assert (folder / "release-r1.npy").exists()
