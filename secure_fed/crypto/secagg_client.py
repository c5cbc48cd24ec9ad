"""SecAgg+ client: one pure step per phase, with all state in a flat dict of wire-safe values.

A client checks every instruction against what it already agreed to (round id, its neighbours,
threshold, phase order) and refuses (`SecAggRefused`) rather than reveal more than the protocol
allows. In particular it answers at most one unmask request per round, so it can never hand out
both the self-mask share and the key share of the same neighbour.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from cryptography.exceptions import InvalidTag

from secure_fed.crypto import secagg_channel as channel
from secure_fed.crypto.masking import add_masks
from secure_fed.crypto.quantize import modulus_bits, quantise_to_ring, ring_dtype
from secure_fed.crypto.secagg_protocol import (
    MASKED,
    SETUP,
    SHARES,
    UNMASK,
    SecAggRefused,
    ShareRejected,
    share_associated_data,
)
from secure_fed.crypto.secagg_shamir import SECRET_BYTES, SHARE_BYTES, split_secret

State = dict[str, Any]
Entropy = Callable[[int], bytes]

# what a client forgets once its masked vector is out: with them, a later leak of its state would
# let anyone strip its masks
_SECRETS = ("enc_sk", "mask_seed", "seed", "peer_enc_pk", "peer_mask_pk", "peer_channel_key")

# the phase a client must have completed before it accepts each request
_AFTER = {SHARES: SETUP, MASKED: SHARES, UNMASK: MASKED}


def _int(request: Mapping[str, Any], key: str) -> int:
    value = request.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise SecAggRefused(f"request field {key!r} must be an int")
    return value


def _float(request: Mapping[str, Any], key: str) -> float:
    value = request.get(key)
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise SecAggRefused(f"request field {key!r} must be a number")
    return float(value)


def _ids(request: Mapping[str, Any], key: str) -> list[int]:
    value = request.get(key)
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise SecAggRefused(f"request field {key!r} must be a list of ints")
    if len(set(value)) != len(value):
        raise SecAggRefused(f"request field {key!r} repeats a node")
    return value


def _blobs(request: Mapping[str, Any], key: str, count: int, size: int | None = None) -> list[bytes]:
    value = request.get(key)
    if not isinstance(value, list) or len(value) != count or not all(isinstance(v, bytes) for v in value):
        raise SecAggRefused(f"request field {key!r} must be a list of {count} byte strings")
    if size is not None and any(len(v) != size for v in value):
        raise SecAggRefused(f"request field {key!r} must hold {size}-byte values")
    return value


def _round_id(request: Mapping[str, Any]) -> int | str:
    value = request.get("round_id")
    if not isinstance(value, int | str) or isinstance(value, bool):
        raise SecAggRefused("request field 'round_id' must be an int or str")
    return value


def _check_order(phase: str, request: Mapping[str, Any], state: State) -> None:
    if state.get("stage") != _AFTER[phase]:
        raise SecAggRefused(
            f"{phase} arrived after {state.get('stage') or 'nothing'}, expected after {_AFTER[phase]}"
        )
    if _round_id(request) != state["round_id"]:
        raise SecAggRefused(
            f"{phase} is for round {request.get('round_id')!r}, this client is in {state['round_id']!r}"
        )


def _setup(request: Mapping[str, Any], vector: np.ndarray, entropy: Entropy) -> tuple[dict[str, Any], State]:
    """Check the server's parameters, then advertise fresh public keys for this round."""
    me = _int(request, "node_id")
    neighbours = _ids(request, "neighbours")
    threshold = _int(request, "threshold")
    num_nodes = _int(request, "num_nodes")
    dim = _int(request, "dim")
    bits = _int(request, "bits")
    m = _int(request, "modulus_bits")
    clip = _float(request, "clip")
    if me in neighbours or len(neighbours) < 2 or len(neighbours) >= num_nodes:
        raise SecAggRefused(f"neighbour list {neighbours} is not valid for node {me} among {num_nodes}")
    # a threshold at or below half the neighbours would let a server collect both kinds of shares
    if not (2 * threshold > len(neighbours) and 2 <= threshold <= len(neighbours)):
        raise SecAggRefused(f"threshold {threshold} is unsafe for {len(neighbours)} neighbours")
    if np.ndim(vector) != 1 or len(vector) != dim:
        raise SecAggRefused(f"server expects a {dim}-vector, this client holds shape {np.shape(vector)}")
    if not 8 <= bits <= 40 or not clip > 0:
        raise SecAggRefused(f"quantisation bits={bits}, clip={clip} out of range")
    if not modulus_bits(num_nodes, bits, max_count=dim) <= m <= 64:
        raise SecAggRefused(f"a {m}-bit modulus could wrap the sum of {num_nodes} clients")
    enc_sk, enc_pk = channel.new_keypair(entropy)
    mask_seed = entropy(SECRET_BYTES)
    _, mask_pk = channel.keypair_from_seed(mask_seed)
    state: State = {
        "stage": SETUP,
        "round_id": _round_id(request),
        "node_id": me,
        "neighbours": neighbours,
        "threshold": threshold,
        "modulus_bits": m,
        "clip": clip,
        "bits": bits,
        "enc_sk": enc_sk,
        "mask_seed": mask_seed,
        "seed": entropy(SECRET_BYTES),
    }
    return {"enc_pk": enc_pk, "mask_pk": mask_pk}, state


def _shares(request: Mapping[str, Any], state: State, entropy: Entropy) -> tuple[dict[str, Any], State]:
    peers = _ids(request, "peers")
    enc_pks = _blobs(request, "peer_enc_pk", len(peers), channel.KEY_BYTES)
    mask_pks = _blobs(request, "peer_mask_pk", len(peers), channel.KEY_BYTES)
    me, t = state["node_id"], state["threshold"]
    if not set(peers) <= set(state["neighbours"]):
        raise SecAggRefused(
            f"peers {sorted(set(peers) - set(state['neighbours']))} are not this node's neighbours"
        )
    if len(peers) < t:
        raise SecAggRefused(f"only {len(peers)} neighbours left, {t} needed to recover this node's secrets")
    all_keys = [
        *enc_pks,
        *mask_pks,
        channel.public_key(state["enc_sk"]),
        channel.keypair_from_seed(state["mask_seed"])[1],
    ]
    if len(set(all_keys)) != len(all_keys):
        raise SecAggRefused("public keys are not all distinct")
    seed_shares = split_secret(state["seed"], t, len(peers))
    key_shares = split_secret(state["mask_seed"], t, len(peers))
    # kept for opening the peers' shares in the masked phase: one key agreement per pair, not two
    keys = _agreed(lambda pks: channel.channel_keys(state["enc_sk"], pks), peers, enc_pks)
    sealed = [
        channel.seal(key, share_associated_data(state["round_id"], me, peer), seed_share + key_share, entropy)
        for peer, key, seed_share, key_share in zip(peers, keys, seed_shares, key_shares, strict=True)
    ]
    state = {
        **state,
        "stage": SHARES,
        "peers": peers,
        "peer_enc_pk": enc_pks,
        "peer_mask_pk": mask_pks,
        "peer_channel_key": keys,
    }
    return {"share_to": peers, "share_ct": sealed}, state


def _agreed(derive: Callable[[list[bytes]], list[bytes]], peers: list[int], pks: list[bytes]) -> list[bytes]:
    """`derive(pks)`, or a refusal naming the peer whose public key is a low-order point."""
    try:
        return derive(pks)
    except ValueError:
        for peer, pk in zip(peers, pks, strict=True):
            try:
                derive([pk])
            except ValueError as exc:
                raise SecAggRefused(f"public key of node {peer} is invalid") from exc
        raise


def _open_shares(request: Mapping[str, Any], state: State) -> tuple[list[int], list[bytes], list[bytes]]:
    senders = _ids(request, "share_from")
    sealed = _blobs(request, "share_ct", len(senders))
    channel_key = dict(zip(state["peers"], state["peer_channel_key"], strict=True))
    if not set(senders) <= set(channel_key):
        raise ShareRejected(
            f"shares from {sorted(set(senders) - set(channel_key))}, who are not this node's peers"
        )
    seed_shares, key_shares = [], []
    for sender, blob in zip(senders, sealed, strict=True):
        aad = share_associated_data(state["round_id"], sender, state["node_id"])
        try:
            plain = channel.open_sealed(channel_key[sender], aad, blob)
        except InvalidTag as exc:
            raise ShareRejected(
                f"share from node {sender} failed authentication (tampered or replayed)"
            ) from exc
        if len(plain) != 2 * SHARE_BYTES:
            raise ShareRejected(f"share from node {sender} has the wrong length")
        seed_shares.append(plain[:SHARE_BYTES])
        key_shares.append(plain[SHARE_BYTES:])
    return senders, seed_shares, key_shares


def masked_input(
    vector: np.ndarray, state: State, partners: list[int], rng: np.random.Generator
) -> np.ndarray:
    """Quantised vector, plus its clipped count as a last coordinate, plus self and pairwise masks."""
    m = state["modulus_bits"]
    y = np.empty(len(vector) + 1, dtype=ring_dtype(m))
    # encoded in place into the ring words: no int64 copy, no separate residue pass; the reduction
    # mod 2^m happens once, after the masks (sums mod 2^w reduce to the same residue mod 2^m)
    y[-1] = quantise_to_ring(vector, state["clip"], state["bits"], m, rng, y[:-1])
    mask_pk = dict(zip(state["peers"], state["peer_mask_pk"], strict=True))
    me, round_id = state["node_id"], state["round_id"]
    mask_sk, _ = channel.keypair_from_seed(state["mask_seed"])
    peer_pks = [mask_pk[p] for p in partners]
    keys = _agreed(lambda pks: channel.pairwise_mask_keys(mask_sk, pks, round_id), partners, peer_pks)
    # the lower id adds, the higher subtracts, so each pair cancels in the sum
    pairwise = [(key, +1 if me < peer else -1) for peer, key in zip(partners, keys, strict=True)]
    add_masks(y, [(channel.self_mask_key(state["seed"], round_id), +1), *pairwise])
    if m < y.dtype.itemsize * 8:
        y &= y.dtype.type((1 << m) - 1)
    return y


def _masked(
    request: Mapping[str, Any], state: State, vector: np.ndarray, entropy: Entropy
) -> tuple[dict[str, Any], State]:
    senders, seed_shares, key_shares = _open_shares(request, state)
    if len(senders) < state["threshold"]:
        raise SecAggRefused(f"only {len(senders)} neighbours still in the round, {state['threshold']} needed")
    rng = np.random.default_rng(int.from_bytes(entropy(32), "little"))
    y = masked_input(np.asarray(vector), state, senders, rng)
    # keys and seed are no longer needed; drop them so a later state leak reveals nothing
    kept = {k: v for k, v in state.items() if k not in _SECRETS}
    state = {**kept, "stage": MASKED, "held_from": senders, "held_seed": seed_shares, "held_key": key_shares}
    return {"masked": y}, state


def _unmask(request: Mapping[str, Any], state: State) -> tuple[dict[str, Any], State]:
    survived = _ids(request, "survived")
    dropped = _ids(request, "dropped")
    held = state["held_from"]
    if set(survived) & set(dropped):
        raise SecAggRefused(
            f"nodes {sorted(set(survived) & set(dropped))} are listed as both survived and dropped"
        )
    if not set(survived) | set(dropped) <= set(held):
        raise SecAggRefused("unmask names nodes this client holds no shares for")
    seed = dict(zip(held, state["held_seed"], strict=True))
    key = dict(zip(held, state["held_key"], strict=True))
    reply = {
        "seed_of": survived,
        "seed_shares": [seed[v] for v in survived],
        "key_of": dropped,
        "key_shares": [key[v] for v in dropped],
    }
    # forget the shares: a second unmask request in this round finds nothing to reveal
    done = {k: v for k, v in state.items() if k not in ("held_from", "held_seed", "held_key")}
    return reply, {**done, "stage": UNMASK}


def secagg_client_step(
    phase: str,
    request: Mapping[str, Any],
    state: Mapping[str, Any],
    vector: np.ndarray,
    *,
    entropy: Entropy = os.urandom,
) -> tuple[dict[str, Any], State]:
    """Run one SecAgg+ phase; `entropy` is injectable only so tests can be deterministic."""
    if phase == SETUP:
        return _setup(request, vector, entropy)
    if phase not in _AFTER:
        raise SecAggRefused(f"unknown SecAgg+ phase {phase!r}")
    state = dict(state)
    _check_order(phase, request, state)
    if phase == SHARES:
        return _shares(request, state, entropy)
    if phase == MASKED:
        return _masked(request, state, vector, entropy)
    return _unmask(request, state)
