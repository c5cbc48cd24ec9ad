"""Distributed DP's noise sized for the confirmed survivors, against the server that removes it.

A site's share carries mu/(h − c), enough for the fewest survivors it unmasks with, in layers: a
base and one removable layer between consecutive counts it sizes for (h and the top two:
secure_fed.dp.distributed). With its unmask reply a site reveals the seeds of the layers its
confirmed survivor count m frees, keeping mu/(m − c), so the m − c honest survivors still carry
mu_total. Three attacks, each through real
`SiteRuntime`s driven by `handle` (5 sites, c = 1, h = 4: one removable layer, freed at m = 5):

- the server lies about m: one site is gone (its input is not in the sum) and the server asks the
  other four to size their noise for five. A site that took the server's count revealed its layer,
  and three honest shares of mu/4 carried 3/4 of what the ledger charged. Now m is the site's own
  count (itself and the confirmations it verified) and a server count that differs is refused;
- a site drops between confirming and revealing: its input is in the sum with all its layers, so
  the sum carries at least mu_total whichever site colludes;
- a reveal requested twice: a second unmask of the round is refused (the protocol's order, and
  the site's own mark of the rounds it revealed, which holds even without the protocol's rule).
"""

from __future__ import annotations

from typing import Any

import pytest

from secure_fed.crypto.secagg_protocol import CONSISTENCY, NOISE_LAYER_SEEDS, SETUP, UNMASK
from tests.adversarial.harness import MaliciousServer, secure_round_until_masked
from tests.adversarial.harness_secagg import consistency_request
from tests.adversarial.test_survivor_views import unmask_request
from tests.conftest import DISTRIBUTED_DP


def _round(make_config) -> tuple[MaliciousServer, Any]:  # noqa: ANN001
    cfg = make_config(**DISTRIBUTED_DP | {"dp__honest_min": None}, data__synth__sites=5, fed__method="fedavg")
    server = MaliciousServer(cfg)
    plan = server.victim.runtime.privacy.distributed
    assert (plan.honest_min, plan.colluders, plan.max_sites) == (4, 1, 5)
    secure = secure_round_until_masked(server, 1)
    assert not secure.refused and secure.masked() == [0, 1, 2, 3, 4], secure.refused
    return server, secure.transcript


def _confirm(
    server: MaliciousServer, transcript: Any, shown: list[int], confirming: list[int]
) -> dict[int, dict[int, bytes]]:
    """Show `shown` as the survivor set to `confirming`; return recipient → {sender: tag}."""
    mail: dict[int, dict[int, bytes]] = {n: {} for n in confirming}
    for n in confirming:
        reply = server.sites[n].send(CONSISTENCY, consistency_request(1, shown, transcript.keys))
        assert "confirmations" in reply, reply
        for to, tag in zip(reply["confirm_to"], reply["confirmations"], strict=True):
            if to in mail:
                mail[to][n] = tag
    return mail


def _unmask(
    server: MaliciousServer, transcript: Any, n: int, shown: list[int], mail: dict[int, bytes], m: int
) -> dict[str, Any]:
    request = unmask_request(1, transcript.partners[n], shown, mail)
    request["noise_survivors"] = m
    return server.sites[n].send(UNMASK, request)


def _honest_floor(
    server: MaliciousServer, in_sum: list[int], revealed: dict[int, list[int]], colluder: int
) -> float:
    """The noise variance the honest shares in the sum keep once the revealed layers are removed."""
    from secure_fed.dp.distributed import removable_layers

    plan = server.victim.runtime.privacy.distributed
    layers = removable_layers(plan)
    return sum(plan.share_mu - sum(layers[i] for i in revealed.get(n, [])) for n in in_sum if n != colluder)


def _verify_problems(server: MaliciousServer) -> list[str]:
    from secure_fed.crypto.keys import load_public_keys
    from secure_fed.verifier.verify import verify_logs

    return [p.reason for p in verify_logs(server.log_paths(), load_public_keys(server.keys_dir)).problems]


def _revealed(replies: dict[int, dict[str, Any]]) -> dict[int, list[int]]:
    return {n: list(r["noise_layer_index"]) for n, r in replies.items() if NOISE_LAYER_SEEDS in r}


@pytest.mark.parametrize("shown", ["four", "five-with-a-silent-one"])
@pytest.mark.parametrize("naive", [True, False], ids=["site-takes-the-servers-m", "site-counts-m-itself"])
@pytest.mark.slow  # rounds of three sites in process: make test-fast leaves it out
def test_a_server_that_claims_more_survivors_gets_no_layer(
    make_config, one_torch_thread, monkeypatch, shown: str, naive: bool
) -> None:  # noqa: ANN001
    """Site 4's input is not in the sum (the server treats it as dropped after the masked phase);
    the server asks sites 0-3 to size their noise for 5 survivors. Site 3 colludes."""
    from secure_fed.site import handler

    if naive:  # the deliberately naive site: m is whatever the server says
        monkeypatch.setattr(
            handler, "_confirmed_count", lambda state, request: request.get("noise_survivors")
        )
    server, transcript = _round(make_config)
    view = [0, 1, 2, 3, 4] if shown != "four" else [0, 1, 2, 3]
    mail = _confirm(server, transcript, view, [0, 1, 2, 3])  # site 4 is silent from here on
    replies = {n: _unmask(server, transcript, n, view, mail[n], 5) for n in (0, 1, 2, 3)}
    plan = server.victim.runtime.privacy.distributed
    floor = _honest_floor(server, [0, 1, 2, 3], _revealed(replies), colluder=3)
    if naive:
        assert _revealed(replies) == {n: [0] for n in range(4)}, replies
        assert floor == pytest.approx(0.75 * plan.mu_total)  # the attack worked: 3/4 of the charged noise
        # `audit verify` re-derives m from each site's signed records and names every such reveal
        named = [r for r in _verify_problems(server) if "revealed noise layers for 5 survivors" in r]
        assert sorted(r.split(":")[1].split()[0] for r in named) == [f"site{n}" for n in range(4)], named
        return
    assert not _revealed(replies), replies
    for n, reply in replies.items():
        assert reply["status"] == "refused" and "seed_shares" not in reply, reply
        assert "this site confirmed 4" in reply["error"], reply["error"]
        assert server.sites[n].events("instruction")[-1]["payload"]["outcome"] == "refused"
        assert not server.sites[n].events("noise_layers_revealed")
    assert floor >= plan.mu_total
    # refused, the site answers nothing more this round: not even the server's count corrected
    again = _unmask(server, transcript, 0, view, mail[0], 4)
    assert again["status"] == "refused" and NOISE_LAYER_SEEDS not in again, again


@pytest.mark.parametrize("colluder", [0, 1, 2, 3, 4])
@pytest.mark.slow  # rounds of three sites in process: make test-fast leaves it out
def test_a_site_that_drops_after_confirming_keeps_its_layers_in_the_sum(
    make_config, one_torch_thread, colluder: int
) -> None:  # noqa: ANN001
    server, transcript = _round(make_config)
    everyone = [0, 1, 2, 3, 4]
    mail = _confirm(server, transcript, everyone, everyone)
    # site 4 confirmed, then drops: it answers no unmask request, so it reveals nothing
    replies = {n: _unmask(server, transcript, n, everyone, mail[n], 5) for n in (0, 1, 2, 3)}
    assert all("seed_shares" in r for r in replies.values()), replies
    assert _revealed(replies) == {n: [0] for n in range(4)}
    plan = server.victim.runtime.privacy.distributed
    # its masked input is in the sum (the others reveal its self-mask share, never a key with it)
    floor = _honest_floor(server, everyone, _revealed(replies), colluder)
    assert floor >= plan.mu_total * (1 - 1e-12), (colluder, floor / plan.mu_total)
    for n in range(4):
        (record,) = server.sites[n].events("noise_layers_revealed")
        assert record["payload"]["survivors"] == 5 and record["payload"]["layers"] == [0]
        assert record["payload"]["confirmed"] == sorted(transcript.keys[u]["site"] for u in everyone)
    assert not server.sites[4].events("noise_layers_revealed")
    assert not [r for r in _verify_problems(server) if "noise layers" in r]


@pytest.mark.parametrize("naive", [True, False], ids=["no-reveal-mark", "real"])
@pytest.mark.slow  # rounds of three sites in process: make test-fast leaves it out
def test_a_second_reveal_of_a_round_is_refused(
    make_config, one_torch_thread, monkeypatch, naive: bool
) -> None:  # noqa: ANN001
    """A second unmask of the round: refused by the protocol (its state is past the unmask), and by
    the site's mark of revealed rounds where the protocol state is rolled back to before the unmask
    (a node whose context.state was lost after it replied): the mark lives in the guard's file."""
    from secure_fed.site import handler

    if naive:  # the deliberately naive site: no mark of the rounds it revealed
        monkeypatch.setattr(handler, "_check_not_revealed", lambda *args: None)
    server, transcript = _round(make_config)
    everyone = [0, 1, 2, 3, 4]
    mail = _confirm(server, transcript, everyone, everyone)
    site = server.sites[0]
    before = dict(site.state)
    first = _unmask(server, transcript, 0, everyone, mail[0], 5)
    assert first["noise_layer_index"] == [0], first
    again = _unmask(server, transcript, 0, everyone, mail[0], 5)
    assert again["status"] == "refused" and NOISE_LAYER_SEEDS not in again, again  # the protocol's order
    site.state = before  # the state as it was before the unmask
    second = _unmask(server, transcript, 0, everyone, mail[0], 5)
    if naive:
        assert second.get("noise_layer_index") == [0] and "seed_shares" in second, second  # answered twice
        assert len(site.events("noise_layers_revealed")) == 2
        return
    assert second["status"] == "refused" and NOISE_LAYER_SEEDS not in second, second
    assert "already answered round 1" in second["error"], second["error"]
    assert len(site.events("noise_layers_revealed")) == 1
    # a restarted protocol for the same round never gets that far: the share is masked once
    restart = site.send(SETUP, dict(transcript.plan.requests[0]))
    assert "enc_pk" not in restart, restart
