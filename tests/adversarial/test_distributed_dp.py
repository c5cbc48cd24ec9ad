"""Distributed DP inside SecAgg+ (dp.noise = "distributed"): each site's upload carries only a share
of the noise, so who must survive, and what one upload shows, are privacy questions.

(a) A server that declares honest sites dropped, to unmask a sum with fewer than h sites' shares in
it (less noise than the accounting assumes), gets no secret that unmasks anything: every site
whose signed view of the survivors is below h refuses, naming h and its view.
"""

from __future__ import annotations

import numpy as np
import pytest

from secure_fed.crypto.secagg_client import SiteRules
from secure_fed.crypto.secagg_protocol import UNMASK, SecAggRefused, SecAggSettings
from tests.adversarial.harness_secagg import (
    Pki,
    Site,
    Transcript,
    honest_until_unmask,
    unmask_request,
    what_is_learned,
)

RING_BITS = 32
RING = SecAggSettings(clip=8.0, bits=24, ring_bits=RING_BITS)
DIM = 256


def _sites(n: int, honest_min: int | None, colluder: int | None = None) -> dict[int, Site]:
    """n sites whose inputs are ring residues (noise-share stand-ins), each with its own rule h."""
    pki = Pki([f"site-{i}" for i in range(1, n + 1)])
    rng = np.random.default_rng(n)
    rules = SiteRules(ring_bits=RING_BITS, honest_min=honest_min)
    return {
        i: Site(
            i,
            pki.identity(f"site-{i}"),
            rng.integers(0, 2**RING_BITS, DIM, dtype=np.uint64).astype(np.uint32),
            honest=i != colluder,
            rules=rules,
        )
        for i in range(1, n + 1)
    }


def _declare_dropped(transcript: Transcript, node: int, dropped: set[int]) -> dict:
    held = transcript.partners[node]
    return unmask_request(1, [w for w in held if w not in dropped], [w for w in held if w in dropped])


def test_a_server_declaring_honest_sites_dropped_below_h_gets_no_sum() -> None:
    """5 sites, h = 5, site 5 colludes: the server says site 4 dropped (it did not: its masked
    input is in hand) to unmask the sum of sites 1-3 and 5, four shares of which one is its
    colluder's. The SecAgg+ threshold (3 of 4 partners) allows that request; h does not."""
    sites = _sites(5, honest_min=5, colluder=5)
    transcript = honest_until_unmask(sites, settings=RING)
    assert set(transcript.masked) == set(sites)
    answers = {}
    for n in (1, 2, 3):
        request = _declare_dropped(transcript, n, {4})
        with pytest.raises(SecAggRefused, match=r"fewer than h = 5 \(dp.honest_min\)") as refused:
            sites[n].send(UNMASK, request)
        # the refusal names the view the site was shown: four sites, node 4 missing
        assert f"nodes {sorted({1, 2, 3, 5})}" in str(refused.value)
        answers[n] = None
    answers[4] = None  # declared dropped: never asked
    learned = what_is_learned(transcript, sites, answers)
    assert learned.sets == [], "the server computed a sum of the honest sites' inputs"


def test_without_h_the_same_lie_buys_a_sum_of_fewer_shares() -> None:
    """The control: sites without the rule (site-mode SecAgg+) answer the same request, and the
    server gets the sum of three honest shares (with its colluder's, four of the five)."""
    sites = _sites(5, honest_min=None, colluder=5)
    transcript = honest_until_unmask(sites, settings=RING)
    answers: dict[int, dict | None] = {
        n: sites[n].send(UNMASK, _declare_dropped(transcript, n, {4})) for n in (1, 2, 3)
    }
    answers[4] = None
    learned = what_is_learned(transcript, sites, answers)
    assert frozenset({1, 2, 3}) in learned.sets


def test_a_site_refuses_a_neighbourhood_smaller_than_h() -> None:
    """A masking graph that gives a site fewer than h - 1 neighbours could never show it h
    survivors: refused at the setup, before its keys are advertised."""
    sites = _sites(8, honest_min=8)  # 8 sites: log-scale degree 6, so 7 sites in a neighbourhood
    with pytest.raises(SecAggRefused, match="fewer than the 8"):
        honest_until_unmask(sites, settings=RING)
    assert all(site.state_for_checks.get("stage") is None for site in sites.values())
