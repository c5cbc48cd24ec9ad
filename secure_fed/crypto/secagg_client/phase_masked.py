"""Masked input: the quantised update with its self mask and a pairwise mask per partner."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from secure_fed.crypto import secagg_channel as channel
from secure_fed.crypto.masking import add_masks
from secure_fed.crypto.quantize import quantise_to_ring, ring_dtype
from secure_fed.crypto.secagg_client.once import _digest, _masked_uploads, _refuse_if_masked
from secure_fed.crypto.secagg_client.phase_shares import _agreed, _open_shares
from secure_fed.crypto.secagg_client.state import _OWN_PUBLIC, _SECRETS, MASKED_UPLOADS, Entropy, State
from secure_fed.crypto.secagg_protocol import (
    MASKED,
    SecAggRefused,
)


def masked_input(
    vector: np.ndarray, state: State, partners: list[int], pair_keys: list[bytes], rng: np.random.Generator
) -> np.ndarray:
    """Quantised vector, plus its clipped count as a last coordinate, plus self and pairwise masks."""
    m = state["modulus_bits"]
    y = np.empty(len(vector) + 1, dtype=ring_dtype(m))
    if state.get("ring_input"):
        # already residues of this ring (checked at the setup): masked as they are
        y[:-1] = np.asarray(vector, dtype=y.dtype)
        y[-1] = 0
    else:
        # encoded in place into the ring words: no int64 copy, no separate residue pass; the reduction
        # mod 2^m happens once, after the masks (sums mod 2^w reduce to the same residue mod 2^m)
        y[-1] = quantise_to_ring(vector, state["clip"], state["bits"], m, rng, y[:-1])
    me = state["node_id"]
    # the lower id adds, the higher subtracts, so each pair cancels in the sum
    pairwise = [(key, +1 if me < peer else -1) for peer, key in zip(partners, pair_keys, strict=True)]
    add_masks(y, [(channel.self_mask_key(state["seed"], state["round_id"]), +1), *pairwise])
    if m < y.dtype.itemsize * 8:
        y &= y.dtype.type((1 << m) - 1)
    return y


def _masked(
    request: Mapping[str, Any],
    state: State,
    vector: np.ndarray,
    entropy: Entropy,
    fingerprint: str | None,
    upload_id: str | None,
) -> tuple[dict[str, Any], State]:
    senders, seed_shares = _open_shares(request, state)
    # masking with fewer partners would leave holders of this site's shares that it shares no mask
    # with: their self-mask shares would cost a server nothing
    if len(senders) < state["threshold"]:
        raise SecAggRefused(f"only {len(senders)} neighbours still in the round, {state['threshold']} needed")
    marks = _masked_uploads(state)
    digest = _digest(vector, fingerprint)
    if digest != state["upload_fingerprint"] or upload_id != state.get("upload_id"):
        raise SecAggRefused("this site's update changed since the round's setup, which checked another one")
    _refuse_if_masked(digest, marks, upload_id)
    round_id = state["round_id"]
    mask_pk = dict(zip(state["peers"], state["peer_mask_pk"], strict=True))
    pair_keys = _agreed(
        lambda pks: channel.pairwise_mask_keys(state["mask_sk"], pks, round_id),
        senders,
        [mask_pk[p] for p in senders],
    )
    rng = np.random.default_rng(int.from_bytes(entropy(32), "little"))
    y = masked_input(np.asarray(vector), state, senders, pair_keys, rng)
    kept = {k: v for k, v in state.items() if k not in (*_SECRETS, *_OWN_PUBLIC, "upload_fingerprint")}
    state = {
        **kept,
        MASKED_UPLOADS: [*marks, f"{digest}@{round_id}", *([f"{upload_id}@{round_id}"] if upload_id else [])],
        "stage": MASKED,
        "partners": senders,
        "held_seed": seed_shares,
        "pair_keys": pair_keys,
    }
    return {"masked": y}, state
