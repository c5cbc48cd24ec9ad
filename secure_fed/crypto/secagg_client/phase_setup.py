"""Setup: check the server's parameters against the site's own, then advertise fresh signed keys."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from secure_fed.crypto import secagg_channel as channel
from secure_fed.crypto.quantize import modulus_bits
from secure_fed.crypto.secagg_client.fields import _float, _ids, _int, _round_id
from secure_fed.crypto.secagg_client.once import _digest, _masked_uploads, _refuse_if_masked
from secure_fed.crypto.secagg_client.state import (
    _ROUND_KEYS,
    MASKED_UPLOADS,
    Entropy,
    SiteQuantisation,
    SiteRules,
    State,
)
from secure_fed.crypto.secagg_identity import (
    SecAggIdentity,
    key_statement,
)
from secure_fed.crypto.secagg_protocol import (
    SETUP,
    SecAggRefused,
    collusion_safe_threshold,
    site_threshold,
    word_bits,
)
from secure_fed.crypto.secagg_shamir import SECRET_BYTES


def _check_quantisation(clip: float, bits: int, num_nodes: int, dim: int, own: SiteQuantisation) -> None:
    """The server's clip and bits must be the site's own (its policy sets them, not the server)."""
    if own.clip is not None and clip != own.clip:
        raise SecAggRefused(f"the server's SecAgg+ clip {clip:g} is not this site's secagg.clip {own.clip:g}")
    if own.clip is not None:
        expected = own.bits if own.bits is not None else word_bits(num_nodes, dim)
        if bits != expected:
            raise SecAggRefused(
                f"the server's SecAgg+ bits {bits} are not this site's {expected} (secagg.bits"
                f"{'' if own.bits is not None else ' unset: the most a 32-bit ring holds for the round'})"
            )


def _setup(
    request: Mapping[str, Any],
    state: State,
    vector: np.ndarray,
    identity: SecAggIdentity,
    entropy: Entropy,
    context: bytes,
    fingerprint: str | None,
    rules: SiteRules,
) -> tuple[dict[str, Any], State]:
    """Check the server's parameters, then advertise fresh public keys for this round, signed."""
    me = _int(request, "node_id")
    neighbours = _ids(request, "neighbours")
    threshold = _int(request, "threshold")
    num_nodes = _int(request, "num_nodes")
    dim = _int(request, "dim")
    bits = _int(request, "bits")
    m = _int(request, "modulus_bits")
    clip = _float(request, "clip")
    round_id = _round_id(request)
    if me in neighbours or len(neighbours) < 2 or len(neighbours) >= num_nodes:
        raise SecAggRefused(f"neighbour list {neighbours} is not valid for node {me} among {num_nodes}")
    # below 2t >= k + 2, one colluding neighbour and the server could strip every mask off this
    # site's input (collusion_safe_threshold says how)
    # its own floor against the colluders it plans for: a server that shrinks the round cannot
    # bring t under what c colluding neighbours need
    floor = max(site_threshold(len(neighbours)), collusion_safe_threshold(len(neighbours), rules.colluders))
    if not (floor <= threshold <= len(neighbours)):
        raise SecAggRefused(
            f"threshold {threshold} is unsafe for {len(neighbours)} neighbours (this site needs {floor}: "
            f"2t >= k + c + 1 for c = {rules.colluders} colluders, raised where k allows)"
        )
    if np.ndim(vector) != 1 or len(vector) != dim:
        raise SecAggRefused(f"server expects a {dim}-vector, this client holds shape {np.shape(vector)}")
    if not 8 <= bits <= 40 or not clip > 0:
        raise SecAggRefused(f"quantisation bits={bits}, clip={clip} out of range")
    ring_input = _check_ring_input(request, vector, m, rules)
    if rules.honest_min is not None and len(neighbours) + 1 < rules.honest_min:
        raise SecAggRefused(
            f"{len(neighbours) + 1} sites in this node's neighbourhood, fewer than the {rules.honest_min} "
            "(dp.honest_min) whose noise shares this site's share was sized with"
        )
    if not ring_input:
        _check_quantisation(clip, bits, num_nodes, dim, rules.quantisation)
    if rules.members and identity.site not in rules.members:
        raise SecAggRefused(f"this site ({identity.site!r}) is not among the sites its input was scaled for")
    if not ring_input and not modulus_bits(num_nodes, bits, max_count=dim) <= m <= 64:
        raise SecAggRefused(f"a {m}-bit modulus could wrap the sum of {num_nodes} clients")
    marks = _masked_uploads(state)
    digest = _digest(vector, fingerprint)
    _refuse_if_masked(digest, marks, rules.upload_id)
    enc_sk, enc_pk = channel.new_keypair(entropy)
    mask_sk, mask_pk = channel.new_keypair(entropy)
    signature = identity.sign(
        key_statement(identity.run_id, round_id, me, identity.site, enc_pk, mask_pk, context)
    )
    new_state: State = {
        **{k: v for k, v in state.items() if k not in _ROUND_KEYS},
        MASKED_UPLOADS: marks,
        "stage": SETUP,
        "round_id": round_id,
        "node_id": me,
        "neighbours": neighbours,
        "threshold": threshold,
        "modulus_bits": m,
        "clip": clip,
        "bits": bits,
        "enc_sk": enc_sk,
        "mask_sk": mask_sk,
        "own_enc_pk": enc_pk,
        "own_mask_pk": mask_pk,
        "seed": entropy(SECRET_BYTES),
        "upload_fingerprint": digest,
        "context": context,
        "members": sorted(rules.members),
        "ring_input": ring_input,
        # absent rather than None: the state travels through the wire codec, which has no None
        **({"upload_id": rules.upload_id} if rules.upload_id is not None else {}),
    }
    return {"enc_pk": enc_pk, "mask_pk": mask_pk, "site": identity.site, "key_sig": signature}, new_state


def _check_ring_input(request: Mapping[str, Any], vector: np.ndarray, m: int, rules: SiteRules) -> bool:
    """Whether this site's input goes into the ring as the integers it is (its own rule, not the
    server's): then the ring must be the site's, and the integers must be residues of it."""
    asked = request.get("ring_input", False) is True
    if rules.ring_bits is None:
        if asked:
            raise SecAggRefused("this site sums float updates through the quantiser, not ring integers")
        return False
    if not asked:
        raise SecAggRefused(
            "this site's input is ring integers (dp.noise = 'distributed'); the server asked to quantise it"
        )
    if m != rules.ring_bits:
        raise SecAggRefused(
            f"the server's {m}-bit ring is not this site's {rules.ring_bits}-bit ring (dp.ring_bits)"
        )
    vec = np.asarray(vector)
    if vec.dtype.kind != "u" or (m < 64 and vec.size and int(vec.max()) >= 1 << m):
        raise SecAggRefused(f"this site's input is not a vector of residues mod 2^{m}")
    return True
