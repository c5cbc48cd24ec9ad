"""Distributed DP against a server that hands each site its own survivor confirmations back.

The consistency step (test_survivor_views.py) makes the survivor set one confirmed fact: a site
answers an unmask request only with confirmations of the set it confirmed from h of its members.
A confirmation is a MAC under the key the two sites of a pair share. If the confirmed statement
names neither sender nor recipient, the tag site u sends peer v verifies at u as v's tag to u: the
server reflects each site's own tags back to it and needs no honest peer to agree. At 5 sites
(c = 1, h = 4) it then shows each honest site a different survivor set and strips two sums of two
honest shares each (noise variance 2/3 of what the ledger prices). Listing the "dropped" partner's
site under a made-up node id made every site log the same five sites, so `audit verify` passed.

Now a confirmation names its sender and recipient (node and site), a site refuses a survivor set
that names a peer's site under any node id other than the one that site signed its keys as, and
each site logs the (node, site) pairs it confirmed, which `audit verify` compares across sites.
These tests drive real `SiteRuntime`s through `handle`.
"""

from __future__ import annotations

from typing import Any

import pytest

from secure_fed.crypto.secagg_protocol import CONSISTENCY, UNMASK
from tests.adversarial.harness import MaliciousServer, secure_round_until_masked
from tests.adversarial.harness_secagg import Transcript, what_is_learned
from tests.adversarial.test_survivor_views import COLLUDER, SPLIT, _Party, unmask_request
from tests.conftest import DISTRIBUTED_DP

ALIAS_BASE = 100  # made-up node ids under which the server lists each site's "dropped" partner


def _reflection_attack(
    server: MaliciousServer, transcript: Transcript, round_id: int, alias: bool
) -> tuple[dict[int, Any], dict[int, str]]:
    """Each honest site n is shown the survivors without SPLIT[n] (with `alias`, SPLIT[n]'s site is
    listed under a made-up node id instead, so every site's list names the same five sites), and its
    unmask request carries the tags it sent its peers, each handed back as that peer's."""
    everyone = sorted(transcript.masked)
    sites_of = {n: transcript.keys[n]["site"] for n in everyone}
    answers: dict[int, Any] = {}
    refusals: dict[int, str] = {}
    for n, gone in SPLIT.items():
        view = [u for u in everyone if u != gone]
        listed = view + ([ALIAS_BASE + n] if alias else [])
        listed_sites = [sites_of[u] for u in view] + ([sites_of[gone]] if alias else [])
        reply = server.sites[n].send(
            CONSISTENCY, {"round_id": round_id, "survivors": listed, "survivor_sites": listed_sites}
        )
        if "confirmations" not in reply:
            refusals[n] = f"consistency: {reply.get('error')}"
        own = dict(zip(reply.get("confirm_to", []), reply.get("confirmations", []), strict=True))
        reply = server.sites[n].send(UNMASK, unmask_request(round_id, transcript.partners[n], view, own))
        answers[n] = reply if "seed_shares" in reply else None
        if answers[n] is None:
            refusals.setdefault(n, f"unmask: {reply.get('error')}")
    return answers, refusals


def _attacked_round(make_config, alias: bool) -> tuple[MaliciousServer, Any, dict[int, Any], dict[int, str]]:  # noqa: ANN001
    cfg = make_config(**DISTRIBUTED_DP | {"dp__honest_min": None}, data__synth__sites=5, fed__method="fedavg")
    server = MaliciousServer(cfg)
    assert server.victim.runtime.privacy.distributed.honest_min == 4  # h = n − c at 5 sites, c = 1
    secure = secure_round_until_masked(server, 1)
    assert not secure.refused and secure.masked() == [0, 1, 2, 3, 4], secure.refused
    answers, refusals = _reflection_attack(server, secure.transcript, 1, alias)
    parties = {n: _Party(site.state, honest=n != COLLUDER) for n, site in enumerate(server.sites)}
    learned = what_is_learned(secure.transcript, parties, answers)
    return server, learned, answers, refusals


def _verify_problems(server: MaliciousServer) -> list[str]:
    from secure_fed.crypto.keys import load_public_keys
    from secure_fed.verifier.verify import verify_logs

    return [p.reason for p in verify_logs(server.log_paths(), load_public_keys(server.keys_dir)).problems]


@pytest.mark.parametrize("alias", [False, True], ids=["plain", "node-id-alias"])
@pytest.mark.slow  # rounds of three sites in process: make test-fast leaves it out
def test_reflected_confirmations_unmask_no_sum_with_less_noise_than_accounted(
    make_config, one_torch_thread, alias: bool
) -> None:  # noqa: ANN001
    server, learned, answers, refusals = _attacked_round(make_config, alias)
    too_few = [sorted(s) for s in learned.sets if len(s) < 3]  # h − c = 3 honest shares
    assert not too_few, f"the server unmasked sums of {too_few}: less noise than the accounting assumes"
    assert sorted(refusals) == sorted(SPLIT), refusals
    for n in SPLIT:
        last = server.sites[n].events("instruction")[-1]["payload"]
        assert last["outcome"] == "refused", last
    if alias:
        # the site refuses the aliased set itself, before it confirms anything
        assert all("signed its keys as node" in r for r in refusals.values()), refusals
        assert all(not server.sites[n].events("secagg_survivors") for n in SPLIT)
    else:
        assert all("confirmation is not" in r for r in refusals.values()), refusals


@pytest.mark.slow  # rounds of three sites in process: make test-fast leaves it out
def test_verify_names_the_round_and_sites_when_sites_confirmed_an_aliased_set(
    make_config, one_torch_thread, monkeypatch
) -> None:  # noqa: ANN001
    """Were a site ever to confirm a set that lists a peer under another node id (the check above
    removed), the (node, site) pairs it logs differ from the other sites', and `audit verify` fails
    naming the round and each site, though every log lists the same five site names."""
    from secure_fed.crypto.secagg_client import phase_unmask

    monkeypatch.setattr(phase_unmask, "_check_named_as_signed", lambda *args: None)
    server, _, _, _ = _attacked_round(make_config, alias=True)
    logged = {n: server.sites[n].events("secagg_survivors")[-1]["payload"] for n in SPLIT}
    assert len({tuple(p["survivors"]) for p in logged.values()}) == 1  # the same five names
    differ = [r for r in _verify_problems(server) if "confirmed different survivor sets" in r]
    assert differ and all(r.startswith("round 1: ") for r in differ), differ
    assert all(f"site{n} confirmed {{" in differ[0] for n in SPLIT), differ[0]


@pytest.mark.slow  # rounds of three sites in process: make test-fast leaves it out
def test_without_direction_binding_the_reflection_attack_works(
    make_config, one_torch_thread, monkeypatch
) -> None:  # noqa: ANN001
    """The test above has teeth: with a confirmation that names neither sender nor recipient (the
    rule before), reflected tags verify and the server strips sums of two honest shares; `audit
    verify` still names the round and the sites, whose logged sets differ."""
    from secure_fed.crypto.secagg_client import phase_unmask

    monkeypatch.setattr(phase_unmask, "confirmation_statement", lambda survivors, *_: survivors)
    server, learned, answers, _ = _attacked_round(make_config, alias=False)
    assert all(answers[n] is not None for n in SPLIT)
    assert min(len(s) for s in learned.sets) == 2
    differ = [r for r in _verify_problems(server) if "confirmed different survivor sets" in r]
    assert differ and all(r.startswith("round 1: ") for r in differ), differ
