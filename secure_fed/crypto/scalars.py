"""Summing the sites' α-hypergradient scalars, in the clear or under CKKS.

CKKS round (phases "he_keys", "he_encrypt", "he_decrypt"):

1. Every site sends a fresh X25519 public key for this round's α masks, signed with its
   provisioned Ed25519 key over (run, round, node, site, key).
2. The server names the round's decryptor (sorted ids, round_id mod n) and hands every site the
   participants' signed keys. A site checks every signature against the provisioned public keys,
   refuses unknown or repeated sites and fewer than `min_participants` of them, adds a zero-sum
   pairwise mask per other participant (scalar_masks.py), and encrypts, once per round, with a tag:
   HMAC-SHA256, under a key only holders of the secret context can derive, over (round_id,
   node_id, decryptor, digest of the participants and their keys, sha256(ciphertext)).
3. The server adds the ciphertexts with its public context.
4. The decryptor receives every participant's ciphertext and tag, the participants' keys and the
   aggregate. It refuses unless the tags verify for exactly these participants, there are at
   least `min_participants`, it has not decrypted this round before and the aggregate is exactly
   (byte for byte, after local re-serialisation; CKKS addition is exact modular arithmetic) the
   sum of the listed ciphertexts. It then returns the T decrypted values of the sum, rounded to a
   fixed grid.

Why this holds against a server that deviates, or a curious decryptor: every hospital holds the
secret context, but a single ciphertext decrypts only to masked values, and the masks cancel
only in the sum over the participants every summand was masked for (the tag binds that list);
the server cannot forge a tag or a peer's key, so every summand is a genuine site ciphertext of
this round masked with genuine peers; a site encrypts at most once per round (the caller binds the
round to the training round the site admitted), so no site's value can be counted twice or
differenced; and the decryptor decrypts one aggregate per round. Rounding and releasing only the
T used slots keep the CKKS decryption noise, which carries information about the secret key, out
of the server's hands. A participant that drops after step 1 leaves masks that cannot cancel: the
round's α sum fails rather than being retried over another subset.

Values sized for the verified participants (`SizedValues`): a site may leave what it encrypts
open until step 2 has verified the participants, e.g. a share of noise that m − c of m
participants must carry between them. The hook is called once, after every signature checked and
before the ciphertext is made, with the number of verified participants (the tag then binds
exactly that list, and the decryptor decrypts only a sum over it); it may refuse (`ValuesRefused`).
A site with such values sends nothing in the clear.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tenseal as ts
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from secure_fed.crypto import ckks, keys, scalar_masks, secagg_channel
from secure_fed.crypto.secagg_identity import SecAggIdentity, statement
from secure_fed.crypto.transport import Transport

PLAIN_PHASE = "plain_scalars"
KEYS_PHASE = "he_keys"
ENCRYPT_PHASE = "he_encrypt"
DECRYPT_PHASE = "he_decrypt"

MIN_PARTICIPANTS = 2  # a "sum" of one site is that site's values: never decrypt it
RELEASE_GRID = 2.0**-24  # ≈6e-8: far above CKKS noise at scale 2^40 (≈1e-9), far below DP noise

_TAG_INFO = b"secure_fed ckks scalar tags v1"
_ENCRYPTED = "he_encrypted_rounds"
# this site's outstanding α mask key: round, node id, raw X25519 secret (site-private state)
_KEYED = ("he_mask_round", "he_mask_node", "he_mask_secret")
_DECRYPTED = "he_decrypted_rounds"
# what a site must remember across restarts so it never encrypts or decrypts a round twice
ROUND_MARKS = (_ENCRYPTED, _DECRYPTED)


class ScalarAggregationError(RuntimeError):
    """A round of scalar aggregation could not produce a sum (and says why)."""


class ValuesRefused(Exception):
    """Raised by a `SizedValues` hook that gives no values for that many participants (its reason)."""


@dataclass(frozen=True)
class SizedValues:
    """A site's T values that depend on how many participants the sum is over: `values(m)` for m
    participants whose signed keys this site verified, called at most once a round, by the encrypt
    phase only (the decryptor reads `length`)."""

    length: int
    values: Callable[[int], np.ndarray]


@dataclass(frozen=True)
class HESettings:
    """What the server needs for CKKS rounds: the public context and its key id."""

    public_context: ts.Context
    key_id: str = field(default="")
    min_participants: int = MIN_PARTICIPANTS

    def __post_init__(self) -> None:
        if self.public_context.is_private():
            raise ValueError("the server's HE settings must hold the public context, not the secret one")
        if self.min_participants < MIN_PARTICIPANTS:
            raise ValueError(f"min_participants must be ≥ {MIN_PARTICIPANTS}")
        if not self.key_id:
            object.__setattr__(self, "key_id", ckks.he_key_id(self.public_context))

    @classmethod
    def from_keys_dir(cls, keys_dir: Path | str, min_participants: int = MIN_PARTICIPANTS) -> HESettings:
        fps = keys.load_fingerprints(keys_dir)
        ctx = keys.load_he_context(keys.public_context_path(keys_dir), expect_secret=False, fingerprints=fps)
        return cls(ctx, fps["he_public"], min_participants)


def decryptor_for(node_ids: Sequence[int], round_id: int) -> int:
    """The round's decryptor: rotating over the sorted ids so no site decrypts every round."""
    ordered = sorted(node_ids)
    return ordered[round_id % len(ordered)]


def tag_key(secret_context: ts.Context) -> bytes:
    """MAC key derived from the secret context; the public context cannot yield it."""
    if not secret_context.is_private():
        raise ValueError("tag keys come from the secret context")
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_TAG_INFO)
    return hkdf.derive(ckks.serialize_secret(secret_context))


def tag_message(round_id: int, node_id: int, decryptor: int, participants: bytes, ciphertext: bytes) -> bytes:
    # decimal ints never contain "|", and the two digests have fixed length: unambiguous
    head = f"{round_id}|{node_id}|{decryptor}|".encode()
    return head + participants + hashlib.sha256(ciphertext).digest()


def make_tag(
    key: bytes, round_id: int, node_id: int, decryptor: int, participants: bytes, ciphertext: bytes
) -> bytes:
    message = tag_message(round_id, node_id, decryptor, participants, ciphertext)
    return hmac.new(key, message, hashlib.sha256).digest()


def participants_digest(nodes: Sequence[int], mask_keys: Sequence[bytes]) -> bytes:
    """SHA-256 over the sorted (node, mask public key) pairs: who masked for whom."""
    h = hashlib.sha256()
    for node, pk in sorted(zip(nodes, mask_keys, strict=True)):
        h.update(f"{node}|".encode() + pk)
    return h.digest()


def keys_statement(run_id: str, round_id: int, node_id: int, site: str, mask_pk: bytes) -> bytes:
    """What a site signs with its α mask key: this key is mine, as this node, in this round."""
    return statement(b"alpha-mask-key", run_id, round_id, node_id, site, mask_pk)


def round_release(values: np.ndarray) -> np.ndarray:
    return np.round(values / RELEASE_GRID) * RELEASE_GRID


# ---------------------------------------------------------------- server side


def _check_ids(node_ids: Sequence[int]) -> list[int]:
    ids = list(node_ids)
    if not ids:
        raise ScalarAggregationError("no nodes to aggregate over")
    if any(isinstance(n, bool) or not isinstance(n, int) for n in ids) or len(set(ids)) != len(ids):
        raise ScalarAggregationError(f"node ids must be distinct ints, got {ids}")
    return ids


def _check_round(round_id: int) -> None:
    if isinstance(round_id, bool) or not isinstance(round_id, int) or round_id < 0:
        raise ScalarAggregationError(f"round_id must be a non-negative int, got {round_id!r}")


def _sum_plain(transport: Transport, ids: list[int], round_id: int) -> np.ndarray:
    replies = transport.exchange(PLAIN_PHASE, {n: {"round_id": round_id} for n in ids})
    vectors = {n: np.asarray(r["scalars"], dtype=np.float64) for n, r in replies.items() if "scalars" in r}
    if not vectors:
        raise ScalarAggregationError(f"round {round_id}: no site sent its scalars")
    shapes = {v.shape for v in vectors.values()}
    if len(shapes) != 1 or len(next(iter(shapes))) != 1:
        raise ScalarAggregationError(f"round {round_id}: sites sent scalars of shapes {sorted(shapes)}")
    return np.sum(list(vectors.values()), axis=0)


def _mask_keys(transport: Transport, ids: list[int], round_id: int, settings: HESettings) -> dict[str, list]:
    """Every site's signed mask key of this round, as the parallel lists the encrypt phase takes."""
    replies = transport.exchange(KEYS_PHASE, {n: {"round_id": round_id, "node_id": n} for n in ids})
    keyed = sorted(n for n, r in replies.items() if n in ids and {"mask_pk", "site", "signature"} <= set(r))
    if len(keyed) < settings.min_participants:
        why = "; ".join(
            f"node {n}: {r.get('error', 'no key')}" for n, r in sorted(replies.items()) if n not in keyed
        )
        raise ScalarAggregationError(
            f"round {round_id}: {len(keyed)} of {len(ids)} sites sent α mask keys, "
            f"need ≥ {settings.min_participants} ({why or 'the others did not answer'})"
        )
    return {
        "peer_nodes": keyed,
        "peer_sites": [str(replies[n]["site"]) for n in keyed],
        "peer_keys": [replies[n]["mask_pk"] for n in keyed],
        "peer_signatures": [replies[n]["signature"] for n in keyed],
    }


def _sum_ckks(transport: Transport, ids: list[int], round_id: int, settings: HESettings) -> np.ndarray:
    public = settings.public_context
    peers = _mask_keys(transport, ids, round_id, settings)
    ids = peers["peer_nodes"]
    decryptor = decryptor_for(ids, round_id)
    requests = {
        n: {"round_id": round_id, "node_id": n, "decryptor": decryptor, "key_id": settings.key_id, **peers}
        for n in ids
    }
    replies = transport.exchange(ENCRYPT_PHASE, requests)

    declined = {n: str(r.get("error", "no ciphertext")) for n, r in replies.items() if "ciphertext" not in r}
    participants = sorted(n for n, r in replies.items() if n in requests and "ciphertext" in r)
    if participants != ids:
        # each ciphertext is masked for exactly the keyed sites: without all of them nothing cancels
        why = "; ".join(f"node {n}: {e}" for n, e in sorted(declined.items())) or "the others did not answer"
        raise ScalarAggregationError(
            f"round {round_id}: {len(participants)} of {len(ids)} keyed sites sent ciphertexts; the masks "
            f"cancel only over all of them ({why})"
        )
    cts: list[bytes] = []
    tags: list[bytes] = []
    sizes: dict[int, int] = {}
    for n in participants:
        ct, tag = replies[n]["ciphertext"], replies[n].get("tag")
        if not isinstance(ct, bytes) or not isinstance(tag, bytes):
            raise ScalarAggregationError(f"round {round_id}: node {n} sent a non-bytes ciphertext or tag")
        try:
            sizes[n] = ckks.vector_size(public, ct)
        except ckks.CiphertextError as err:
            raise ScalarAggregationError(f"round {round_id}: node {n}: {err}") from None
        cts.append(ct)
        tags.append(tag)
    if len(set(sizes.values())) != 1:
        raise ScalarAggregationError(f"round {round_id}: sites encrypted different lengths {sizes}")

    aggregate = ckks.add_ciphertexts(public, cts)
    request = {
        "round_id": round_id,
        "node_id": decryptor,
        "participants": participants,
        "participant_keys": peers["peer_keys"],
        "ciphertexts": cts,
        "tags": tags,
        "aggregate": aggregate,
    }
    reply = transport.exchange(DECRYPT_PHASE, {decryptor: request}).get(decryptor)
    if reply is None:
        raise ScalarAggregationError(f"round {round_id}: decryptor node {decryptor} did not answer")
    if "error" in reply:
        raise ScalarAggregationError(
            f"round {round_id}: decryptor node {decryptor} refused: {reply['error']}"
        )
    total = np.asarray(reply.get("sum"), dtype=np.float64)
    t = next(iter(sizes.values()))
    if total.shape != (t,) or not np.all(np.isfinite(total)):
        raise ScalarAggregationError(
            f"round {round_id}: decryptor node {decryptor} returned shape {total.shape}, expected ({t},)"
        )
    return total


def sum_scalars(
    transport: Transport, node_ids: Sequence[int], round_id: int, settings: HESettings | None
) -> np.ndarray:
    """Sum of the sites' T-vectors of scalars: plain when `settings` is None, else under CKKS."""
    ids = _check_ids(node_ids)
    _check_round(round_id)
    if settings is None:
        return _sum_plain(transport, ids, round_id)
    return _sum_ckks(transport, ids, round_id, settings)


# ---------------------------------------------------------------- client side


class _Refusal(Exception):
    pass


def _int_field(request: Mapping[str, Any], name: str) -> int:
    value = request.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _Refusal(f"request field {name!r} must be a non-negative int, got {value!r}")
    return value


def _bytes_list(request: Mapping[str, Any], name: str, length: int) -> list[bytes]:
    value = request.get(name)
    if not isinstance(value, list) or len(value) != length or not all(isinstance(v, bytes) for v in value):
        raise _Refusal(f"request field {name!r} must be a list of {length} byte strings")
    return value


def _own_scalars(scalars: np.ndarray) -> np.ndarray:
    arr = np.asarray(scalars, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise _Refusal(f"this site's scalars must be a non-empty 1-D vector, got shape {arr.shape}")
    return arr


def _need_secret(secret_context: ts.Context | None) -> ts.Context:
    if secret_context is None or not secret_context.is_private():
        raise _Refusal("this site holds no secret CKKS context; it cannot take part in HE rounds")
    return secret_context


def _need_identity(identity: SecAggIdentity | None) -> SecAggIdentity:
    if identity is None:
        raise _Refusal("this site has no signing identity; α masks need its provisioned signing key")
    return identity


def _own_node(request: Mapping[str, Any], node_id: int | None) -> int:
    """The node this site is: its runtime's id when it knows one, never only the server's word.
    A decryptor that took its id from the request would decrypt, as "the decryptor", aggregates
    whose tags name another node: each site once per round, every site's decryption of the round."""
    named = _int_field(request, "node_id")
    if node_id is not None and named != node_id:
        raise _Refusal(f"the request is addressed to node {named}; this site is node {node_id}")
    return named


def _keys(
    request: Mapping[str, Any], state: dict[str, Any], identity: SecAggIdentity | None, node: int | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    identity = _need_identity(identity)
    round_id = _int_field(request, "round_id")
    node_id = _own_node(request, node)
    if state.get(_KEYED[0]) == round_id or round_id in state.get(_ENCRYPTED, []):
        # a second key would let the same scalars be masked for a second set of peers
        raise _Refusal(f"round {round_id}: this site already sent its α mask key")
    secret, public = scalar_masks.new_keypair()
    signature = identity.sign(keys_statement(identity.run_id, round_id, node_id, identity.site, public))
    reply = {"mask_pk": public, "site": identity.site, "signature": signature}
    return reply, {**state, **dict(zip(_KEYED, (round_id, node_id, secret), strict=True))}


def _peers(
    request: Mapping[str, Any], identity: SecAggIdentity, round_id: int, me: int, own_pk: bytes, minimum: int
) -> tuple[list[int], list[bytes], list[tuple[str, bytes]]]:
    nodes = request.get("peer_nodes")
    if not isinstance(nodes, list) or not all(isinstance(n, int) and not isinstance(n, bool) for n in nodes):
        raise _Refusal("request field 'peer_nodes' must be a list of node ids")
    sites = request.get("peer_sites")
    if not isinstance(sites, list) or len(sites) != len(nodes) or not all(isinstance(x, str) for x in sites):
        raise _Refusal("request field 'peer_sites' must list one site name per node")
    pks = _bytes_list(request, "peer_keys", len(nodes))
    sigs = _bytes_list(request, "peer_signatures", len(nodes))
    if len(set(nodes)) != len(nodes) or len(set(sites)) != len(sites):
        raise _Refusal(f"round {round_id}: a node or a site is listed twice among the participants")
    if len(nodes) < minimum:
        raise _Refusal(f"round {round_id}: {len(nodes)} participants; this site sums with at least {minimum}")
    others: list[tuple[str, bytes]] = []
    for node, site, pk, sig in zip(nodes, sites, pks, sigs, strict=True):
        if node == me:
            if site != identity.site or pk != own_pk:
                raise _Refusal(f"round {round_id}: this site's own entry is not the key it sent")
            continue
        if not identity.signed_by(site, sig, keys_statement(identity.run_id, round_id, node, site, pk)):
            raise _Refusal(
                f"round {round_id}: node {node}'s α mask key is not signed by a provisioned site {site!r}"
            )
        others.append((site, pk))
    if len(others) != len(nodes) - 1:
        raise _Refusal(f"round {round_id}: this site is not among the participants it is asked to mask for")
    return nodes, pks, others


def _length(scalars: np.ndarray | SizedValues) -> int:
    if isinstance(scalars, SizedValues):
        if isinstance(scalars.length, bool) or not isinstance(scalars.length, int) or scalars.length < 1:
            raise _Refusal(f"this site's scalars must be a non-empty vector, got length {scalars.length!r}")
        return scalars.length
    return _own_scalars(scalars).size


def _sized(scalars: np.ndarray | SizedValues, participants: int) -> np.ndarray:
    """The values to encrypt for `participants` verified participants (fixed values: themselves)."""
    if not isinstance(scalars, SizedValues):
        return _own_scalars(scalars)
    try:
        values = _own_scalars(scalars.values(participants))
    except ValuesRefused as refusal:
        raise _Refusal(str(refusal)) from None
    if values.size != scalars.length:
        raise _Refusal(f"this site's sized values hold {values.size} values, not its T = {scalars.length}")
    return values


def _encrypt(
    request: Mapping[str, Any],
    state: dict[str, Any],
    scalars: np.ndarray | SizedValues,
    ctx: ts.Context | None,
    identity: SecAggIdentity | None,
    minimum: int,
    node: int | None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    ctx = _need_secret(ctx)
    identity = _need_identity(identity)
    round_id = _int_field(request, "round_id")
    node_id = _own_node(request, node)
    decryptor = _int_field(request, "decryptor")
    own_id = ckks.he_key_id(ctx)
    if request.get("key_id") != own_id:
        raise _Refusal(
            f"the server's public context (key id {str(request.get('key_id'))[:16]}…) is not the partner of "
            f"this site's secret context ({own_id[:16]}…): keys from different `keys init` runs"
        )
    done = list(state.get(_ENCRYPTED, []))
    if round_id in done:
        # a second ciphertext of the same round could be summed twice and then subtracted
        raise _Refusal(f"round {round_id}: this site already encrypted its scalars for this round")
    if state.get(_KEYED[0]) != round_id or state.get(_KEYED[1]) != node_id:
        raise _Refusal(f"round {round_id}: this site sent no α mask key as node {node_id}")
    secret = state[_KEYED[2]]
    own_pk = secagg_channel.public_key(secret)
    nodes, pks, others = _peers(request, identity, round_id, node_id, own_pk, minimum)
    context = f"{identity.run_id}|{round_id}".encode()
    # only now, with every participant's signed key verified, is the sum's size known: `len(nodes)`
    # is the list the tag binds and the decryptor checks, not a count the server merely asserts
    values = scalar_masks.masked(_sized(scalars, len(nodes)), identity.site, secret, others, context)
    ciphertext = ckks.encrypt_vector(ctx, values)
    tag = make_tag(tag_key(ctx), round_id, node_id, decryptor, participants_digest(nodes, pks), ciphertext)
    # the round's mask secret is dropped: this site masks nothing else with it
    kept = {k: v for k, v in state.items() if k not in _KEYED}
    return {"ciphertext": ciphertext, "tag": tag}, {**kept, _ENCRYPTED: [*done, round_id]}


def _decrypt(
    request: Mapping[str, Any],
    state: dict[str, Any],
    scalars: np.ndarray | SizedValues,
    ctx: ts.Context | None,
    minimum: int,
    node: int | None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    ctx = _need_secret(ctx)
    round_id = _int_field(request, "round_id")
    me = _own_node(request, node)
    done = list(state.get(_DECRYPTED, []))
    if round_id in done:
        raise _Refusal(f"round {round_id}: already decrypted once; a second aggregate of it is a replay")
    participants = request.get("participants")
    if not isinstance(participants, list) or not all(
        isinstance(p, int) and not isinstance(p, bool) for p in participants
    ):
        raise _Refusal("request field 'participants' must be a list of node ids")
    if len(set(participants)) != len(participants):
        raise _Refusal(f"round {round_id}: participants listed twice {participants}")
    if len(participants) < max(minimum, MIN_PARTICIPANTS):
        raise _Refusal(
            f"round {round_id}: {len(participants)} participant(s); this site decrypts only sums over at "
            f"least {max(minimum, MIN_PARTICIPANTS)} sites"
        )
    cts = _bytes_list(request, "ciphertexts", len(participants))
    listed = participants_digest(participants, _bytes_list(request, "participant_keys", len(participants)))
    tags = _bytes_list(request, "tags", len(participants))
    aggregate = request.get("aggregate")
    if not isinstance(aggregate, bytes):
        raise _Refusal("request field 'aggregate' must be bytes")

    key = tag_key(ctx)
    forged = [
        p
        for p, ct, tag in zip(participants, cts, tags, strict=True)
        if not hmac.compare_digest(tag, make_tag(key, round_id, p, me, listed, ct))
    ]
    if forged:
        raise _Refusal(
            f"round {round_id}: tags of nodes {forged} do not verify for this round, decryptor and set of "
            "participants; those ciphertexts were not masked and made for this decryption"
        )
    t = _length(scalars)
    try:
        sizes = {ckks.vector_size(ctx, ct) for ct in cts}
        if sizes != {t}:
            raise _Refusal(f"round {round_id}: ciphertexts hold {sorted(sizes)} values; this site's T = {t}")
        recomputed = ckks.add_ciphertexts(ctx, cts)
        given = ckks.canonical(ctx, aggregate)
    except ckks.CiphertextError as err:
        raise _Refusal(f"round {round_id}: {err}") from None
    if not hmac.compare_digest(recomputed, given):
        raise _Refusal(f"round {round_id}: the aggregate is not the sum of the listed participants' vectors")
    total = round_release(ckks.decrypt_vector(ctx, recomputed)[:t])
    return {"sum": total}, {**state, _DECRYPTED: [*done, round_id]}


def client_step(
    phase: str,
    request: Mapping[str, Any],
    state: Mapping[str, Any],
    scalars: np.ndarray | SizedValues,
    secret_context: ts.Context | None,
    identity: SecAggIdentity | None = None,
    min_participants: int = MIN_PARTICIPANTS,
    node_id: int | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One site's answer to one phase; pure (state in, new state out, input state untouched).

    `scalars` are this site's DP-noised T values, or `SizedValues` whose values depend on the
    number of verified participants (called once, inside the encrypt phase); `secret_context` is
    None for plain rounds (and a site that holds one refuses plain rounds); `identity` signs this
    site's α mask key and checks its peers'; `min_participants` is the smallest sum the site takes
    part in or decrypts; `node_id` is the node the site is, from its runtime (a request naming
    another is refused; None only where the caller has no runtime, as the protocol's own tests).
    Refusals are replies {"error": reason} with the state unchanged.
    """
    current = dict(state)
    if phase == PLAIN_PHASE:
        if secret_context is not None:
            # a site provisioned for HE never lets the server downgrade it to cleartext scalars
            return {"error": "this site sends its scalars only under CKKS"}, current
        if isinstance(scalars, SizedValues):
            # values sized for a secure sum (a share of its noise) mean nothing, and protect nothing, alone
            refusal = "this site's scalars are sized for a sum under CKKS; none go in the clear"
            return {"error": refusal}, current
        return {"scalars": np.asarray(scalars, dtype=np.float64)}, current
    try:
        if phase == KEYS_PHASE:
            _need_secret(secret_context)
            return _keys(request, current, identity, node_id)
        if phase == ENCRYPT_PHASE:
            return _encrypt(request, current, scalars, secret_context, identity, min_participants, node_id)
        if phase == DECRYPT_PHASE:
            return _decrypt(request, current, scalars, secret_context, min_participants, node_id)
        return {"error": f"unknown phase {phase!r}"}, current
    except _Refusal as refusal:
        return {"error": str(refusal)}, current
