from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tenseal as ts
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from secure_fed.crypto import ckks, keys, scalars
from secure_fed.crypto.scalars import (
    DECRYPT_PHASE,
    ENCRYPT_PHASE,
    HESettings,
    ScalarAggregationError,
    client_step,
    sum_scalars,
)
from secure_fed.crypto.transport import LocalTransport

T = 5


@pytest.fixture(scope="module")
def keydir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("k") / "KEYS"
    keys.init_keys(root, ["server"])
    return root


@pytest.fixture(scope="module")
def secret(keydir: Path) -> ts.Context:
    return keys.load_he_context(keys.secret_context_path(keydir), True, keys.load_fingerprints(keydir))


@pytest.fixture(scope="module")
def settings(keydir: Path) -> HESettings:
    return HESettings.from_keys_dir(keydir)


def _step(phase: str, request: dict[str, Any], state: dict[str, Any], inp: Any) -> tuple[dict, dict]:
    values, ctx = inp
    return client_step(phase, request, state, values, ctx)


def _sites(n: int, ctx: ts.Context | None, seed: int = 0) -> dict[int, tuple[np.ndarray, ts.Context | None]]:
    rng = np.random.default_rng(seed)
    # Flower node ids are large unsigned 64-bit values; use some to exercise the encoding
    return {(2**63 + 17 * i if i % 2 else 1000 + i): (rng.normal(scale=3.0, size=T), ctx) for i in range(n)}


def _plain_sum(sites: Mapping[int, tuple[np.ndarray, Any]], ids: list[int] | None = None) -> np.ndarray:
    return np.sum([sites[n][0] for n in (ids if ids is not None else sites)], axis=0)


@pytest.mark.parametrize("n", range(3, 11))
def test_encrypted_sum_equals_plain_sum(n: int, secret: ts.Context, settings: HESettings) -> None:
    sites = _sites(n, secret, seed=n)
    transport = LocalTransport(sites, _step)
    total = sum_scalars(transport, list(sites), round_id=n, settings=settings)
    np.testing.assert_allclose(total, _plain_sum(sites), atol=1e-6, rtol=0)
    # the server saw ciphertexts and tags from the sites, and only the sum from the decryptor
    for r in transport.received:
        if r.phase == ENCRYPT_PHASE:
            assert set(r.payload) == {"ciphertext", "tag"}
            assert isinstance(r.payload["ciphertext"], bytes) and len(r.payload["ciphertext"]) > 100_000
        else:
            assert r.phase == DECRYPT_PHASE and set(r.payload) == {"sum"}
            assert r.node == scalars.decryptor_for(list(sites), n)


def test_plain_mode_is_exact_and_needs_no_keys() -> None:
    sites = _sites(4, None)
    total = sum_scalars(LocalTransport(sites, _step), list(sites), 0, None)
    np.testing.assert_array_equal(total, _plain_sum(sites))


def test_site_with_he_keys_refuses_plain_round(secret: ts.Context) -> None:
    sites = _sites(3, secret)
    with pytest.raises(ScalarAggregationError, match="no site sent"):
        sum_scalars(LocalTransport(sites, _step), list(sites), 0, None)


def test_decryptor_rotates_over_sorted_ids() -> None:
    ids = [30, 10, 20]
    assert [scalars.decryptor_for(ids, r) for r in range(4)] == [10, 20, 30, 10]


def test_dropouts(secret: ts.Context, settings: HESettings) -> None:
    sites = _sites(4, secret, seed=1)
    ids = list(sites)
    dec = scalars.decryptor_for(ids, 7)
    gone = next(n for n in ids if n != dec)
    transport = LocalTransport(sites, _step, dropouts={ENCRYPT_PHASE: [gone]})
    total = sum_scalars(transport, ids, 7, settings)
    np.testing.assert_allclose(total, _plain_sum(sites, [n for n in ids if n != gone]), atol=1e-6)

    transport = LocalTransport(sites, _step, dropouts={DECRYPT_PHASE: [scalars.decryptor_for(ids, 8)]})
    with pytest.raises(ScalarAggregationError, match="did not answer"):
        sum_scalars(transport, ids, 8, settings)

    few = LocalTransport(sites, _step, dropouts={ENCRYPT_PHASE: ids[1:]})
    with pytest.raises(ScalarAggregationError, match="1 of 4 sites sent ciphertexts, need ≥ 2"):
        sum_scalars(few, ids, 9, settings)


def test_server_settings_reject_secret_context(secret: ts.Context) -> None:
    with pytest.raises(ValueError, match="public context"):
        HESettings(secret)


def test_mismatched_server_key_is_refused_by_sites(secret: ts.Context, tmp_path: Path) -> None:
    keys.init_keys(tmp_path / "other", ["server"])
    foreign = HESettings.from_keys_dir(tmp_path / "other")
    sites = _sites(3, secret)
    with pytest.raises(ScalarAggregationError, match="different `keys init` runs"):
        sum_scalars(LocalTransport(sites, _step), list(sites), 0, foreign)


def test_tag_key_needs_the_secret(keydir: Path, secret: ts.Context, settings: HESettings) -> None:
    again = keys.load_he_context(keys.secret_context_path(keydir), True)
    assert scalars.tag_key(again) == scalars.tag_key(secret)  # every site derives the same key
    with pytest.raises(ValueError, match="secret context"):
        scalars.tag_key(settings.public_context)


# ------------------------------------------------------------------ a server that deviates


class _Round:
    """Runs the encrypt phase honestly, then lets a test craft the decrypt request."""

    def __init__(self, secret: ts.Context, settings: HESettings, n: int = 3, round_id: int = 4) -> None:
        self.secret, self.settings, self.round_id = secret, settings, round_id
        self.sites = _sites(n, secret, seed=round_id)
        self.ids = sorted(self.sites)
        self.decryptor = scalars.decryptor_for(self.ids, round_id)
        self.states: dict[int, dict[str, Any]] = {n: {} for n in self.ids}
        self.cts: dict[int, bytes] = {}
        self.tags: dict[int, bytes] = {}
        for n in self.ids:
            reply, self.states[n] = self._client(n, ENCRYPT_PHASE, self.encrypt_request(n))
            self.cts[n], self.tags[n] = reply["ciphertext"], reply["tag"]

    def encrypt_request(self, n: int, round_id: int | None = None) -> dict[str, Any]:
        rid = self.round_id if round_id is None else round_id
        return {"round_id": rid, "node_id": n, "decryptor": self.decryptor, "key_id": self.settings.key_id}

    def _client(self, n: int, phase: str, request: dict[str, Any]) -> tuple[dict, dict]:
        return client_step(phase, request, self.states[n], self.sites[n][0], self.secret)

    def decrypt_request(self, ids: list[int], **changes: Any) -> dict[str, Any]:
        public = self.settings.public_context
        request = {
            "round_id": self.round_id,
            "node_id": self.decryptor,
            "participants": ids,
            "ciphertexts": [self.cts[n] for n in ids],
            "tags": [self.tags[n] for n in ids],
            "aggregate": ckks.add_ciphertexts(public, [self.cts[n] for n in ids]),
        }
        return {**request, **changes}

    def decrypt(self, request: dict[str, Any]) -> dict[str, Any]:
        reply, self.states[self.decryptor] = self._client(self.decryptor, DECRYPT_PHASE, request)
        return reply


def test_honest_decrypt_request_is_answered(secret: ts.Context, settings: HESettings) -> None:
    rnd = _Round(secret, settings)
    reply = rnd.decrypt(rnd.decrypt_request(rnd.ids))
    np.testing.assert_allclose(reply["sum"], _plain_sum(rnd.sites), atol=1e-6)
    # released values sit on the rounding grid, which hides the CKKS decryption noise
    steps = reply["sum"] / scalars.RELEASE_GRID
    np.testing.assert_array_equal(steps, np.round(steps))


def test_single_participant_is_refused(secret: ts.Context, settings: HESettings) -> None:
    rnd = _Round(secret, settings)
    reply = rnd.decrypt(rnd.decrypt_request(rnd.ids[:1]))
    assert "sum" not in reply and "fewer than 2 sites" in reply["error"]


def test_aggregate_that_is_not_the_sum_is_refused(secret: ts.Context, settings: HESettings) -> None:
    rnd = _Round(secret, settings)
    public = settings.public_context
    a, b, _ = rnd.ids
    # lists three sites but the aggregate holds only a and b: a difference would expose the third
    partial = ckks.add_ciphertexts(public, [rnd.cts[a], rnd.cts[b]])
    reply = rnd.decrypt(rnd.decrypt_request(rnd.ids, aggregate=partial))
    assert "sum" not in reply and "not the sum" in reply["error"]
    # a's ciphertext counted twice: 2·x_a + x_b − (x_a + x_b) would expose a
    doubled = ckks.add_ciphertexts(public, [rnd.cts[a], rnd.cts[a], rnd.cts[b]])
    reply = rnd.decrypt(rnd.decrypt_request([a, b], aggregate=doubled))
    assert "not the sum" in reply["error"]
    reply = rnd.decrypt(rnd.decrypt_request([a, b], aggregate=b"junk"))
    assert "not a CKKS vector" in reply["error"]
    # having refused, the decryptor still answers an honest request for the round
    assert "sum" in rnd.decrypt(rnd.decrypt_request(rnd.ids))


def test_forged_tags_are_refused(secret: ts.Context, settings: HESettings) -> None:
    rnd = _Round(secret, settings)
    a, b, c = rnd.ids
    public = settings.public_context
    own = ckks.encrypt_vector(public, np.full(T, 100.0))  # the server's own ciphertext
    # the best key the server can derive: HKDF over the public context it holds
    guess = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"secure_fed ckks scalar tags v1")
    server_key = guess.derive(ckks.serialize_public(public))
    fake = scalars.make_tag(server_key, rnd.round_id, c, rnd.decryptor, own)
    cts = [rnd.cts[a], own]
    request = rnd.decrypt_request(
        [a, c], ciphertexts=cts, tags=[rnd.tags[a], fake], aggregate=ckks.add_ciphertexts(public, cts)
    )
    reply = rnd.decrypt(request)
    assert "sum" not in reply and f"tags of nodes [{c}] do not verify" in reply["error"]
    # genuine tags relabelled to other nodes do not verify either
    reply = rnd.decrypt(rnd.decrypt_request([a, b], tags=[rnd.tags[b], rnd.tags[a]]))
    assert "do not verify" in reply["error"]


def test_tags_bind_round_and_decryptor(secret: ts.Context, settings: HESettings) -> None:
    rnd = _Round(secret, settings)
    a, b, _ = rnd.ids
    other = next(n for n in rnd.ids if n != rnd.decryptor)
    # the same ciphertexts presented as another round's, or to a node that is not the decryptor
    reply = rnd.decrypt(rnd.decrypt_request([a, b], round_id=rnd.round_id + 1))
    assert "do not verify" in reply["error"]
    wrong_node = rnd.decrypt_request([a, b], node_id=other)
    reply, _ = client_step(DECRYPT_PHASE, wrong_node, {}, rnd.sites[other][0], secret)
    assert "do not verify" in reply["error"]


def test_replayed_round_is_refused(secret: ts.Context, settings: HESettings) -> None:
    rnd = _Round(secret, settings)
    assert "sum" in rnd.decrypt(rnd.decrypt_request(rnd.ids))
    # same round, a subset: the difference would be the missing site's values
    reply = rnd.decrypt(rnd.decrypt_request(rnd.ids[:2]))
    assert "sum" not in reply and "replay" in reply["error"]


def test_a_site_encrypts_once_per_round(secret: ts.Context, settings: HESettings) -> None:
    rnd = _Round(secret, settings)
    n = rnd.ids[0]
    reply, state = rnd._client(n, ENCRYPT_PHASE, rnd.encrypt_request(n))
    assert "ciphertext" not in reply and "already encrypted" in reply["error"]
    assert state == rnd.states[n]
    reply, _ = rnd._client(n, ENCRYPT_PHASE, rnd.encrypt_request(n, round_id=rnd.round_id + 1))
    assert "ciphertext" in reply


def test_client_step_is_pure(secret: ts.Context, settings: HESettings) -> None:
    state: dict[str, Any] = {"other": 1}
    request = {"round_id": 1, "node_id": 5, "decryptor": 5, "key_id": settings.key_id}
    _, new_state = client_step(ENCRYPT_PHASE, request, state, np.ones(T), secret)
    assert state == {"other": 1} and new_state == {"other": 1, "he_encrypted_rounds": [1]}


def test_malformed_requests_are_refused_not_crashed(secret: ts.Context, settings: HESettings) -> None:
    reply, _ = client_step(ENCRYPT_PHASE, {"round_id": "1"}, {}, np.ones(T), secret)
    assert "round_id" in reply["error"]
    twice = {"round_id": 1, "node_id": 2, "participants": [1, 1]}
    reply, _ = client_step(DECRYPT_PHASE, twice, {}, np.ones(T), secret)
    assert "listed twice" in reply["error"]
    reply, _ = client_step(ENCRYPT_PHASE, {"round_id": 1}, {}, np.ones(T), None)
    assert "no secret CKKS context" in reply["error"]
    reply, _ = client_step("nonsense", {}, {}, np.ones(T), secret)
    assert "unknown phase" in reply["error"]
