"""Attack (issue 29, item 4), re-summing a training round without DP: the once-only record knew an
update by its bytes, so the same round retrained from a global moved by one float32 ulp made new
bytes, a new fingerprint and a second secure sum. Sum 1 over every site minus sum 2 over all but
the victim is the victim's update (the review: correlation 1.000000).

Now a site takes part in one secure sum per training round, whatever its update's bytes: the
record is kept per round (`training-round-r@…` beside the fingerprint) in the protocol state and
the site's guard file, so a restarted node remembers it too.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from secure_fed.crypto.secagg_protocol import SecAggAbort, SecAggSettings
from secure_fed.crypto.vectors import sum_vectors
from secure_fed.server.strategies.base import weighted_mean
from secure_fed.server.transports import InProcessTransport
from tests.adversarial.harness import MaliciousServer, Site


def _secure_sum(server: MaliciousServer, sites: list[Site], dim: int, round_id: int) -> np.ndarray:
    transport = InProcessTransport({n: site.send for n, site in enumerate(sites)})
    settings = SecAggSettings.from_config(server.cfg.secagg)
    nodes = list(range(len(sites)))
    return sum_vectors(transport, nodes, dim, settings, round_id=round_id, rng=random.Random(round_id)).total


@pytest.fixture
def no_dp(make_config, one_torch_thread) -> MaliciousServer:
    # four sites: a secure sum needs three, so one can be left out of the second
    cfg = make_config(secagg__enabled=True, fed__method="fedavg", fed__rounds=2, data__synth__sites=4)
    assert not cfg.dp.enabled
    return MaliciousServer(cfg)


@pytest.mark.slow  # rounds of three sites in process: make test-fast leaves it out
def test_a_round_retrained_from_a_global_one_ulp_away_gets_no_second_sum(no_dp: MaliciousServer) -> None:
    server = no_dp
    first = [site.send("train", server.honest_train(1)) for site in server.sites]
    assert all(r["status"] == "ok" for r in first), first
    dim = int(first[0]["dim"])
    victim_update = np.asarray(server.victim.runtime.stash["upload"]).copy()
    sum_1 = _secure_sum(server, server.sites, dim, round_id=1)
    # the server "retries" round 1 from a global one float32 ulp away: every other site retrains
    # it into new bytes; and the nodes restarted meanwhile (their protocol state is gone)
    moved = np.nextafter(server.global_state.astype(np.float32), np.float32(np.inf))
    others = server.sites[1:]
    for site in others:
        site.state = {}
        reply = site.send("train", {**server.honest_train(1), "global": moved})
        assert reply["status"] == "ok", reply
    try:
        sum_2 = _secure_sum(server, others, dim, round_id=1)
    except SecAggAbort:
        pass
    else:
        corr = float(np.corrcoef(sum_1 - sum_2, victim_update)[0, 1])
        pytest.fail(
            f"a second sum over round 1 was released: sum 1 - sum 2 vs the victim's update: corr {corr:.6f}"
        )
    for site in others:
        (setup,) = [r for r in site.events("instruction") if r["payload"]["phase"] == "secagg_setup"][1:]
        assert setup["payload"]["outcome"] == "refused", setup
        (said,) = [d for d in site.debug() if d["phase"] == "secagg_setup"]  # unsigned, on the site
        assert "already masked for round 1" in said["detail"]


@pytest.mark.slow  # rounds of three sites in process: make test-fast leaves it out
def test_a_new_training_round_sums_as_usual(no_dp: MaliciousServer) -> None:
    """The control: the record is per training round, so round 2, trained from round 1's
    aggregate as an honest server does, sums as round 1 did."""
    server = no_dp
    for round_id in (1, 2):
        replies = [site.send("train", server.honest_train(round_id)) for site in server.sites]
        assert all(r["status"] == "ok" for r in replies), replies
        expected = sum(np.asarray(site.runtime.stash["upload"]) for site in server.sites)
        total = _secure_sum(server, server.sites, int(replies[0]["dim"]), round_id=round_id)
        np.testing.assert_allclose(total, expected, atol=1e-5)
        server.global_state = weighted_mean(total, server.global_state.size, server.global_state)
