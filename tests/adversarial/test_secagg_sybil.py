"""Attack (a), Sybil neighbours: a server that plays every neighbour of a victim itself opens the
victim's self-mask shares and knows every pairwise mask, so it reads the victim's exact update.

Before the PKI, the victim masked with whatever keys the server relayed: the review's attack, and
`test_the_attack_reads_the_update_when_the_victim_trusts_the_relayed_keys` below, recover the update
to within one quantum. Now a victim accepts a neighbour only with a signature by a provisioned site.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from secure_fed.crypto import secagg_channel as channel
from secure_fed.crypto.secagg_identity import SERVER_PARTY, SecAggIdentity
from secure_fed.crypto.secagg_protocol import MASKED, SETUP, SHARES, SecAggRefused, share_associated_data
from secure_fed.crypto.secagg_server import plan_setup
from secure_fed.crypto.secagg_shamir import SHARE_BYTES
from tests.adversarial.harness_secagg import (
    DIM,
    RUN_ID,
    SETTINGS,
    Pki,
    Site,
    keys_request,
    pair_sign,
    quantum,
    self_mask,
    strip,
    sybil_keys,
)

SYBILS = (2, 3)


def _victim(pki: Pki, identity: SecAggIdentity | None = None) -> Site:
    vector = np.random.default_rng(0).normal(0, 1, DIM)
    return Site(1, identity or pki.identity("victim"), vector)


def _attack(victim: Site, keys: dict, secrets: dict) -> np.ndarray:
    """The server plays nodes 2 and 3: it opens the victim's shares with its own channel keys and
    knows both pairwise masks. Returns what it reads as the victim's update."""
    plan = plan_setup([1, *SYBILS], DIM, SETTINGS, 1, random.Random(0))
    shared = victim.send(SHARES, keys_request(1, list(SYBILS), keys))
    channel_key = {s: channel.channel_key(secrets[s]["enc_sk"], keys[1]["enc_pk"]) for s in SYBILS}
    opened = [
        channel.open_sealed(channel_key[s], share_associated_data(1, 1, s), ct)
        for s, ct in zip(shared["share_to"], shared["share_ct"], strict=True)
    ]
    # the victim wants shares from a threshold of neighbours before it masks: the server makes them
    junk = [
        channel.seal(channel_key[s], share_associated_data(1, s, 1), bytes(SHARE_BYTES), random.randbytes)
        for s in SYBILS
    ]
    reply = victim.send(MASKED, {"round_id": 1, "share_from": list(SYBILS), "share_ct": junk})
    masks = [self_mask(opened, plan)]
    for s in SYBILS:
        key = channel.pairwise_mask_key(secrets[s]["mask_sk"], keys[1]["mask_pk"], 1)
        masks.append((key, pair_sign(1, s)))
    return strip(reply["masked"], masks, plan)


def _setup(victim: Site) -> dict:
    plan = plan_setup([1, *SYBILS], DIM, SETTINGS, 1, random.Random(0))
    return {1: victim.send(SETUP, plan.requests[1])}


def test_the_attack_reads_the_update_when_the_victim_trusts_the_relayed_keys() -> None:
    """The attack works whenever the victim accepts the server's keys as its neighbours' (here: a
    PKI that lists keys the server holds, which is what trusting the relay amounts to)."""
    server_keys = {"north": Ed25519PrivateKey.generate(), "south": Ed25519PrivateKey.generate()}
    pki = Pki(["victim"])
    trusting = SecAggIdentity(
        "victim",
        RUN_ID,
        pki.keys["victim"],
        {**pki.public, **{site: key.public_key() for site, key in server_keys.items()}},
    )
    victim = _victim(pki, trusting)
    keys, secrets = _setup(victim), {}
    for node, site in zip(SYBILS, server_keys, strict=True):
        keys[node], secrets[node] = sybil_keys(1, node, site, server_keys[site])
    plan = plan_setup([1, *SYBILS], DIM, SETTINGS, 1, random.Random(0))
    read = _attack(victim, keys, secrets)
    assert np.max(np.abs(read - victim.vector)) <= quantum(plan)


@pytest.mark.parametrize(
    ("claims", "signer", "refusal"),
    [
        ("north", "nobody", "not signed by site 'north'"),
        ("north", "a key of its own", "not signed by site 'north'"),
        ("north", "the server's provisioned key", "not signed by site 'north'"),
        ("north", "south's key", "not signed by site 'north'"),
        ("mallory", "a key of its own", "'mallory', which is not a provisioned site"),
        (SERVER_PARTY, "the server's provisioned key", "'server', which is not a provisioned site"),
    ],
)
def test_server_made_neighbours_are_refused(claims: str, signer: str, refusal: str) -> None:
    pki = Pki(["victim", "north", "south", SERVER_PARTY])
    victim = _victim(
        pki,
        SecAggIdentity(
            "victim", RUN_ID, pki.keys["victim"], {s: k for s, k in pki.public.items() if s != SERVER_PARTY}
        ),
    )
    key = {
        "nobody": None,
        "a key of its own": Ed25519PrivateKey.generate(),
        "the server's provisioned key": pki.keys[SERVER_PARTY],
        "south's key": pki.keys["south"],
    }[signer]
    keys = _setup(victim)
    keys[2], _ = sybil_keys(1, 2, claims, key)
    keys[3], _ = sybil_keys(1, 3, "south", pki.keys["south"])  # a real site's signature, for contrast
    with pytest.raises(SecAggRefused, match=refusal):
        victim.send(SHARES, keys_request(1, list(SYBILS), keys))
    # nothing left the victim: no share was sealed, its state still waits for share distribution
    assert victim.state_for_checks["stage"] == SETUP


def test_a_real_site_cannot_lend_its_signature_to_a_second_node() -> None:
    """Node 3 is genuinely south (signed by south's key), node 2 claims south as well, signed by
    south too: a site under two node ids is refused, whoever made the keys."""
    pki = Pki(["victim", "north", "south"])
    victim = _victim(pki)
    keys = _setup(victim)
    keys[2], _ = sybil_keys(1, 2, "south", pki.keys["south"])
    keys[3], _ = sybil_keys(1, 3, "south", pki.keys["south"])
    with pytest.raises(SecAggRefused, match="repeated identity: site 'south' appears as nodes 2 and 3"):
        victim.send(SHARES, keys_request(1, list(SYBILS), keys))
