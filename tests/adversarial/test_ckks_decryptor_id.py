"""Attack (issue 29, item 10), the CKKS decryptor's node id taken from the request: every tag binds
the round's decryptor, and a site checked the tags against the `node_id` the server wrote into the
decrypt request. So the server could hand the round's aggregate to any site, addressed "to the
decryptor", and each decrypted it: one round, as many decryptions as sites (each site's
once-per-round rule counts only its own decryptions), where the protocol allows one.

Now a site is the node its runtime says (Flower's `context.node_id`, the in-process index): a
request naming another node is refused, for the α key, the encryption and the decryption alike.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from secure_fed.crypto import ckks, scalars
from secure_fed.crypto.scalars import DECRYPT_PHASE, ENCRYPT_PHASE, KEYS_PHASE, HESettings
from tests.adversarial.harness import MaliciousServer
from tests.adversarial.test_ckks_fresh_rounds import _admitted_round, _encrypt_request, he_server

__all__ = ["he_server"]  # the fixture, shared with the fresh-round attacks


@pytest.mark.slow  # private rounds of three sites under CKKS: make test-fast leaves it out
def test_a_site_decrypts_only_as_its_own_node(he_server: MaliciousServer) -> None:
    sites = _admitted_round(he_server, 1)
    nodes = list(range(len(sites)))
    keyed = {n: s.send(KEYS_PHASE, {"round_id": 1, "node_id": n}) for n, s in enumerate(sites)}
    encrypted = {
        n: s.send(ENCRYPT_PHASE, _encrypt_request(he_server, 1, n, keyed)) for n, s in enumerate(sites)
    }
    assert all("ciphertext" in r for r in encrypted.values()), encrypted
    settings = HESettings.from_keys_dir(he_server.cfg.he.keys_dir)  # type: ignore[arg-type]
    cts = [encrypted[n]["ciphertext"] for n in nodes]
    decryptor = scalars.decryptor_for(nodes, 1)
    request: dict[str, Any] = {
        "round_id": 1,
        "node_id": decryptor,
        "participants": nodes,
        "participant_keys": [keyed[n]["mask_pk"] for n in nodes],
        "ciphertexts": cts,
        "tags": [encrypted[n]["tag"] for n in nodes],
        "aggregate": ckks.add_ciphertexts(settings.public_context, cts),
    }
    # the same request, sent to every other site: "you are the decryptor"
    for other in (n for n in nodes if n != decryptor):
        reply = sites[other].send(DECRYPT_PHASE, request)
        assert "sum" not in reply, f"node {other} decrypted the round as node {decryptor}"
        assert reply["status"] == "refused" and f"this site is node {other}" in reply["error"], reply
    # the round's decryptor, addressed as itself, decrypts it (once)
    reply = sites[decryptor].send(DECRYPT_PHASE, request)
    exact = np.sum([s.site.runtime.stash["scalars"] for s in sites], axis=0)
    np.testing.assert_allclose(reply["sum"], exact, atol=1e-6, rtol=0)


@pytest.mark.slow  # private rounds of three sites under CKKS: make test-fast leaves it out
def test_a_site_keys_and_encrypts_only_as_its_own_node(he_server: MaliciousServer) -> None:
    sites = _admitted_round(he_server, 1)
    victim = sites[0]
    reply = victim.send(KEYS_PHASE, {"round_id": 1, "node_id": 2})
    assert reply["status"] == "refused" and "this site is node 0" in reply["error"], reply
    keyed = {n: s.send(KEYS_PHASE, {"round_id": 1, "node_id": n}) for n, s in enumerate(sites)}
    assert all("mask_pk" in r for r in keyed.values()), keyed
    reply = victim.send(ENCRYPT_PHASE, _encrypt_request(he_server, 1, 1, keyed))
    assert reply["status"] == "refused" and "this site is node 0" in reply["error"], reply
