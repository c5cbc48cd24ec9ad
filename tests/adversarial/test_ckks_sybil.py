"""A server that plays the victim's peers in a CKKS α round (Sybil / key substitution).

If the victim masked with keys the server made, the server would know every pair mask in the
victim's ciphertext (X25519 is symmetric: the server's secret and the victim's public key give the
same pair key as the victim's secret and the server's public key) and, with any holder of the
secret context (one colluding hospital, or a decryptor that decrypts what it is shown), read the
victim's scalars exactly. Before this change there were no peer keys at all: a site encrypted its
scalars unmasked for whatever request came, so every case below was answered with a ciphertext of
the raw values and `"ciphertext" not in reply` failed. Now a site masks only for keys signed, for
this run, round and node, by the provisioned key of the site named with them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tenseal as ts
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from secure_fed.crypto import ckks, keys, scalar_masks, scalars
from secure_fed.crypto.scalars import ENCRYPT_PHASE, KEYS_PHASE, HESettings, client_step
from secure_fed.crypto.secagg_identity import SecAggIdentity, load_identity
from tests.crypto.he_kit import he_fixtures

T = 6
RUN = "run-sybil"
ROUND = 3
NAMES = ["site0", "site1", "site2"]
NODES = [100, 101, 102]
VICTIM = NODES[0]


keydir, secret, settings = he_fixtures(NAMES)


class _Victim:
    """The victim site after it sent its signed mask key for the round; the real peers' signed
    keys are what an honest server would relay."""

    def __init__(self, keydir: Path, secret: ts.Context, settings: HESettings) -> None:
        self.secret, self.settings = secret, settings
        self.identities: dict[int, SecAggIdentity] = {
            node: load_identity(keydir, name, RUN) for node, name in zip(NODES, NAMES, strict=True)
        }
        self.values = np.random.default_rng(0).normal(size=T)
        self.signed: dict[int, dict[str, Any]] = {}
        self.state: dict[str, Any] = {}
        for node in NODES:
            reply, state = client_step(
                KEYS_PHASE,
                {"round_id": ROUND, "node_id": node},
                {},
                np.zeros(T),
                secret,
                self.identities[node],
            )
            self.signed[node] = reply
            if node == VICTIM:
                self.state = state

    def request(self, entries: list[tuple[int, str, bytes, bytes]]) -> dict[str, Any]:
        """An encrypt request listing the victim (its own genuine entry) and `entries`."""
        own = self.signed[VICTIM]
        rows = [(VICTIM, own["site"], own["mask_pk"], own["signature"]), *entries]
        return {
            "round_id": ROUND,
            "node_id": VICTIM,
            "decryptor": NODES[1],
            "key_id": self.settings.key_id,
            "peer_nodes": [r[0] for r in rows],
            "peer_sites": [r[1] for r in rows],
            "peer_keys": [r[2] for r in rows],
            "peer_signatures": [r[3] for r in rows],
        }

    def genuine(self, node: int) -> tuple[int, str, bytes, bytes]:
        s = self.signed[node]
        return node, s["site"], s["mask_pk"], s["signature"]

    def encrypt(self, request: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        return client_step(
            ENCRYPT_PHASE, request, self.state, self.values, self.secret, self.identities[VICTIM]
        )


@pytest.fixture
def victim(keydir: Path, secret: ts.Context, settings: HESettings) -> _Victim:
    return _Victim(keydir, secret, settings)


def _statement(node: int, site: str, pk: bytes) -> bytes:
    return scalars.keys_statement(RUN, ROUND, node, site, pk)


def _sybils(keydir: Path, how: str) -> tuple[list[tuple[int, str, bytes, bytes]], list[bytes]]:
    """Two peers whose X25519 keys the server made (it keeps their secrets), presented `how`."""
    server_key = keys.load_signing_key(keydir, "server")
    entries, secrets = [], []
    for node, real_name in zip(NODES[1:], NAMES[1:], strict=True):
        sk, pk = scalar_masks.new_keypair()
        secrets.append(sk)
        made_up = f"ghost{node}"
        if how == "unsigned":
            entries.append((node, made_up, pk, b""))
        elif how == "made-up site, server-made signing key":
            entries.append(
                (node, made_up, pk, Ed25519PrivateKey.generate().sign(_statement(node, made_up, pk)))
            )
        elif how == "real site's name, server-made signing key":
            entries.append(
                (node, real_name, pk, Ed25519PrivateKey.generate().sign(_statement(node, real_name, pk)))
            )
        elif how == "real site's name, the server's provisioned key":
            entries.append((node, real_name, pk, server_key.sign(_statement(node, real_name, pk))))
        elif how == "the server as a peer, its provisioned key":
            name = "server" if node == NODES[1] else real_name  # site names are unique in a list
            entries.append((node, name, pk, server_key.sign(_statement(node, name, pk))))
        else:
            raise AssertionError(how)
    return entries, secrets


HOW = [
    "unsigned",
    "made-up site, server-made signing key",
    "real site's name, server-made signing key",
    "real site's name, the server's provisioned key",
    "the server as a peer, its provisioned key",
]


@pytest.mark.parametrize("how", HOW)
def test_victim_refuses_peers_the_server_made(how: str, victim: _Victim, keydir: Path) -> None:
    entries, _ = _sybils(keydir, how)
    reply, state = victim.encrypt(victim.request(entries))
    assert "ciphertext" not in reply and "is not signed by a provisioned site" in reply["error"], reply
    assert state == victim.state  # the key stays unused; the honest round can still go ahead
    reply, _ = victim.encrypt(victim.request([victim.genuine(n) for n in NODES[1:]]))
    assert "ciphertext" in reply


def test_one_real_peer_and_one_sybil_is_refused(victim: _Victim, keydir: Path) -> None:
    """Half a Sybil attack: with one genuine peer H and one server-made peer S, a colluder holding
    the secret context would strip m_VS and be left with v ± m_VH; the server gains nothing a
    colluding site does not already give it, but a key it made is still never masked for."""
    entries, _ = _sybils(keydir, "real site's name, server-made signing key")
    reply, _ = victim.encrypt(victim.request([victim.genuine(NODES[1]), entries[1]]))
    assert "ciphertext" not in reply and f"node {NODES[2]}" in reply["error"]


def test_real_signature_on_a_substituted_key_is_refused(victim: _Victim) -> None:
    """The server keeps a real site's name and genuine signature and swaps in its own key."""
    node, site, _, signature = victim.genuine(NODES[1])
    _, server_pk = scalar_masks.new_keypair()
    reply, _ = victim.encrypt(victim.request([(node, site, server_pk, signature), victim.genuine(NODES[2])]))
    assert "ciphertext" not in reply and "is not signed by a provisioned site" in reply["error"]


def test_what_the_server_would_read_had_the_victim_masked_for_sybils(
    victim: _Victim, keydir: Path, secret: ts.Context
) -> None:
    """Why the signatures matter: the victim's masked vector for server-made peers, built with
    scalar_masks directly (the path client_step now refuses), is unmasked by the server with its
    own peer secrets alone, and one decryption by any holder of the secret context ends it."""
    entries, secrets = _sybils(keydir, "unsigned")
    own_secret = victim.state["he_mask_secret"]
    context = f"{RUN}|{ROUND}".encode()
    me = victim.identities[VICTIM].site
    values = scalar_masks.masked(victim.values, me, own_secret, [(e[1], e[2]) for e in entries], context)
    ciphertext = ckks.encrypt_vector(secret, values)
    seen = ckks.decrypt_vector(secret, ciphertext)[:T]
    own_pk = victim.signed[VICTIM]["mask_pk"]
    for (_, site, _, _), sk in zip(entries, secrets, strict=True):
        mask = scalar_masks.pair_mask(
            scalar_masks.pair_key(sk, own_pk, context), T, scalar_masks.mask_bits(3)
        )
        seen = seen - (mask if me < site else -mask)
    np.testing.assert_allclose(seen, victim.values, atol=1e-6)
    # and the refusal that stops it
    reply, _ = victim.encrypt(victim.request(entries))
    assert "ciphertext" not in reply
