"""A server that asks real DP sites for CKKS α rounds under round ids it makes up.

The differencing attack this stops: before the site bound the α round to its admitted release, a
site encrypted its (one, DP-noised) α scalars for any `round_id` it was sent, and the round id was
the decryptor's only replay guard. So with sites V, A and B the server ran rounds 1000 over {V, A},
1001 over {V, B} and 1002 over {A, B}, had each decrypted once, and solved
v = (s_1000 + s_1001 − s_1002) / 2: one site's scalars, from three honest decryptions, uncharged.
Now `handle` answers the scalar phases only for the round of the α release the site admitted
(runtime.stash["scalars_round"], code "alpha_round" otherwise), and client_step lets a site send
one mask key and one ciphertext per round, so the victim's scalars enter exactly one sum.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from secure_fed.config import RunConfig
from secure_fed.crypto import ckks, scalars
from secure_fed.crypto.keys import init_keys
from secure_fed.crypto.scalars import DECRYPT_PHASE, ENCRYPT_PHASE, KEYS_PHASE, HESettings
from secure_fed.protocol.run_context import site_secret_context
from secure_fed.site.handler import handle
from tests.adversarial.harness import MaliciousServer, Site


@dataclass
class _HESite:
    """A harness site that also holds the CKKS secret context, as runner.make_site_handler passes it."""

    site: Site
    secret_context: object

    def send(self, phase: str, request: dict[str, Any]) -> dict[str, Any]:
        reply, self.site.state = handle(
            self.site.runtime, phase, request, self.site.state, self.secret_context
        )
        return reply

    def refusals(self, phase: str) -> list[dict[str, Any]]:
        return [
            r["payload"]
            for r in self.site.events("instruction")
            if r["payload"]["phase"] == phase and r["payload"]["outcome"] == "refused"
        ]


@pytest.fixture
def he_server(
    make_config: Callable[..., RunConfig], one_torch_thread: None, tmp_path: Path
) -> MaliciousServer:
    keys = tmp_path / "keys"
    init_keys(keys, ["server", "site0", "site1", "site2"])
    cfg = make_config(
        dp__enabled=True,
        dp__target_epsilon=8.0,
        dp__sample_rate=0.5,
        fed__method="fedtar",
        fed__rounds=2,
        he__enabled=True,
        he__keys_dir=str(keys),
        audit__keys_dir=str(keys),
    )
    return MaliciousServer(cfg)


def _admitted_round(server: MaliciousServer, round_id: int = 1) -> list[_HESite]:
    """Every site trains round `round_id` honestly and releases its α scalars for it."""
    secret = site_secret_context(server.cfg)
    assert secret is not None
    sites = [_HESite(s, secret) for s in server.sites]
    final, directions = server.directions()
    for site in sites:
        assert site.send("train", server.honest_train(round_id))["status"] == "ok"
        reply = site.send("hypergrad", {"round": round_id, "final": final, "directions": directions})
        assert reply["status"] == "ok", reply
        assert site.site.runtime.stash["scalars_round"] == round_id
    return sites


def _encrypt_request(
    server: MaliciousServer, round_id: int, node: int, keyed: dict[int, dict]
) -> dict[str, Any]:
    nodes = sorted(keyed)
    return {
        "round_id": round_id,
        "node_id": node,
        "decryptor": scalars.decryptor_for(nodes, round_id),
        "key_id": HESettings.from_keys_dir(server.cfg.he.keys_dir).key_id,  # type: ignore[arg-type]
        "peer_nodes": nodes,
        "peer_sites": [keyed[n]["site"] for n in nodes],
        "peer_keys": [keyed[n]["mask_pk"] for n in nodes],
        "peer_signatures": [keyed[n]["signature"] for n in nodes],
    }


@pytest.mark.slow  # private rounds of three sites under CKKS: make test-fast leaves it out
def test_scalar_phases_only_for_the_admitted_alpha_round(he_server: MaliciousServer) -> None:
    sites = _admitted_round(he_server, 1)
    victim = sites[0]
    nodes = list(range(len(sites)))

    # fresh round ids: each would be a fresh mask key and ciphertext of the same scalars
    for round_id in (1000, 1001):
        reply = victim.send(KEYS_PHASE, {"round_id": round_id, "node_id": 0})
        assert reply["status"] == "refused" and reply["code"] == "alpha_round", reply
        assert "mask_pk" not in reply
    fake_keys = {n: {"site": f"site{n}", "mask_pk": b"k" * 32, "signature": b"s" * 64} for n in nodes}
    for round_id in (1000, 1001):
        reply = victim.send(ENCRYPT_PHASE, _encrypt_request(he_server, round_id, 0, fake_keys))
        assert reply["status"] == "refused" and reply["code"] == "alpha_round", reply
        assert "ciphertext" not in reply
    # nor a round id of another type that happens to compare equal after a cast
    reply = victim.send(KEYS_PHASE, {"round_id": "1", "node_id": 0})
    assert reply["status"] == "refused" and reply["code"] == "alpha_round"

    # the admitted round goes ahead, once
    keyed = {n: s.send(KEYS_PHASE, {"round_id": 1, "node_id": n}) for n, s in enumerate(sites)}
    assert all({"mask_pk", "site", "signature"} <= set(r) for r in keyed.values()), keyed
    again = victim.send(KEYS_PHASE, {"round_id": 1, "node_id": 0})
    assert again["status"] == "refused" and again["code"] == "protocol" and "already sent" in again["error"]
    assert "mask_pk" not in again

    replies = {
        n: s.send(ENCRYPT_PHASE, _encrypt_request(he_server, 1, n, keyed)) for n, s in enumerate(sites)
    }
    assert all("ciphertext" in r for r in replies.values()), replies
    again = victim.send(ENCRYPT_PHASE, _encrypt_request(he_server, 1, 0, keyed))
    assert again["status"] == "refused" and "already encrypted" in again["error"]
    again = victim.send(KEYS_PHASE, {"round_id": 1, "node_id": 0})
    assert again["status"] == "refused" and "already sent" in again["error"]

    # the one honest sum of round 1 is right
    settings = HESettings.from_keys_dir(he_server.cfg.he.keys_dir)  # type: ignore[arg-type]
    cts = [replies[n]["ciphertext"] for n in nodes]
    decryptor = scalars.decryptor_for(nodes, 1)
    request = {
        "round_id": 1,
        "node_id": decryptor,
        "participants": nodes,
        "participant_keys": [keyed[n]["mask_pk"] for n in nodes],
        "ciphertexts": cts,
        "tags": [replies[n]["tag"] for n in nodes],
        "aggregate": ckks.add_ciphertexts(settings.public_context, cts),
    }
    reply = sites[decryptor].send(DECRYPT_PHASE, request)
    exact = np.sum([s.site.runtime.stash["scalars"] for s in sites], axis=0)
    np.testing.assert_allclose(reply["sum"], exact, atol=1e-6, rtol=0)
    # and a decryption under a made-up round id is refused before any tag is looked at
    reply = sites[decryptor].send(DECRYPT_PHASE, {**request, "round_id": 1001})
    assert reply["status"] == "refused" and reply["code"] == "alpha_round"

    # every refusal is in the victim's own signed log
    codes = [r["code"] for r in victim.refusals(KEYS_PHASE)]
    assert codes.count("alpha_round") == 3 and codes.count("protocol") == 2
    assert [r["code"] for r in victim.refusals(ENCRYPT_PHASE)] == ["alpha_round", "alpha_round", "protocol"]


@pytest.mark.slow
def test_last_rounds_alpha_cannot_be_summed_again(he_server: MaliciousServer) -> None:
    """Once round 2's α is released, round 1's scalar phases are closed at every site: the server
    cannot come back to an old release for a second, differently composed sum."""
    sites = _admitted_round(he_server, 1)
    _admitted_round(he_server, 2)
    for n, site in enumerate(sites):
        reply = site.send(KEYS_PHASE, {"round_id": 1, "node_id": n})
        assert reply["status"] == "refused" and reply["code"] == "alpha_round", reply


@pytest.mark.slow  # private rounds of three sites under CKKS: make test-fast leaves it out
def test_a_restarted_node_still_remembers_what_it_encrypted(he_server: MaliciousServer) -> None:
    """Flower keeps the protocol state in the SuperNode's memory: a restart would forget that the
    site already encrypted round 1, and the server could have the same scalars masked for a second,
    differently composed set of peers. The site's guard file keeps that record across restarts."""
    sites = _admitted_round(he_server, 1)
    keyed = {n: s.send(KEYS_PHASE, {"round_id": 1, "node_id": n}) for n, s in enumerate(sites)}
    victim = sites[0]
    assert "ciphertext" in victim.send(ENCRYPT_PHASE, _encrypt_request(he_server, 1, 0, keyed))
    victim.site.state = {}  # the node restarts: its protocol state is gone
    again = victim.send(KEYS_PHASE, {"round_id": 1, "node_id": 0})
    assert again["status"] == "refused" and "already sent" in again["error"]
    assert "mask_pk" not in again
