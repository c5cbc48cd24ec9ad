"""Attack (b), one identity in two places, and its relatives: genuinely signed keys of one site
under two node ids, keys replayed from another round or run, the victim's own keys handed back to
it, and a neighbourhood with fewer distinct sites than the Shamir threshold needs.

Before the PKI a victim had no notion of who a neighbour was, so none of these was refused
(the same site set up under two node ids passed: see the report's pre-change run).
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from secure_fed.crypto.secagg_protocol import SETUP, SHARES, SecAggRefused
from secure_fed.crypto.secagg_server import plan_setup
from tests.adversarial.harness_secagg import DIM, RUN_ID, SETTINGS, Pki, Site, keys_request, sybil_keys

NODES = [1, 2, 3, 4, 5]


@pytest.fixture
def pki() -> Pki:
    return Pki(["victim", "north", "south", "east", "west"])


def _site(pki: Pki, node: int, name: str) -> Site:
    return Site(node, pki.identity(name), np.random.default_rng(node).normal(0, 1, DIM))


def _plan(round_id: int = 1):
    # five nodes, complete graph: each has 4 neighbours, threshold 3
    return plan_setup(NODES, DIM, SETTINGS, round_id, random.Random(0))


def test_one_site_set_up_under_two_node_ids_is_refused(pki: Pki) -> None:
    plan = _plan()
    victim, north, south = _site(pki, 1, "victim"), _site(pki, 2, "north"), _site(pki, 3, "south")
    keys = {1: victim.send(SETUP, plan.requests[1]), 3: south.send(SETUP, plan.requests[3])}
    # the server sets north up twice, as node 2 and as node 4: both replies are genuinely signed
    keys[2] = north.send(SETUP, plan.requests[2])
    keys[4] = north.send(SETUP, plan.requests[4])
    with pytest.raises(SecAggRefused, match="repeated identity: site 'north' appears as nodes 2 and 4"):
        victim.send(SHARES, keys_request(1, [2, 3, 4], keys))


def test_a_colluding_site_cannot_stand_in_twice(pki: Pki) -> None:
    """A malicious real site holds its signing key and signs whatever the server asks for."""
    plan = _plan()
    victim = _site(pki, 1, "victim")
    keys = {1: victim.send(SETUP, plan.requests[1])}
    for node in (2, 3, 4):
        keys[node], _ = sybil_keys(1, node, "west", pki.keys["west"])
    with pytest.raises(SecAggRefused, match="repeated identity: site 'west'"):
        victim.send(SHARES, keys_request(1, [2, 3, 4], keys))


def test_the_victims_own_keys_handed_back_are_refused(pki: Pki) -> None:
    plan = _plan()
    victim = _site(pki, 1, "victim")
    keys = {1: victim.send(SETUP, plan.requests[1])}
    keys[2], _ = sybil_keys(1, 2, "victim", pki.keys["victim"])  # as if the server held its key
    keys[3], _ = sybil_keys(1, 3, "north", pki.keys["north"])
    keys[4], _ = sybil_keys(1, 4, "south", pki.keys["south"])
    with pytest.raises(SecAggRefused, match="node 2 claims to be this site"):
        victim.send(SHARES, keys_request(1, [2, 3, 4], keys))


@pytest.mark.parametrize("signed_for", ["round 1", "another run", "node 5", "other factors"])
def test_keys_signed_for_something_else_are_refused(pki: Pki, signed_for: str) -> None:
    """North's own signature, as the server holds it from an earlier message, over keys for
    round 1, for another run, for node 5, or for inputs scaled by factors the victim was not shown,
    relayed as node 2's keys in round 2."""
    plan = _plan(round_id=2)
    victim = _site(pki, 1, "victim")
    keys = {1: victim.send(SETUP, plan.requests[1])}
    for node, site in ((3, "south"), (4, "east")):
        keys[node], _ = sybil_keys(2, node, site, pki.keys[site])
    round_id, run_id, node, context = {
        "round 1": (1, RUN_ID, 2, b""),
        "another run": (2, "run-0", 2, b""),
        "node 5": (2, RUN_ID, 5, b""),
        "other factors": (2, RUN_ID, 2, b"\x01" * 32),
    }[signed_for]
    keys[2], _ = sybil_keys(round_id, node, "north", pki.keys["north"], run_id=run_id, context=context)
    refusal = "not signed by site 'north' for this node, round, run and context"
    with pytest.raises(SecAggRefused, match=refusal):
        victim.send(SHARES, keys_request(2, [2, 3, 4], keys))


def test_fewer_distinct_sites_than_the_threshold_needs_are_refused(pki: Pki) -> None:
    """Threshold 3 of 4: with two genuine neighbours the victim's self mask would be shared among
    sites of which the server needs to fool none; the victim stops before sharing anything."""
    plan = _plan()
    victim = _site(pki, 1, "victim")
    keys = {1: victim.send(SETUP, plan.requests[1])}
    for node, site in ((2, "north"), (3, "south")):
        keys[node], _ = sybil_keys(1, node, site, pki.keys[site])
    with pytest.raises(SecAggRefused, match="only 3 distinct sites .* threshold 3 needs 4"):
        victim.send(SHARES, keys_request(1, [2, 3], keys))
