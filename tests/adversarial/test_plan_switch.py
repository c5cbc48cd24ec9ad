"""Distributed DP against a server that masks a site's release under another plan than the one it
was noised for (issue 62, finding 2).

A deployed site's plan follows the run's round count, and a `train` that reached a node before any
`hello` planned with the run config's count, after which the first `hello` fixed another. The
retry path re-stashed the saved `release-r<N>.npy`, and SecAgg+ signed it for the plan the site now
held. So the server sent the victim round 1 before `hello` (noised for 20 rounds), announced 2
rounds, and sent the victim round 1 again inside round 2's secure sum: the victim's share summed
with the others' round-2 shares, noised for 2 rounds, carried 0.585 × the noise its ledger charged
(measured here; the review's run measured 0.581), and `audit verify` passed (the plans agreed
within each round number).

Now the round count and method are fixed at a run's first message and kept in the site's guard
(a message that disagrees is refused and logged), a saved release keeps the digest of the plan it
was noised for (it is sent only under that plan, and SecAgg+ signs it for that plan), a SecAgg+
round other than the upload's training round is refused, and `audit verify` names a site that took
part in a round's secure sum without a share charged for that round, and a site whose plan changed
between its rounds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from secure_fed.config import RunConfig
from secure_fed.crypto.keys import load_public_keys
from secure_fed.crypto.secagg_protocol import SETUP, VectorSum, embed_setup, embedded_setup
from secure_fed.crypto.secagg_server import plan_setup
from secure_fed.dp.distributed import padded_size
from secure_fed.server.aggregation import AggregationSettings, secure_sum
from secure_fed.server.transports import InProcessTransport
from secure_fed.verifier.verify import verify_logs
from tests.adversarial.harness import MaliciousServer
from tests.conftest import DISTRIBUTED_DP

VICTIM = 0
COLLUDER = 4


def _with_rounds(cfg: RunConfig, rounds: int) -> RunConfig:
    return cfg.model_copy(update={"fed": cfg.fed.model_copy(update={"rounds": rounds})})


@pytest.fixture
def announced(make_config, one_torch_thread) -> RunConfig:  # noqa: ANN001
    """Five sites, h = 4, c = 1: what the first `hello` announces (2 rounds)."""
    return make_config(**DISTRIBUTED_DP | {"dp__honest_min": None}, data__synth__sites=5, fed__rounds=2)


def _secure_sum(server: MaliciousServer, cfg: RunConfig, round_id: int) -> VectorSum:
    """Our server's SecAgg+ sum of the round over every site, through the sites' real handlers."""
    transport = InProcessTransport({node: site.send for node, site in enumerate(server.sites)})
    dim = padded_size(server.victim.runtime.learner.distributed_dim(cfg.fed.method))
    settings = AggregationSettings.from_config(cfg)
    return secure_sum(transport, list(range(len(server.sites))), dim, settings, round_id)


def _plan_switch(server: MaliciousServer, announced: RunConfig) -> VectorSum:
    """Round 1 to the victim before any `hello`; then `hello` (2 rounds) to every site, round 2 to
    the others and round 1 again to the victim, all in the secure sum of round 2."""
    server.victim.send("train", server.honest_train(1))
    # the victim's node now holds the announced round count (a fresh process per message)
    server.restart(VICTIM, announced)
    for site in server.sites:
        site.send("hello", {"method": announced.fed.method, "rounds": announced.fed.rounds})
    for node, site in enumerate(server.sites):
        site.send("train", server.honest_train(1 if node == VICTIM else 2))
    return _secure_sum(server, announced, 2)


@pytest.mark.slow
def test_a_release_planned_before_hello_is_never_summed_under_the_plan_hello_fixed(
    announced: RunConfig,
) -> None:
    server = MaliciousServer(announced, told={"site0": _with_rounds(announced, 20)})
    charged = server.victim.runtime.privacy.distributed  # what round 1's release was noised for
    others = server.sites[1].runtime.privacy.distributed
    assert charged.mu_total > others.mu_total  # the lie matters: 20 rounds need more noise a round

    summed = _plan_switch(server, announced)
    if VICTIM in summed.survivors:
        # the most noise the sum holds against the colluder: every honest share in it
        honest = [n for n in summed.survivors if n not in (VICTIM, COLLUDER)]
        carried = charged.share_mu + others.share_mu * len(honest)
        assert carried >= charged.mu_total, (
            f"the victim's round-1 release (noised for 20 rounds) was summed with round-2 shares noised "
            f"for 2: the sum carries {carried / charged.mu_total:.3f} × the mu_total its ledger charged"
        )
    assert VICTIM not in summed.survivors and len(summed.survivors) == 4
    # the run was fixed at its first message: the victim refused the other round count, and said so
    logged = [r["payload"] for r in server.victim.events("instruction")]
    refused = [p for p in logged if p["outcome"] != "acted"]
    changed = [("hello", "run_changed"), ("train", "run_changed")]
    assert [(p["phase"], p["code"]) for p in refused[:2]] == changed, refused
    # the words stay in the site's unsigned debug log
    said = [d for d in server.victim.debug() if d["code"] == "run_changed"]
    assert "20 rounds" in said[0]["detail"] and "\n" not in said[0]["detail"]


@pytest.mark.slow  # rounds of three sites in process: make test-fast leaves it out
def test_a_hello_that_changes_the_round_count_is_refused_and_logged(announced: RunConfig) -> None:
    server = MaliciousServer(_with_rounds(announced, 20))
    assert server.victim.send("train", server.honest_train(1))["status"] == "ok"
    reply = server.victim.send("hello", {"method": announced.fed.method, "rounds": 2})
    assert reply.get("status") == "refused" and reply.get("code") == "run_changed", reply
    assert "20" in reply["error"] and "\n" not in reply["error"]
    # the same round count is acted on, and so is a hello that names none
    assert server.victim.send("hello", {"method": announced.fed.method, "rounds": 20})["site"] == "site0"
    assert server.victim.send("hello", {})["site"] == "site0"
    logged = [(r["payload"]["phase"], r["payload"]["outcome"]) for r in server.victim.events("instruction")]
    assert logged == [("train", "acted"), ("hello", "refused"), ("hello", "acted"), ("hello", "acted")]


def test_a_saved_release_is_sent_again_only_under_its_own_plan(make_config, one_torch_thread) -> None:  # noqa: ANN001
    cfg = make_config(**DISTRIBUTED_DP, fed__rounds=2)
    server = MaliciousServer(cfg)
    first = server.victim.send("train", server.honest_train(1))
    assert first["status"] == "ok", first
    # the node comes back with the same rounds and method but another plan (its policy's h changed)
    changed = cfg.model_copy(update={"dp": cfg.dp.model_copy(update={"honest_min": 2})})
    server.restart(VICTIM, changed)
    retry = server.victim.send("train", server.honest_train(1))
    assert retry["status"] == "refused" and retry["code"] == "plan_changed", retry
    assert first["distributed_plan"][:12] in retry["error"] and "\n" not in retry["error"]
    assert "upload" not in server.victim.runtime.stash
    # the same plan (a crash and a restart under the same policy) re-sends the same release
    server.restart(VICTIM, cfg)
    again = server.victim.send("train", server.honest_train(1))
    assert again["status"] == "ok" and again["distributed_plan"] == first["distributed_plan"], again
    released = np.load(server.victim.runtime.folder / "release-r1.npy")
    np.testing.assert_array_equal(server.victim.runtime.stash["upload"], released)


def test_a_secagg_setup_for_another_round_than_the_upload_is_refused(make_config, one_torch_thread) -> None:  # noqa: ANN001
    cfg = make_config(secagg__enabled=True, fed__method="fedavg", fed__rounds=2)
    server = MaliciousServer(cfg)
    settings = AggregationSettings.from_config(cfg).secagg
    assert settings is not None
    reply = server.victim.send("train", server.honest_train(1))
    nodes = list(range(len(server.sites)))
    plan_2 = plan_setup(nodes, int(reply["dim"]), settings, 2)
    # as its own phase, and inside a training message: round 1's update is not masked in round 2
    refused = server.victim.send(SETUP, plan_2.requests[VICTIM])
    assert refused.get("status") == "refused" and "training round 1" in refused["error"], refused
    carried = server.victim.send("train", server.honest_train(1, **embed_setup(plan_2.requests[VICTIM])))
    assert carried["status"] == "ok" and embedded_setup(carried) is None
    assert "training round 1" in carried["secagg_refused"], carried
    setups = [r["payload"] for r in server.victim.events("instruction") if r["payload"]["phase"] == SETUP]
    assert [p["outcome"] for p in setups] == ["refused"]
    assert "round 2" in [d for d in server.victim.debug() if d["phase"] == SETUP][0]["detail"]
    # round 1's own setup is acted on
    keys = server.victim.send(SETUP, plan_setup(nodes, int(reply["dim"]), settings, 1).requests[VICTIM])
    assert set(keys) >= {"enc_pk", "mask_pk", "key_sig"}, keys


@pytest.mark.slow
def test_verify_names_the_round_and_the_site_of_the_plan_switch(announced: RunConfig, monkeypatch) -> None:  # noqa: ANN001
    """The logs of the attack as the sites wrote them before the refusals above: those are switched
    off here (with them the victim refuses the attack and logs only its refusals); everything else
    is the real runtimes, their signed logs and `audit verify`."""
    from secure_fed.site import handler
    from secure_fed.site.guard import SiteGuard
    from secure_fed.site.runtime import SiteRuntime

    monkeypatch.setattr(SiteGuard, "fix_run", lambda self, method, rounds: None)
    monkeypatch.setattr(SiteGuard, "check_announced", lambda self, method, rounds, source: None)
    monkeypatch.setattr(SiteRuntime, "_release_plan", lambda self, round_id, released: self._current_plan())
    monkeypatch.setattr(handler, "_check_secagg_round", lambda runtime, setup: None)
    server = MaliciousServer(announced, told={"site0": _with_rounds(announced, 20)})
    assert VICTIM in _plan_switch(server, announced).survivors  # the attack went through
    # and the run goes on: round 3 at every site, the victim's share now noised for 2 rounds
    for site in server.sites:
        assert site.send("train", server.honest_train(3))["status"] == "ok"
    assert len(_secure_sum(server, announced, 3).survivors) == 5
    for site in server.sites:
        assert site.send("finish", {})["status"] == "ok"

    # every log closed and intact: what fails is the victim's, and only that (passed before)
    result = verify_logs(server.log_paths(), load_public_keys(server.keys_dir))
    assert not result.ok and {Path(p.path).name for p in result.problems} == {"site0.jsonl"}
    unshared, changed = sorted(p.reason for p in result.problems)
    assert unshared.startswith(
        "round 2: site0 took part in round 2's secure sum but its log charges no distributed-DP share "
        "for round 2 (its shares are charged for round(s) 1, 3)"
    ), unshared
    assert changed.startswith("round 3: site0's distributed-DP plan differs from its own plan of round 1 in ")
    assert "mu_total" in changed, changed
