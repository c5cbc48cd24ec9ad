"""Attack (d), server-chosen factors: DRFA's λ scales what each site adds to the secure sum, so
λ = 0 for every site but one made "the sum" that one site's update, SecAgg+ intact.

Before the fix a site applied whatever `lambda` the server sent it alone. Now a site accepts a
factor only as its entry of one vector over every site, each entry at least `fed.factor_floor`,
averaging one; the vector's digest is signed into its SecAgg+ keys, so sites shown different
vectors never mask together; and a site's policy names the methods it trains for at all.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from secure_fed.crypto.secagg_protocol import MASKED, SHARES, embed_setup, embedded_setup
from secure_fed.crypto.secagg_server import plan_setup
from secure_fed.site.factors import factors_digest
from tests.adversarial.harness import MaliciousServer
from tests.adversarial.harness_secagg import SETTINGS, inbox, keys_request, masked_request


@pytest.fixture
def drfa(make_config, one_torch_thread) -> MaliciousServer:
    # the quantisation the scripted server plans with (SETTINGS): a site refuses any but its own
    cfg = make_config(
        fed__method="drfa",
        secagg__enabled=True,
        secagg__clip=SETTINGS.clip,
        secagg__bits=SETTINGS.bits,
        fed__rounds=2,
    )
    return MaliciousServer(cfg)


def _names(server: MaliciousServer) -> list[str]:
    return [site.runtime.site for site in server.sites]


def _train(server: MaliciousServer, views: list[list[float]], plan=None) -> list[dict]:
    """Round 1 of DRFA, with site i shown the factor vector views[i] (and its SecAgg+ setup)."""
    replies = []
    for node, (site, factors) in enumerate(zip(server.sites, views, strict=True)):
        setup = embed_setup(plan.requests[node]) if plan is not None else {}
        request = server.honest_train(1, factor_sites=_names(server), factors=factors, **setup)
        replies.append(site.send("train", request))
    return replies


def _shares(server: MaliciousServer, plan, replies: list[dict]) -> list[dict]:
    keys = {n: embedded_setup(r) for n, r in enumerate(replies)}
    return [site.send(SHARES, keys_request(1, plan.graph[n], keys)) for n, site in enumerate(server.sites)]


def _plan(server: MaliciousServer):
    nodes = list(range(len(server.sites)))
    return plan_setup(nodes, server.global_state.size + 1, SETTINGS, 1, random.Random(0))


def test_zero_factors_for_all_but_the_victim_are_refused(drfa: MaliciousServer) -> None:
    n = len(drfa.sites)
    replies = _train(drfa, [[float(n)] + [0.0] * (n - 1)] * n)
    assert all(r["status"] == "refused" and r["code"] == "factors" for r in replies), replies
    assert all("upload" not in site.runtime.stash for site in drfa.sites)  # nothing was trained
    # the refusal is in each site's own signed log, with the request's digest
    for site in drfa.sites:
        (record,) = site.events("instruction")
        assert record["payload"]["outcome"] == "refused" and record["payload"]["code"] == "factors"


@pytest.mark.parametrize("victim_share", [0.9, 0.999])
def test_factors_that_drown_the_other_sites_are_refused(drfa: MaliciousServer, victim_share: float) -> None:
    """Not zero, just small: a sum dominated by one site is that site's update up to a rounding."""
    n = len(drfa.sites)
    rest = n * (1 - victim_share) / (n - 1)
    replies = _train(drfa, [[n * victim_share] + [rest] * (n - 1)] * n)
    assert all(r["code"] == "factors" for r in replies), replies


def test_a_factor_sent_to_one_site_alone_is_refused(drfa: MaliciousServer) -> None:
    reply = drfa.victim.send("train", drfa.honest_train(1, **{"lambda": 3.0}))
    assert reply["status"] == "refused" and reply["code"] == "factors"


def test_sites_shown_different_vectors_never_mask_together(drfa: MaliciousServer) -> None:
    """Each view passes the floor on its own; the server shows the victim the uniform vector and the
    others one that weighs the victim more. The signed digests differ, so no secure sum forms."""
    n = len(drfa.sites)
    plan = _plan(drfa)
    uniform, tilted = [1.0] * n, [2.0] + [(n - 2.0) / (n - 1)] * (n - 1)
    assert min(tilted) >= drfa.cfg.fed.factor_floor
    replies = _train(drfa, [uniform] + [tilted] * (n - 1), plan)
    assert all(r["status"] == "ok" and embedded_setup(r) is not None for r in replies), replies
    shares = _shares(drfa, plan, replies)
    assert all(s.get("status") == "refused" and s["code"] == "secagg" for s in shares), shares
    assert "different factors" in shares[0]["error"]


def test_one_vector_for_all_sums_as_usual(drfa: MaliciousServer) -> None:
    """The control: the same valid vector for every site runs the secure sum to the masked phase."""
    n = len(drfa.sites)
    plan = _plan(drfa)
    tilted = [2.0] + [(n - 2.0) / (n - 1)] * (n - 1)
    replies = _train(drfa, [tilted] * n, plan)
    shares = _shares(drfa, plan, replies)
    assert all("share_ct" in s for s in shares), shares
    masked = [
        site.send(MASKED, masked_request(1, inbox(dict(enumerate(shares)), n)))
        for n, site in enumerate(drfa.sites)
    ]
    assert all(isinstance(m.get("masked"), np.ndarray) for m in masked), masked
    # each site scaled its contribution (the count entry n_k / count_scale included) by its own entry
    scale = drfa.cfg.secagg.count_scale
    counts = [site.runtime.stash["upload"][-1] * scale for site in drfa.sites]
    rows = [len(site.runtime.learner.data.train) for site in drfa.sites]
    np.testing.assert_allclose(np.array(counts) / np.array(rows), tilted)


def test_the_digest_does_not_depend_on_the_order_sent() -> None:
    assert factors_digest(["a", "b", "c"], [1.0, 0.5, 1.5]) == factors_digest(
        ["c", "a", "b"], [1.5, 1.0, 0.5]
    )
    assert factors_digest(["a", "b", "c"], [1.0, 0.5, 1.5]) != factors_digest(
        ["a", "b", "c"], [1.0, 1.5, 0.5]
    )


def test_a_site_trains_only_for_the_methods_its_policy_names(make_config, one_torch_thread) -> None:
    server = MaliciousServer(make_config(fed__method="fedavg", fed__accepted_methods=["fedavg", "fedtar"]))
    reply = server.victim.send("train", server.honest_train(1, method="drfa"))
    assert reply["status"] == "refused" and reply["code"] == "policy"
    assert "fed.accepted_methods" in reply["error"]
    assert server.victim.send("train", server.honest_train(1))["status"] == "ok"


@pytest.mark.slow  # a whole run in process: make test-fast leaves it out
def test_an_honest_drfa_run_under_secagg_sums_every_site(make_config, one_torch_thread) -> None:
    """Our own server: DRFA's factors reach every site alike, the sum's setup runs after training
    (no plan rides on DRFA's training message), and every site masks with every other."""
    from secure_fed.launch.runner import run_inprocess

    cfg = make_config(fed__method="drfa", secagg__enabled=True, fed__rounds=2)
    metrics = run_inprocess(cfg, cfg.out).metrics
    assert metrics["secure_aggregation"] == "secagg+"
    assert [len(r["participants"]) for r in metrics["per_round"]] == [3, 3]
    assert all(r["dropped"] == [] for r in metrics["per_round"])
