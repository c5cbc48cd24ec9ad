"""α scalars summed in the clear or under CKKS with signed, zero-sum pairwise masks (scalars.py)."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tenseal as ts
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from secure_fed.crypto import ckks, keys, scalar_masks, scalars
from secure_fed.crypto.scalars import (
    DECRYPT_PHASE,
    ENCRYPT_PHASE,
    KEYS_PHASE,
    HESettings,
    ScalarAggregationError,
    client_step,
    sum_scalars,
)
from secure_fed.crypto.secagg_identity import SecAggIdentity, load_identity
from secure_fed.crypto.transport import LocalTransport
from tests.crypto.he_kit import he_fixtures

T = 5
RUN = "run-scalars"
SITES = [f"site{i}" for i in range(10)]


@dataclass(frozen=True)
class Site:
    """What one site brings to a scalar round: its values, secret context and signing identity."""

    values: np.ndarray
    ctx: ts.Context | None
    identity: SecAggIdentity | None
    min_participants: int = scalars.MIN_PARTICIPANTS


keydir, secret, settings = he_fixtures(SITES)


@pytest.fixture(scope="module")
def identities(keydir: Path) -> dict[str, SecAggIdentity]:
    return {site: load_identity(keydir, site, RUN) for site in SITES}


def _step(phase: str, request: dict[str, Any], state: dict[str, Any], site: Site) -> tuple[dict, dict]:
    return client_step(phase, request, state, site.values, site.ctx, site.identity, site.min_participants)


def _sites(
    n: int,
    ctx: ts.Context | None,
    identities: Mapping[str, SecAggIdentity] | None,
    seed: int = 0,
    min_participants: int = scalars.MIN_PARTICIPANTS,
) -> dict[int, Site]:
    rng = np.random.default_rng(seed)
    # Flower node ids are large unsigned 64-bit values; use some to exercise the encoding
    return {
        (2**63 + 17 * i if i % 2 else 1000 + i): Site(
            rng.normal(scale=3.0, size=T),
            ctx,
            identities[SITES[i]] if identities is not None else None,
            min_participants,
        )
        for i in range(n)
    }


def _plain_sum(sites: Mapping[int, Site], ids: list[int] | None = None) -> np.ndarray:
    return np.sum([sites[n].values for n in (ids if ids is not None else sites)], axis=0)


@pytest.mark.parametrize("n", range(3, 11))
def test_encrypted_sum_equals_plain_sum(
    n: int, secret: ts.Context, settings: HESettings, identities: dict[str, SecAggIdentity]
) -> None:
    sites = _sites(n, secret, identities, seed=n)
    transport = LocalTransport(sites, _step)
    total = sum_scalars(transport, list(sites), round_id=n, settings=settings)
    np.testing.assert_allclose(total, _plain_sum(sites), atol=1e-6, rtol=0)
    # the server saw signed mask keys, ciphertexts and tags from the sites, and only the sum from the
    # decryptor: never a value of one site
    phases = [r.phase for r in transport.received]
    assert phases == [KEYS_PHASE] * n + [ENCRYPT_PHASE] * n + [DECRYPT_PHASE]
    for r in transport.received:
        if r.phase == KEYS_PHASE:
            assert set(r.payload) == {"mask_pk", "site", "signature"}
            assert len(r.payload["mask_pk"]) == 32 and r.payload["site"] == sites[r.node].identity.site
        elif r.phase == ENCRYPT_PHASE:
            assert set(r.payload) == {"ciphertext", "tag"}
            assert isinstance(r.payload["ciphertext"], bytes) and len(r.payload["ciphertext"]) > 100_000
        else:
            assert set(r.payload) == {"sum"}
            assert r.node == scalars.decryptor_for(list(sites), n)
    assert not transport.errors


def test_plain_mode_is_exact_and_needs_no_keys() -> None:
    sites = _sites(4, None, None)
    total = sum_scalars(LocalTransport(sites, _step), list(sites), 0, None)
    np.testing.assert_array_equal(total, _plain_sum(sites))


def test_site_with_he_keys_refuses_plain_round(
    secret: ts.Context, identities: dict[str, SecAggIdentity]
) -> None:
    sites = _sites(3, secret, identities)
    with pytest.raises(ScalarAggregationError, match="no site sent"):
        sum_scalars(LocalTransport(sites, _step), list(sites), 0, None)


def test_decryptor_rotates_over_sorted_ids() -> None:
    ids = [30, 10, 20]
    assert [scalars.decryptor_for(ids, r) for r in range(4)] == [10, 20, 30, 10]


def test_dropout_at_keys_is_left_out(
    secret: ts.Context, settings: HESettings, identities: dict[str, SecAggIdentity]
) -> None:
    sites = _sites(4, secret, identities, seed=1)
    ids = list(sites)
    gone = ids[1]
    transport = LocalTransport(sites, _step, dropouts={KEYS_PHASE: [gone]})
    total = sum_scalars(transport, ids, 7, settings)
    np.testing.assert_allclose(total, _plain_sum(sites, [n for n in ids if n != gone]), atol=1e-6)
    # the site that never sent a key was asked for nothing more
    assert gone not in {r.node for r in transport.received}

    few = LocalTransport(sites, _step, dropouts={KEYS_PHASE: ids[1:]})
    with pytest.raises(ScalarAggregationError, match="1 of 4 sites sent α mask keys, need ≥ 2"):
        sum_scalars(few, ids, 9, settings)


def test_dropout_after_keys_fails_the_round(
    secret: ts.Context, settings: HESettings, identities: dict[str, SecAggIdentity]
) -> None:
    sites = _sites(4, secret, identities, seed=1)
    ids = list(sites)
    dec = scalars.decryptor_for(ids, 7)
    gone = next(n for n in ids if n != dec)
    transport = LocalTransport(sites, _step, dropouts={ENCRYPT_PHASE: [gone]})
    # the others' ciphertexts carry masks shared with `gone`: their sum would be noise
    with pytest.raises(ScalarAggregationError, match="3 of 4 keyed sites sent ciphertexts; the masks cancel"):
        sum_scalars(transport, ids, 7, settings)
    assert not any(r.phase == DECRYPT_PHASE for r in transport.received)
    # nor is the round retried over the sites that remain: they encrypted once for round 7
    transport.dropouts = {}
    with pytest.raises(ScalarAggregationError, match="0 of 3 sites sent α mask keys"):
        sum_scalars(transport, [n for n in ids if n != gone], 7, settings)

    transport = LocalTransport(sites, _step, dropouts={DECRYPT_PHASE: [scalars.decryptor_for(ids, 8)]})
    with pytest.raises(ScalarAggregationError, match="did not answer"):
        sum_scalars(transport, ids, 8, settings)


def test_server_settings_reject_secret_context(secret: ts.Context) -> None:
    with pytest.raises(ValueError, match="public context"):
        HESettings(secret)
    with pytest.raises(ValueError, match="min_participants"):
        HESettings(ts.context_from(ckks.serialize_public(secret)), min_participants=1)


def test_mismatched_server_key_is_refused_by_sites(
    secret: ts.Context, identities: dict[str, SecAggIdentity], tmp_path: Path
) -> None:
    keys.init_keys(tmp_path / "other", ["server"])
    foreign = HESettings.from_keys_dir(tmp_path / "other")
    sites = _sites(3, secret, identities)
    with pytest.raises(ScalarAggregationError, match="different `keys init` runs"):
        sum_scalars(LocalTransport(sites, _step), list(sites), 0, foreign)


def test_tag_key_needs_the_secret(keydir: Path, secret: ts.Context, settings: HESettings) -> None:
    again = keys.load_he_context(keys.secret_context_path(keydir), True)
    assert scalars.tag_key(again) == scalars.tag_key(secret)  # every site derives the same key
    with pytest.raises(ValueError, match="secret context"):
        scalars.tag_key(settings.public_context)


def test_masks_cancel_only_in_the_full_sum() -> None:
    names = ["a", "b", "c"]
    pairs = [scalar_masks.new_keypair() for _ in names]
    values = [np.full(T, float(i)) for i in range(3)]
    masked = [
        scalar_masks.masked(
            values[i], names[i], pairs[i][0], [(names[j], pairs[j][1]) for j in range(3) if j != i], b"ctx"
        )
        for i in range(3)
    ]
    np.testing.assert_array_equal(np.sum(masked, axis=0), np.sum(values, axis=0))  # exactly, on the grid
    bound = 2.0 ** scalar_masks.mask_bits(3)
    for i in range(3):
        assert np.abs(masked[i] - values[i]).max() > 1.0 and np.abs(masked[i]).max() <= 2 * bound + 3
    assert np.abs(masked[0] + masked[1] - values[0] - values[1]).max() > 1.0


# ------------------------------------------------------------------ a server that deviates


class _Round:
    """Runs the keys and encrypt phases honestly, then lets a test craft any request."""

    def __init__(
        self,
        secret: ts.Context,
        settings: HESettings,
        identities: Mapping[str, SecAggIdentity],
        n: int = 3,
        round_id: int = 4,
        encrypt: bool = True,
    ) -> None:
        self.secret, self.settings, self.round_id = secret, settings, round_id
        self.sites = _sites(n, secret, identities, seed=round_id)
        self.ids = sorted(self.sites)
        self.decryptor = scalars.decryptor_for(self.ids, round_id)
        self.states: dict[int, dict[str, Any]] = {n: {} for n in self.ids}
        self.signed: dict[int, dict[str, Any]] = {}
        for n in self.ids:
            self.signed[n], self.states[n] = self.client(n, KEYS_PHASE, {"round_id": round_id, "node_id": n})
        self.cts: dict[int, bytes] = {}
        self.tags: dict[int, bytes] = {}
        if encrypt:
            for n in self.ids:
                reply, self.states[n] = self.client(n, ENCRYPT_PHASE, self.encrypt_request(n))
                self.cts[n], self.tags[n] = reply["ciphertext"], reply["tag"]

    def peers(self, ids: list[int]) -> dict[str, list[Any]]:
        return {
            "peer_nodes": list(ids),
            "peer_sites": [self.signed[n]["site"] for n in ids],
            "peer_keys": [self.signed[n]["mask_pk"] for n in ids],
            "peer_signatures": [self.signed[n]["signature"] for n in ids],
        }

    def encrypt_request(self, n: int, ids: list[int] | None = None, **changes: Any) -> dict[str, Any]:
        request = {
            "round_id": self.round_id,
            "node_id": n,
            "decryptor": self.decryptor,
            "key_id": self.settings.key_id,
            **self.peers(self.ids if ids is None else ids),
        }
        return {**request, **changes}

    def client(self, n: int, phase: str, request: dict[str, Any]) -> tuple[dict, dict]:
        site = self.sites[n]
        return client_step(phase, request, self.states[n], site.values, site.ctx, site.identity)

    def decrypt_request(self, ids: list[int], **changes: Any) -> dict[str, Any]:
        public = self.settings.public_context
        request = {
            "round_id": self.round_id,
            "node_id": self.decryptor,
            "participants": ids,
            "participant_keys": [self.signed[n]["mask_pk"] for n in ids],
            "ciphertexts": [self.cts[n] for n in ids],
            "tags": [self.tags[n] for n in ids],
            "aggregate": ckks.add_ciphertexts(public, [self.cts[n] for n in ids]),
        }
        return {**request, **changes}

    def decrypt(self, request: dict[str, Any]) -> dict[str, Any]:
        reply, self.states[self.decryptor] = self.client(self.decryptor, DECRYPT_PHASE, request)
        return reply


@pytest.fixture
def rnd(secret: ts.Context, settings: HESettings, identities: dict[str, SecAggIdentity]) -> _Round:
    return _Round(secret, settings, identities)


@pytest.fixture
def keyed(secret: ts.Context, settings: HESettings, identities: dict[str, SecAggIdentity]) -> _Round:
    """Every site sent its signed mask key; none encrypted yet."""
    return _Round(secret, settings, identities, n=4, encrypt=False)


def test_honest_decrypt_request_is_answered(rnd: _Round) -> None:
    reply = rnd.decrypt(rnd.decrypt_request(rnd.ids))
    np.testing.assert_allclose(reply["sum"], _plain_sum(rnd.sites), atol=1e-6)
    # released values sit on the rounding grid, which hides the CKKS decryption noise
    steps = reply["sum"] / scalars.RELEASE_GRID
    np.testing.assert_array_equal(steps, np.round(steps))


def test_single_participant_is_refused(rnd: _Round) -> None:
    reply = rnd.decrypt(rnd.decrypt_request(rnd.ids[:1]))
    assert "sum" not in reply and "decrypts only sums over at least 2 sites" in reply["error"]


def test_aggregate_that_is_not_the_sum_is_refused(rnd: _Round, settings: HESettings) -> None:
    public = settings.public_context
    a, b, c = rnd.ids
    # lists three sites but the aggregate holds only a and b: a difference would expose the third
    partial = ckks.add_ciphertexts(public, [rnd.cts[a], rnd.cts[b]])
    reply = rnd.decrypt(rnd.decrypt_request(rnd.ids, aggregate=partial))
    assert "sum" not in reply and "not the sum" in reply["error"]
    # a's ciphertext counted twice: (2·x_a + x_b + x_c) − (x_a + x_b + x_c) would expose a
    doubled = ckks.add_ciphertexts(public, [rnd.cts[a], rnd.cts[a], rnd.cts[b], rnd.cts[c]])
    reply = rnd.decrypt(rnd.decrypt_request(rnd.ids, aggregate=doubled))
    assert "not the sum" in reply["error"]
    reply = rnd.decrypt(rnd.decrypt_request(rnd.ids, aggregate=b"junk"))
    assert "not a CKKS vector" in reply["error"]
    # having refused, the decryptor still answers an honest request for the round
    assert "sum" in rnd.decrypt(rnd.decrypt_request(rnd.ids))


def test_forged_tags_are_refused(rnd: _Round, settings: HESettings) -> None:
    a, b, c = rnd.ids
    public = settings.public_context
    own = ckks.encrypt_vector(public, np.full(T, 100.0))  # the server's own ciphertext
    # the best key the server can derive: HKDF over the public context it holds
    guess = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"secure_fed ckks scalar tags v1")
    server_key = guess.derive(ckks.serialize_public(public))
    listed = scalars.participants_digest(rnd.ids, [rnd.signed[n]["mask_pk"] for n in rnd.ids])
    fake = scalars.make_tag(server_key, rnd.round_id, c, rnd.decryptor, listed, own)
    cts = [rnd.cts[a], rnd.cts[b], own]
    request = rnd.decrypt_request(
        rnd.ids,
        ciphertexts=cts,
        tags=[rnd.tags[a], rnd.tags[b], fake],
        aggregate=ckks.add_ciphertexts(public, cts),
    )
    reply = rnd.decrypt(request)
    assert "sum" not in reply and f"tags of nodes [{c}] do not verify" in reply["error"]
    # genuine tags relabelled to other nodes do not verify either
    reply = rnd.decrypt(rnd.decrypt_request(rnd.ids, tags=[rnd.tags[b], rnd.tags[a], rnd.tags[c]]))
    assert "do not verify" in reply["error"]


def test_tags_bind_round_decryptor_and_participants(rnd: _Round, secret: ts.Context) -> None:
    a, b, c = rnd.ids
    other = next(n for n in rnd.ids if n != rnd.decryptor)
    # the same ciphertexts presented as another round's, or to a node that is not the decryptor
    reply = rnd.decrypt(rnd.decrypt_request(rnd.ids, round_id=rnd.round_id + 1))
    assert "do not verify" in reply["error"]
    wrong_node = rnd.decrypt_request(rnd.ids, node_id=other)
    reply, _ = client_step(DECRYPT_PHASE, wrong_node, {}, rnd.sites[other].values, secret)
    assert "do not verify" in reply["error"]
    # a subset of the sites each ciphertext was masked for: its masks would not cancel, and it
    # would be a second sum to difference against the full one
    reply = rnd.decrypt(rnd.decrypt_request([a, b]))
    assert "tags of nodes" in reply["error"] and "do not verify" in reply["error"]
    # the same sites with another mask key for one of them
    forged_keys = [rnd.signed[a]["mask_pk"], rnd.signed[b]["mask_pk"], scalar_masks.new_keypair()[1]]
    reply = rnd.decrypt(rnd.decrypt_request(rnd.ids, participant_keys=forged_keys))
    assert "do not verify" in reply["error"]
    assert "sum" in rnd.decrypt(rnd.decrypt_request([c, a, b]))  # the list's order does not matter


def test_replayed_round_is_refused(rnd: _Round) -> None:
    assert "sum" in rnd.decrypt(rnd.decrypt_request(rnd.ids))
    # same round again, whatever is asked: one aggregate per round
    reply = rnd.decrypt(rnd.decrypt_request(rnd.ids[:2]))
    assert "sum" not in reply and "replay" in reply["error"]
    reply = rnd.decrypt(rnd.decrypt_request(rnd.ids))
    assert "sum" not in reply and "replay" in reply["error"]


def test_a_site_encrypts_once_per_round(rnd: _Round) -> None:
    n = rnd.ids[0]
    reply, state = rnd.client(n, ENCRYPT_PHASE, rnd.encrypt_request(n))
    assert "ciphertext" not in reply and "already encrypted" in reply["error"]
    assert state == rnd.states[n]
    # nor a fresh key for the round, which would let the same values be masked for other peers
    reply, state = rnd.client(n, KEYS_PHASE, {"round_id": rnd.round_id, "node_id": n})
    assert "mask_pk" not in reply and "already sent its α mask key" in reply["error"]
    assert state == rnd.states[n]
    # the mask secret of the round is gone once used
    assert not set(scalars._KEYED) & set(rnd.states[n])
    # another round is another key and another encryption
    nxt = rnd.round_id + 1
    reply, rnd.states[n] = rnd.client(n, KEYS_PHASE, {"round_id": nxt, "node_id": n})
    assert "mask_pk" in reply


def test_a_site_sends_one_key_per_round(keyed: _Round) -> None:
    n = keyed.ids[0]
    reply, state = keyed.client(n, KEYS_PHASE, {"round_id": keyed.round_id, "node_id": n})
    assert "already sent its α mask key" in reply["error"] and state == keyed.states[n]
    reply, _ = keyed.client(n, KEYS_PHASE, {"round_id": keyed.round_id, "node_id": n + 1})
    assert "already sent its α mask key" in reply["error"]


def test_encrypt_needs_this_rounds_key_as_this_node(keyed: _Round) -> None:
    n = keyed.ids[0]
    reply, _ = keyed.client(n, ENCRYPT_PHASE, keyed.encrypt_request(n, round_id=keyed.round_id + 1))
    assert "sent no α mask key as node" in reply["error"]
    reply, _ = keyed.client(n, ENCRYPT_PHASE, keyed.encrypt_request(n, node_id=keyed.ids[1]))
    assert "sent no α mask key as node" in reply["error"]
    reply, _ = keyed.client(n, ENCRYPT_PHASE, keyed.encrypt_request(n))
    assert "ciphertext" in reply


def test_client_step_is_pure(keyed: _Round) -> None:
    n = keyed.ids[0]
    # a list already in the state must not be appended to in place
    state = {**keyed.states[n], "other": 1, "he_encrypted_rounds": [99]}
    before = copy.deepcopy(state)
    reply, new_state = client_step(
        ENCRYPT_PHASE,
        keyed.encrypt_request(n),
        state,
        keyed.sites[n].values,
        keyed.sites[n].ctx,
        keyed.sites[n].identity,
    )
    assert "ciphertext" in reply
    assert state == before
    assert new_state == {"other": 1, "he_encrypted_rounds": [99, keyed.round_id]}

    empty: dict[str, Any] = {}
    reply, keyed_state = client_step(
        KEYS_PHASE, {"round_id": 1, "node_id": 5}, empty, np.ones(T), keyed.secret, keyed.sites[n].identity
    )
    assert empty == {} and set(keyed_state) == set(scalars._KEYED)
    assert keyed_state["he_mask_round"] == 1 and keyed_state["he_mask_node"] == 5


def test_malformed_requests_are_refused_not_crashed(keyed: _Round, secret: ts.Context) -> None:
    n = keyed.ids[0]
    identity = keyed.sites[n].identity
    ones = np.ones(T)

    def ask(phase: str, request: dict[str, Any], ctx: ts.Context | None = secret, **kw: Any) -> str:
        reply, state = client_step(phase, request, keyed.states[n], ones, ctx, kw.get("identity", identity))
        assert state == keyed.states[n]
        return str(reply["error"])

    assert "round_id" in ask(KEYS_PHASE, {"round_id": "1", "node_id": 1})
    assert "node_id" in ask(KEYS_PHASE, {"round_id": 9, "node_id": -1})
    assert "round_id" in ask(ENCRYPT_PHASE, {"round_id": True})
    assert "no secret CKKS context" in ask(KEYS_PHASE, {"round_id": 9, "node_id": 1}, None)
    assert "no secret CKKS context" in ask(ENCRYPT_PHASE, keyed.encrypt_request(n), None)
    assert "no signing identity" in ask(KEYS_PHASE, {"round_id": 9, "node_id": 1}, identity=None)
    assert "no signing identity" in ask(ENCRYPT_PHASE, keyed.encrypt_request(n), identity=None)
    assert "peer_nodes" in ask(ENCRYPT_PHASE, keyed.encrypt_request(n, peer_nodes="all"))
    assert "peer_nodes" in ask(ENCRYPT_PHASE, keyed.encrypt_request(n, peer_nodes=[True, False, 1, 2]))
    assert "peer_sites" in ask(ENCRYPT_PHASE, keyed.encrypt_request(n, peer_sites=["site0"]))
    assert "peer_keys" in ask(ENCRYPT_PHASE, keyed.encrypt_request(n, peer_keys=["k"] * 4))
    assert "peer_signatures" in ask(ENCRYPT_PHASE, keyed.encrypt_request(n, peer_signatures=[b"s"]))
    twice = {"round_id": 1, "node_id": 2, "participants": [1, 1]}
    assert "listed twice" in ask(DECRYPT_PHASE, twice)
    assert "participants" in ask(DECRYPT_PHASE, {"round_id": 1, "node_id": 2, "participants": "1,2"})
    assert "participant_keys" in ask(
        DECRYPT_PHASE,
        {"round_id": 1, "node_id": 2, "participants": [1, 2], "ciphertexts": [b"", b""]},
    )
    assert "unknown phase" in ask("nonsense", {})


# ------------------------------------------------------------------ whom a site masks for


def test_unknown_or_unsigned_peer_keys_are_refused(keyed: _Round, keydir: Path) -> None:
    victim, real = keyed.ids[0], keyed.ids[1]
    where = keyed.ids.index(real)
    server_made = scalar_masks.new_keypair()[1]
    outsider = Ed25519PrivateKey.generate()
    server_key = keys.load_signing_key(keydir, "server")
    site = keyed.signed[real]["site"]

    def statement(name: str, pk: bytes, node: int = real, round_id: int = keyed.round_id) -> bytes:
        return scalars.keys_statement(RUN, round_id, node, name, pk)

    def swap(**entry: Any) -> dict[str, Any]:
        request = keyed.encrypt_request(victim)
        for name, value in entry.items():
            request[name] = [*request[name][:where], value, *request[name][where + 1 :]]
        return request

    cases = {
        "no signature": swap(peer_keys=server_made, peer_signatures=b""),
        "a real site's key with garbage for a signature": swap(peer_signatures=b"\0" * 64),
        "a real site's name on a server-made key": swap(peer_keys=server_made),
        "server-made key signed by an unprovisioned key": swap(
            peer_keys=server_made, peer_signatures=outsider.sign(statement(site, server_made))
        ),
        "an unprovisioned site": swap(
            peer_sites="site99",
            peer_keys=server_made,
            peer_signatures=outsider.sign(statement("site99", server_made)),
        ),
        "signed with the server's own provisioned key": swap(
            peer_sites="server",
            peer_keys=server_made,
            peer_signatures=server_key.sign(statement("server", server_made)),
        ),
        "a real key moved to another node id": swap(peer_nodes=real + 10**6),
        "a real site's key for another round": swap(
            peer_signatures=keyed.sites[real].identity.sign(  # type: ignore[union-attr]
                statement(site, keyed.signed[real]["mask_pk"], round_id=keyed.round_id - 1)
            )
        ),
    }
    for why, request in cases.items():
        reply, state = keyed.client(victim, ENCRYPT_PHASE, request)
        assert "ciphertext" not in reply, why
        assert "is not signed by a provisioned site" in reply["error"], (why, reply["error"])
        assert state == keyed.states[victim], why
    # the honest list still goes through
    reply, _ = keyed.client(victim, ENCRYPT_PHASE, keyed.encrypt_request(victim))
    assert "ciphertext" in reply


def test_a_site_listed_twice_is_refused(keyed: _Round) -> None:
    victim, a, b, _ = keyed.ids
    # the same node twice: its masks would be added twice and cancel nowhere
    request = keyed.encrypt_request(victim, [victim, a, b, a])
    reply, _ = keyed.client(victim, ENCRYPT_PHASE, request)
    assert "listed twice" in reply["error"]
    # one site under two node ids
    request = keyed.encrypt_request(victim, [victim, a, b])
    request["peer_nodes"].append(b + 1)
    for name in ("peer_sites", "peer_keys", "peer_signatures"):
        request[name].append(request[name][1])
    reply, _ = keyed.client(victim, ENCRYPT_PHASE, request)
    assert "ciphertext" not in reply and "listed twice" in reply["error"]


def test_fewer_than_min_participants_are_refused(
    secret: ts.Context, settings: HESettings, identities: dict[str, SecAggIdentity]
) -> None:
    rnd = _Round(secret, settings, identities, n=4, encrypt=False)
    victim, peer = rnd.ids[:2]
    reply, _ = rnd.client(victim, ENCRYPT_PHASE, rnd.encrypt_request(victim, [victim]))
    assert "1 participants; this site sums with at least 2" in reply["error"]
    strict = Site(rnd.sites[victim].values, secret, rnd.sites[victim].identity, min_participants=3)
    reply, _ = client_step(
        ENCRYPT_PHASE,
        rnd.encrypt_request(victim, [victim, peer]),
        rnd.states[victim],
        strict.values,
        secret,
        strict.identity,
        strict.min_participants,
    )
    assert "2 participants; this site sums with at least 3" in reply["error"]
    # end to end: sites that want 3 and a server that got keys from only 2 of 4
    sites = _sites(4, secret, identities, seed=2, min_participants=3)
    ids = list(sites)
    lenient = HESettings(settings.public_context, settings.key_id, min_participants=2)
    transport = LocalTransport(sites, _step, dropouts={KEYS_PHASE: ids[2:]})
    with pytest.raises(ScalarAggregationError, match="sums with at least 3"):
        sum_scalars(transport, ids, 3, lenient)
    assert not any("ciphertext" in r.payload for r in transport.received)


def test_a_site_not_listed_among_participants_is_refused(keyed: _Round) -> None:
    victim, a, b, c = keyed.ids
    # asked to mask for three others without being one of them: its masks would cancel with nothing
    reply, _ = keyed.client(victim, ENCRYPT_PHASE, keyed.encrypt_request(victim, [a, b, c]))
    assert "ciphertext" not in reply and "not among the participants" in reply["error"]
    # listed, but with a key that is not the one it sent
    request = keyed.encrypt_request(victim)
    request["peer_keys"][0] = scalar_masks.new_keypair()[1]
    reply, _ = keyed.client(victim, ENCRYPT_PHASE, request)
    assert "own entry is not the key it sent" in reply["error"]
    request = keyed.encrypt_request(victim)
    request["peer_sites"][0] = "site9"
    reply, _ = keyed.client(victim, ENCRYPT_PHASE, request)
    assert "own entry is not the key it sent" in reply["error"]


# ------------------------------------------------------------------ values sized for the participants


class _Sized:
    """A site's `SizedValues` hook that records each call (the count it was asked for)."""

    def __init__(self, base: np.ndarray) -> None:
        self.base, self.asked = base, []

    def __call__(self, participants: int) -> np.ndarray:
        self.asked.append(participants)
        return self.base + participants  # a value that shows which count it was made for

    def values(self) -> scalars.SizedValues:
        return scalars.SizedValues(self.base.size, self)


def _sized_round(secret: ts.Context, settings: HESettings, identities: Mapping[str, SecAggIdentity]) -> tuple:
    rnd = _Round(secret, settings, identities, n=4, round_id=9, encrypt=False)
    hooks = {n: _Sized(rnd.sites[n].values) for n in rnd.ids}
    for n in rnd.ids:
        rnd.sites[n] = dataclasses.replace(rnd.sites[n], values=hooks[n].values())
    return rnd, hooks


def test_sized_values_are_asked_once_with_the_verified_count(
    secret: ts.Context, settings: HESettings, identities: dict[str, SecAggIdentity]
) -> None:
    rnd, hooks = _sized_round(secret, settings, identities)
    for n in rnd.ids:
        reply, rnd.states[n] = rnd.client(n, ENCRYPT_PHASE, rnd.encrypt_request(n))
        rnd.cts[n], rnd.tags[n] = reply["ciphertext"], reply["tag"]
        again, _ = rnd.client(n, ENCRYPT_PHASE, rnd.encrypt_request(n))
        assert "already encrypted" in again["error"]
    assert {n: h.asked for n, h in hooks.items()} == {n: [4] for n in rnd.ids}
    reply, _ = rnd.client(rnd.decryptor, DECRYPT_PHASE, rnd.decrypt_request(rnd.ids))
    expected = np.sum([hooks[n].base + 4 for n in rnd.ids], axis=0)
    np.testing.assert_allclose(reply["sum"], expected, atol=1e-6, rtol=0)
    assert all(h.asked == [4] for h in hooks.values())  # the decryptor reads the length only


def test_sized_values_are_never_asked_for_a_list_that_does_not_verify(
    secret: ts.Context, settings: HESettings, identities: dict[str, SecAggIdentity]
) -> None:
    rnd, hooks = _sized_round(secret, settings, identities)
    victim, other = rnd.ids[0], rnd.ids[1]
    forged = rnd.encrypt_request(victim)
    forged["peer_signatures"] = [
        b"\0" * 64 if n == other else s for n, s in zip(rnd.ids, forged["peer_signatures"], strict=True)
    ]
    longer = rnd.encrypt_request(victim, [*rnd.ids, rnd.ids[1]])  # a real participant twice: m + 1
    for request in (forged, longer, rnd.encrypt_request(victim, key_id="another")):
        reply, state = rnd.client(victim, ENCRYPT_PHASE, request)
        assert "ciphertext" not in reply and state == rnd.states[victim]
    assert hooks[victim].asked == []


def test_a_hook_that_refuses_is_a_refusal_that_leaves_the_round_open_and_plain_rounds_get_nothing(
    secret: ts.Context, settings: HESettings, identities: dict[str, SecAggIdentity]
) -> None:
    rnd, hooks = _sized_round(secret, settings, identities)
    victim = rnd.ids[0]

    def refuse(participants: int) -> np.ndarray:
        raise scalars.ValuesRefused(f"no share for {participants}")

    rnd.sites[victim] = dataclasses.replace(rnd.sites[victim], values=scalars.SizedValues(T, refuse))
    reply, state = rnd.client(victim, ENCRYPT_PHASE, rnd.encrypt_request(victim))
    assert reply == {"error": "no share for 4"} and state == rnd.states[victim]
    # a hook that gives the wrong length is refused too
    rnd.sites[victim] = dataclasses.replace(
        rnd.sites[victim], values=scalars.SizedValues(T, lambda m: np.zeros(T + 1))
    )
    reply, _ = rnd.client(victim, ENCRYPT_PHASE, rnd.encrypt_request(victim))
    assert "ciphertext" not in reply and "not its T" in reply["error"]
    # in the clear, values sized for a secure sum are never sent, even by a site with no HE context
    reply, _ = client_step(scalars.PLAIN_PHASE, {"round_id": 0}, {}, hooks[rnd.ids[1]].values(), None)
    assert "scalars" not in reply and "none go in the clear" in reply["error"]
    assert hooks[rnd.ids[1]].asked == []
