"""Distributed DP against a server that tells each site a different story about who survived.

Under `dp.noise = "distributed"` every site's upload carries only mu_total / (h − c) of the noise;
the accounting holds only if whatever the server unmasks holds at least h − c honest shares. A
site used to check only its own list of survivors (`len(survived) + 1 >= h`), which is the
server's word to that site alone. At 5 sites with the defaults (c = 1, so h = 4), telling site0
"site3 dropped", site1 "site2 dropped", site2 "site0 dropped" and site3 "site1 dropped" passed
every site's check, and with the colluding fifth site's secrets the server unmasked two disjoint
sums of two honest sites each: noise of variance 2/3 of mu_total where the ledger assumed mu_total.

Now the survivor set is one confirmed fact: after the masked uploads each site confirms the set of
survivors it is shown (once a round) to each of its neighbours in it, with an HMAC under the key the
two share, and answers an unmask request only for the set it confirmed, carrying confirmations of
that same set from at least h of its members. Honest sites confirm one set each, so two sets with
h confirmers each need 2(h − c) ≤ n − c honest sites; and whatever set they confirmed, every
pairwise mask between two of its honest confirmers stays unknown, so each sum the server can strip
holds a whole group of ≥ h − c honest confirmers.

These tests drive real `SiteRuntime`s through `handle` (the split-view attack end to end) and
search every view assignment of a model of the protocol exhaustively for n = 4…8.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from secure_fed.crypto import secagg_channel as channel
from secure_fed.crypto.secagg_identity import confirmation_statement, survivors_statement
from secure_fed.crypto.secagg_protocol import (
    CONSISTENCY,
    UNMASK,
)
from tests.adversarial.harness import MaliciousServer, secure_round_until_masked
from tests.adversarial.harness_secagg import Transcript, what_is_learned
from tests.conftest import DISTRIBUTED_DP

# the split of the review: site i is told that SPLIT[i] dropped (site 4 colludes with the server)
SPLIT = {0: 3, 1: 2, 2: 0, 3: 1}
COLLUDER = 4


@dataclass
class _Party:
    """A real site as `what_is_learned` sees it: honest (its state never leaves it) or colluding."""

    state: dict[str, Any]
    honest: bool

    @property
    def secrets(self) -> dict[str, Any]:
        assert not self.honest
        return self.state


def _split_view_answers(server: MaliciousServer, transcript: Transcript, round_id: int) -> dict[int, Any]:
    """The attack: each honest site is shown the survivors minus its own SPLIT partner, first as a
    set to confirm (what a site that checks one survivor set needs), then as its unmask request,
    carrying every confirmation addressed to it (the honest sites' of whatever set they confirmed,
    and its colluder's of the site's own view: the colluder holds its pairwise keys)."""
    everyone = sorted(transcript.masked)
    sites_of = {n: transcript.keys[n]["site"] for n in everyone}
    views = {n: [u for u in everyone if u != SPLIT[n]] for n in SPLIT}
    mail: dict[int, dict[int, bytes]] = {n: {} for n in SPLIT}
    for n, view in views.items():
        reply = server.sites[n].send(
            CONSISTENCY,
            {"round_id": round_id, "survivors": view, "survivor_sites": [sites_of[u] for u in view]},
        )
        for to, tag in zip(reply.get("confirm_to", []), reply.get("confirmations", []), strict=True):
            if to in mail:
                mail[to][n] = tag
    colluder = server.sites[COLLUDER]
    keys = dict(zip(colluder.state["peers"], colluder.state["peer_confirm_key"], strict=True))
    answers: dict[int, Any] = {}
    for n, view in views.items():
        statement = survivors_statement(
            colluder.runtime.identity().run_id,
            round_id,
            view,
            [sites_of[u] for u in view],
            colluder.state["context"],
        )
        # the colluder's tag is a real one, to n from the colluder (it holds the pair's key)
        to_n = confirmation_statement(statement, COLLUDER, sites_of[COLLUDER], n, sites_of[n])
        mine = {**mail[n], COLLUDER: channel.confirm(keys[n], to_n)}
        reply = server.sites[n].send(UNMASK, unmask_request(round_id, transcript.partners[n], view, mine))
        answers[n] = reply if "seed_shares" in reply else None
    return answers


def unmask_request(round_id: int, held: list[int], view: list[int], tags: dict[int, bytes]) -> dict[str, Any]:
    """An unmask request for survivor view `view` to a site whose partners are `held`, carrying
    `tags` (node → the confirmation shown as that node's), and the survivor count our server would
    size the noise for: the site and the confirmations it is shown."""
    return {
        "round_id": round_id,
        "survived": [w for w in held if w in view],
        "dropped": [w for w in held if w not in view],
        "confirmed_by": sorted(tags),
        "confirmations": [tags[u] for u in sorted(tags)],
        "noise_survivors": len(tags) + 1,
    }


@pytest.mark.parametrize("method", ["fedavg"])
@pytest.mark.slow  # rounds of three sites in process: make test-fast leaves it out
def test_split_survivor_views_unmask_no_sum_with_less_noise_than_accounted(
    make_config, one_torch_thread, method: str
) -> None:  # noqa: ANN001
    cfg = make_config(**DISTRIBUTED_DP | {"dp__honest_min": None}, data__synth__sites=5, fed__method=method)
    server = MaliciousServer(cfg)
    h, c = cfg.dp.colluders + 3, cfg.dp.colluders  # h = n − c = 4 at 5 sites, c = 1
    assert server.victim.runtime.privacy.distributed.honest_min == h
    secure = secure_round_until_masked(server, 1)
    assert not secure.refused and secure.masked() == [0, 1, 2, 3, 4], secure.refused
    transcript = secure.transcript
    answers = _split_view_answers(server, transcript, 1)
    parties = {n: _Party(site.state, honest=n != COLLUDER) for n, site in enumerate(server.sites)}
    learned = what_is_learned(transcript, parties, answers)
    # each unmasked sum's honest shares carry mu_total / (h − c) each
    too_few = [sorted(s) for s in learned.sets if len(s) < h - c]
    assert not too_few, f"the server unmasked sums of {too_few}: less noise than the accounting assumes"
    refused = [n for n, a in answers.items() if a is None]
    assert refused == sorted(SPLIT), "an honest site answered a set without h confirmations"
    # each refusal is in the site's own signed log
    for n in SPLIT:
        last = server.sites[n].events("instruction")[-1]["payload"]
        assert (last["phase"], last["outcome"]) == (UNMASK, "refused"), last
    # the four sets the sites confirmed differ, and `audit verify` says so, naming the round and sites
    from secure_fed.crypto.keys import load_public_keys
    from secure_fed.verifier.verify import verify_logs

    result = verify_logs(server.log_paths(), load_public_keys(server.keys_dir))
    differ = [p.reason for p in result.problems if "confirmed different survivor sets" in p.reason]
    assert differ and all(r.startswith("round 1: ") for r in differ), result.problems
    assert all(f"site{n} confirmed {{" in differ[0] for n in SPLIT), differ[0]
