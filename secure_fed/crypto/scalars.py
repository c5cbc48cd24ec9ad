"""Summing the sites' α-hypergradient scalars, in the clear or under CKKS.

CKKS round (phases "he_encrypt", "he_decrypt"):

1. The server names the round's decryptor (sorted invited ids, round_id mod n) and asks every
   site to encrypt its (already DP-noised) T scalars. Each site answers once per round with one
   ciphertext and a tag: HMAC-SHA256, under a key only holders of the secret context can derive,
   over (round_id, node_id, decryptor, sha256(ciphertext)).
2. The server adds the ciphertexts with its public context.
3. The decryptor receives every participant's ciphertext and tag plus the aggregate. It refuses
   unless the tags verify, there are at least two participants, it has not decrypted this round
   before and the aggregate is exactly (byte for byte, after local re-serialisation; CKKS
   addition is exact modular arithmetic) the sum of the listed ciphertexts. It then returns the
   T decrypted values of the sum, rounded to a fixed grid.

Why these checks hold against a server that deviates: it cannot forge a tag, so every summand
is a genuine site ciphertext of this round; a site encrypts at most once per round, so no
site's value can be counted twice (which would let the server subtract); and the decryptor
decrypts one aggregate per round, so two different subsets cannot be differenced. Rounding and
releasing only the T used slots keep the CKKS decryption noise, which carries information about
the secret key, out of the server's hands.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tenseal as ts
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from secure_fed.crypto import ckks, keys
from secure_fed.crypto.transport import Transport

PLAIN_PHASE = "plain_scalars"
ENCRYPT_PHASE = "he_encrypt"
DECRYPT_PHASE = "he_decrypt"

MIN_PARTICIPANTS = 2  # a "sum" of one site is that site's values: never decrypt it
RELEASE_GRID = 2.0**-24  # ≈6e-8: far above CKKS noise at scale 2^40 (≈1e-9), far below DP noise

_TAG_INFO = b"secure_fed ckks scalar tags v1"
_ENCRYPTED = "he_encrypted_rounds"
_DECRYPTED = "he_decrypted_rounds"


class ScalarAggregationError(RuntimeError):
    """A round of scalar aggregation could not produce a sum (and says why)."""


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


def tag_message(round_id: int, node_id: int, decryptor: int, ciphertext: bytes) -> bytes:
    # decimal ints never contain "|", so the encoding is unambiguous
    head = f"{round_id}|{node_id}|{decryptor}|".encode()
    return head + hashlib.sha256(ciphertext).digest()


def make_tag(key: bytes, round_id: int, node_id: int, decryptor: int, ciphertext: bytes) -> bytes:
    return hmac.new(key, tag_message(round_id, node_id, decryptor, ciphertext), hashlib.sha256).digest()


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


def _sum_ckks(transport: Transport, ids: list[int], round_id: int, settings: HESettings) -> np.ndarray:
    public = settings.public_context
    decryptor = decryptor_for(ids, round_id)
    requests = {
        n: {"round_id": round_id, "node_id": n, "decryptor": decryptor, "key_id": settings.key_id}
        for n in ids
    }
    replies = transport.exchange(ENCRYPT_PHASE, requests)

    declined = {n: str(r.get("error", "no ciphertext")) for n, r in replies.items() if "ciphertext" not in r}
    participants = sorted(n for n, r in replies.items() if n in requests and "ciphertext" in r)
    if len(participants) < settings.min_participants:
        why = "; ".join(f"node {n}: {e}" for n, e in sorted(declined.items())) or "the others did not answer"
        raise ScalarAggregationError(
            f"round {round_id}: {len(participants)} of {len(ids)} sites sent ciphertexts, "
            f"need ≥ {settings.min_participants} ({why})"
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


def _encrypt(
    request: Mapping[str, Any], state: dict[str, Any], scalars: np.ndarray, ctx: ts.Context | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    ctx = _need_secret(ctx)
    round_id = _int_field(request, "round_id")
    node_id = _int_field(request, "node_id")
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
    ciphertext = ckks.encrypt_vector(ctx, _own_scalars(scalars))
    tag = make_tag(tag_key(ctx), round_id, node_id, decryptor, ciphertext)
    return {"ciphertext": ciphertext, "tag": tag}, {**state, _ENCRYPTED: [*done, round_id]}


def _decrypt(
    request: Mapping[str, Any], state: dict[str, Any], scalars: np.ndarray, ctx: ts.Context | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    ctx = _need_secret(ctx)
    round_id = _int_field(request, "round_id")
    me = _int_field(request, "node_id")
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
    if len(participants) < MIN_PARTICIPANTS:
        raise _Refusal(
            f"round {round_id}: {len(participants)} participant(s); a sum of fewer than "
            f"{MIN_PARTICIPANTS} sites would reveal a single site's values"
        )
    cts = _bytes_list(request, "ciphertexts", len(participants))
    tags = _bytes_list(request, "tags", len(participants))
    aggregate = request.get("aggregate")
    if not isinstance(aggregate, bytes):
        raise _Refusal("request field 'aggregate' must be bytes")

    key = tag_key(ctx)
    forged = [
        p
        for p, ct, tag in zip(participants, cts, tags, strict=True)
        if not hmac.compare_digest(tag, make_tag(key, round_id, p, me, ct))
    ]
    if forged:
        raise _Refusal(
            f"round {round_id}: tags of nodes {forged} do not verify for this round and decryptor; "
            "those ciphertexts were not made by a site for this decryption"
        )
    t = _own_scalars(scalars).size
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
    scalars: np.ndarray,
    secret_context: ts.Context | None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One site's answer to one phase; pure (state in, new state out, input state untouched).

    `scalars` are this site's DP-noised T values; `secret_context` is None for plain rounds (and a
    site that holds one refuses plain rounds).
    Refusals are replies {"error": reason} with the state unchanged.
    """
    current = dict(state)
    if phase == PLAIN_PHASE:
        if secret_context is not None:
            # a site provisioned for HE never lets the server downgrade it to cleartext scalars
            return {"error": "this site sends its scalars only under CKKS"}, current
        return {"scalars": np.asarray(scalars, dtype=np.float64)}, current
    steps = {ENCRYPT_PHASE: _encrypt, DECRYPT_PHASE: _decrypt}
    if phase not in steps:
        return {"error": f"unknown phase {phase!r}"}, current
    try:
        return steps[phase](request, current, scalars, secret_context)
    except _Refusal as refusal:
        return {"error": str(refusal)}, current
