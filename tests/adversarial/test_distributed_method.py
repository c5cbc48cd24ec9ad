"""A distributed-DP site's plan (ring, noise shares, the step's length) is its own, made for the
method in its own config. A server that asks a FedTAR site for a FedAvg step (a vector T times
shorter, on a plan the site never made) is refused before anything is drawn or charged; the FedTAR
step the site planned covers every visit index's copy."""

from __future__ import annotations

import pytest

from secure_fed.dp.distributed import padded_size
from tests.adversarial.harness import MaliciousServer
from tests.conftest import DISTRIBUTED_DP


@pytest.mark.slow
def test_a_distributed_site_trains_only_the_method_it_planned(make_config, one_torch_thread) -> None:  # noqa: ANN001
    cfg = make_config(
        **DISTRIBUTED_DP,
        fed__method="fedtar",
        fed__rounds=2,
    )
    server = MaliciousServer(cfg)
    site = server.victim
    folder = site.runtime.folder
    before = len(site.events("privacy"))

    reply = site.send("train", server.honest_train(1, method="fedavg"))
    assert reply["status"] == "refused" and "planned for fedtar, not fedavg" in reply["error"]
    assert not (folder / "release-r1.npy").exists()
    assert len(site.events("privacy")) == before  # nothing charged

    reply = site.send("train", server.honest_train(1))
    assert reply["status"] == "ok", reply
    assert reply["dim"] == padded_size(cfg.data.max_visits * server.global_state.size)
    assert (folder / "release-r1.npy").exists()
