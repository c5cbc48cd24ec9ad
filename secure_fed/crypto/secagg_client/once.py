"""The once-only rule: an update (or another made for the same round) takes part in one secure sum."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from secure_fed.crypto.masking import keystream_words
from secure_fed.crypto.secagg_client.state import MASKED_UPLOADS
from secure_fed.crypto.secagg_protocol import (
    SecAggRefused,
)

# The once-only rule needs to recognise an update again, not to resist collisions: a fingerprint
# that is a deterministic function of every word of the update always recognises the same update
# (what keeps a second sum from happening), and two different updates that collide only cost a
# needless refusal. Per 4 KiB block, a sum of the words times fixed odd weights (mod 2^32: a change
# to any one word always shows), then SHA-256 over the block sums: ~0.1 ms per 4 MB update, where a
# SHA-256 pass over the update costs 2 ms, on every site twice a round.
_FINGERPRINT_BLOCK_WORDS = 1024


_FINGERPRINT_WEIGHTS = keystream_words(
    hashlib.sha256(b"secure_fed/secagg+/update-weights").digest(), _FINGERPRINT_BLOCK_WORDS, np.uint32
) | np.uint32(1)


def upload_fingerprint(vector: np.ndarray) -> str:
    """Hex fingerprint of an update: its dtype, shape and a weighted sum of every 4 KiB block."""
    data = np.ascontiguousarray(vector)
    raw = data.reshape(-1).view(np.uint8)
    words = raw[: len(raw) // 4 * 4].view(np.uint32)
    whole = len(words) // _FINGERPRINT_BLOCK_WORDS * _FINGERPRINT_BLOCK_WORDS
    blocks = words[:whole].reshape(-1, _FINGERPRINT_BLOCK_WORDS)
    sums = np.einsum("ij,j->i", blocks, _FINGERPRINT_WEIGHTS)  # uint32: wraps mod 2^32
    digest = hashlib.sha256(f"secure_fed/secagg+/update|{data.dtype.str}|{data.shape}|".encode())
    digest.update(sums.astype("<u4").tobytes())
    digest.update(words[whole:].astype("<u4").tobytes())
    digest.update(raw[len(words) * 4 :].tobytes())
    return digest.hexdigest()


def _masked_uploads(state: Mapping[str, Any]) -> list[str]:
    marks = state.get(MASKED_UPLOADS, [])
    if not isinstance(marks, list) or not all(isinstance(m, str) for m in marks):
        raise SecAggRefused(f"this site's record of masked updates ({MASKED_UPLOADS}) is corrupt")
    return list(marks)


def _digest(vector: np.ndarray, fingerprint: str | None) -> str:
    """The update's fingerprint: computed here, or the caller's (made once per update instead of
    twice a round), which it can vouch for only while nobody can change the update in place."""
    if fingerprint is None:
        return upload_fingerprint(vector)
    if not isinstance(vector, np.ndarray) or vector.flags.writeable:
        raise ValueError("a fingerprint made beforehand vouches only for a read-only update array")
    return fingerprint


def _refuse_if_masked(digest: str, marks: list[str], upload_id: str | None) -> None:
    for mark in marks:
        done, _, round_id = mark.partition("@")
        if done == digest or (upload_id is not None and done == upload_id):
            raise SecAggRefused(
                f"already masked for round {round_id}: this update (or another made for the same "
                f"{upload_id or 'input'}) took part in a secure sum, and a second sum over it could differ "
                "from the first by exactly this site's update"
            )


def _check_upload_id(upload_id: str | None) -> None:
    # a record is a fingerprint (hex) or an upload id: an id that could read as a fingerprint, or
    # that holds the separator, would make the two kinds of record indistinguishable
    if upload_id is not None and (
        "@" in upload_id or not upload_id or all(c in "0123456789abcdef" for c in upload_id)
    ):
        raise ValueError(f"upload id {upload_id!r} must be non-empty, hold no '@' and not be hex")
