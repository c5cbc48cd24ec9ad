"""Attack (c), two secure sums over the same update: their difference is exactly the update of a
site that took part in one and not the other.

Before the fix the review ran two sums with the same round id over the same uploads and read one
site's update off the difference (the report's pre-change run: error 2e-6 at clip 8, 24 bits). Now
a site masks one update once: a second setup or masked phase for it is refused, however the server
restarts the protocol, and a retried training round that re-sends a released update cannot buy a
second sum either.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from secure_fed.crypto.secagg_client import upload_fingerprint
from secure_fed.crypto.secagg_protocol import (
    MASKED,
    SETUP,
    SHARES,
    SecAggAbort,
    SecAggRefused,
    embed_setup,
    embedded_setup,
)
from secure_fed.crypto.secagg_server import plan_setup
from secure_fed.crypto.transport import LocalTransport, encode_payload
from secure_fed.crypto.vectors import sum_vectors
from tests.adversarial.harness import MaliciousServer
from tests.adversarial.harness_secagg import (
    DIM,
    SETTINGS,
    Pki,
    Site,
    honest_until_unmask,
    inbox,
    keys_request,
    masked_request,
)
from tests.crypto.test_secagg_rounds import make_identities, site_step, with_identities


def _inputs() -> dict[int, np.ndarray]:
    rng = np.random.default_rng(2)
    return {n: rng.normal(0, 1, DIM) for n in range(1, 6)}


@pytest.mark.parametrize("second_round_id", [7, 8])
def test_a_second_sum_over_the_same_updates_is_refused(second_round_id: int) -> None:
    inputs = _inputs()
    transport = LocalTransport(with_identities(inputs, make_identities(inputs)), site_step)
    first = sum_vectors(transport, list(inputs), DIM, SETTINGS, round_id=7, rng=random.Random(1))
    assert first.survivors == sorted(inputs)
    # the same sites, the same updates, without site 1: the difference would be site 1's update
    with pytest.raises(SecAggAbort, match="no aggregate released"):
        sum_vectors(transport, [2, 3, 4, 5], DIM, SETTINGS, round_id=second_round_id, rng=random.Random(2))
    assert all(isinstance(transport.errors[n], SecAggRefused) for n in (2, 3, 4, 5))
    assert all("already masked for round 7" in str(transport.errors[n]) for n in (2, 3, 4, 5))
    assert [r.phase for r in transport.received].count(MASKED) == 5  # no masked vector came twice


def _sites() -> dict[int, Site]:
    pki = Pki([f"site-{n}" for n in range(1, 6)])
    rng = np.random.default_rng(3)
    return {n: Site(n, pki.identity(f"site-{n}"), rng.normal(0, 1, DIM)) for n in range(1, 6)}


def test_restarting_the_protocol_after_the_masked_phase_buys_nothing() -> None:
    """A new setup resets a site's protocol state (the server may send one at any time); the record
    of what it masked survives it."""
    sites = _sites()
    honest_until_unmask(sites, round_id=1)
    victim = sites[1]
    for round_id in (1, 2):
        plan = plan_setup(sorted(sites), DIM, SETTINGS, round_id, random.Random(5))
        with pytest.raises(SecAggRefused, match="already masked for round 1"):
            victim.send(SETUP, plan.requests[1])
    # replaying the masked phase itself is out of order
    with pytest.raises(SecAggRefused, match="arrived after secagg_masked"):
        victim.send(MASKED, masked_request(1, []))


def _vouched(vector: np.ndarray) -> tuple[np.ndarray, str]:
    """An update as SiteRuntime stashes it: read-only, fingerprinted once."""
    vector = vector.copy()
    vector.flags.writeable = False
    return vector, upload_fingerprint(vector)


@pytest.mark.parametrize("fingerprinted", ["per phase", "once per update"])
def test_an_update_swapped_after_the_setup_is_not_masked(fingerprinted: str) -> None:
    """The setup checked update U1; if the site's update is U2 by the masked phase (a training
    message in between), masking U2 would record U1 and leave U2 free for a second sum. Whether
    the client fingerprints the update at each phase or the runtime once per update."""
    sites = _sites()
    if fingerprinted == "once per update":
        for site in sites.values():
            site.vector, site.fingerprint = _vouched(site.vector)
    plan = plan_setup(sorted(sites), DIM, SETTINGS, 1, random.Random(0))
    keys = {n: site.send(SETUP, plan.requests[n]) for n, site in sites.items()}
    shares = {n: site.send(SHARES, keys_request(1, plan.graph[n], keys)) for n, site in sites.items()}
    victim = sites[1]
    victim.vector = victim.vector + 1.0
    if fingerprinted == "once per update":
        victim.vector, victim.fingerprint = _vouched(victim.vector)
    with pytest.raises(SecAggRefused, match="changed since the round's setup"):
        victim.send(MASKED, masked_request(1, inbox(shares, 1)))
    # the others, vouched or not, mask and record what they set up
    for n in (2, 3, 4, 5):
        assert "masked" in sites[n].send(MASKED, masked_request(1, inbox(shares, n)))


def test_a_vouched_fingerprint_needs_an_update_nobody_can_change_in_place() -> None:
    sites = _sites()
    victim = sites[1]
    victim.fingerprint = upload_fingerprint(victim.vector)  # but the array stays writeable
    plan = plan_setup(sorted(sites), DIM, SETTINGS, 1, random.Random(0))
    with pytest.raises(ValueError, match="read-only"):
        victim.send(SETUP, plan.requests[1])


def test_the_record_rides_along_with_other_protocols_state() -> None:
    """The setup starts the round's state afresh but keeps what is not the round's: this record,
    and records other protocols keep in the same `context.state` (CKKS's rounds, say)."""
    sites = _sites()
    honest_until_unmask(sites, round_id=1)
    victim = sites[1]
    state = victim.state_for_checks
    assert len(state["masked_uploads"]) == 1 and state["masked_uploads"][0].endswith("@1")
    # what the site's CKKS step keeps in the same state (the site's own doing, not the server's)
    victim._state = encode_payload({**state, "he_encrypted_rounds": [1]})
    victim.vector = victim.vector * 2  # a new update: welcome in a new round
    plan = plan_setup(sorted(sites), DIM, SETTINGS, 2, random.Random(0))
    victim.send(SETUP, plan.requests[1])
    after = victim.state_for_checks
    assert after["masked_uploads"] == state["masked_uploads"] and after["he_encrypted_rounds"] == [1]
    assert after["stage"] == SETUP and after["round_id"] == 2 and "partners" not in after


@pytest.fixture
def dp_sites(make_config, one_torch_thread) -> MaliciousServer:
    cfg = make_config(
        dp__enabled=True,
        dp__target_epsilon=8.0,
        dp__sample_rate=0.5,
        fed__method="fedavg",
        fed__rounds=2,
        # the quantisation the scripted server plans with: a site refuses any but its own
        secagg__clip=SETTINGS.clip,
        secagg__bits=SETTINGS.bits,
    )
    return MaliciousServer(cfg)


def _train_with_setup(server: MaliciousServer, plan) -> dict[int, dict]:
    return {
        node: site.send("train", server.honest_train(1, **embed_setup(plan.requests[node])))
        for node, site in enumerate(server.sites)
    }


def test_a_retried_training_round_cannot_buy_a_second_sum(dp_sites: MaliciousServer) -> None:
    """Real DP sites (the handler, the runtime, provisioned keys): a retried round re-sends the very
    update released before, which costs no privacy, so the retry must not open a second secure sum
    over it."""
    server = dp_sites
    nodes = list(range(len(server.sites)))
    first = [site.send("train", server.honest_train(1)) for site in server.sites]
    assert all(r["status"] == "ok" for r in first), first
    dim = int(first[0]["dim"])
    # the server "retries" round 1 with a SecAgg+ setup: the sites re-send their release and take part
    plan = plan_setup(nodes, dim, SETTINGS, 1, random.Random(1))
    replies = _train_with_setup(server, plan)
    assert all("secagg_refused" not in r for r in replies.values()), replies
    keys = {n: embedded_setup(r) for n, r in replies.items()}
    shares = {
        n: site.send(SHARES, keys_request(1, plan.graph[n], keys)) for n, site in enumerate(server.sites)
    }
    for n, site in enumerate(server.sites):
        assert "masked" in site.send(MASKED, masked_request(1, inbox(shares, n)))
    # and "retries" it once more, with another graph: same updates, so no second sum
    again = _train_with_setup(server, plan_setup(nodes, dim, SETTINGS, 1, random.Random(2)))
    assert all(r["status"] == "ok" for r in again.values())  # the training result itself stands
    assert all("already masked for round 1" in r.get("secagg_refused", "") for r in again.values()), again
    assert all(embedded_setup(r) is None for r in again.values())
    # nor after the nodes restart and lose their protocol state: the site's guard file remembers
    for site in server.sites:
        site.state = {}
    restarted = _train_with_setup(server, plan_setup(nodes, dim, SETTINGS, 1, random.Random(3)))
    assert all("already masked for round 1" in r.get("secagg_refused", "") for r in restarted.values())
