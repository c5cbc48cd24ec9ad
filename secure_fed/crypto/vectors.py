"""Entry point for summing one vector per site, in the clear or with SecAgg+."""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from secure_fed.crypto.secagg_client import (
    IDENTIFIED_PHASES,
    MASKED_UPLOADS,
    Entropy,
    SiteQuantisation,
    SiteRules,
    secagg_client_step,
)
from secure_fed.crypto.secagg_identity import SecAggIdentity, load_identity
from secure_fed.crypto.secagg_protocol import PLAIN_SUM, SecAggAbort, SecAggRefused, SecAggSettings, VectorSum
from secure_fed.crypto.secagg_server import Advertised, run_secagg
from secure_fed.crypto.transport import Transport

__all__ = [
    "MASKED_UPLOADS",
    "SecAggIdentity",
    "SiteQuantisation",
    "SiteRules",
    "VectorSum",
    "client_step",
    "embed_plain_sum",
    "embedded_plain_sum",
    "load_identity",
    "sum_vectors",
]

# an identity, or a loader called only by the phases that need one (setup, share distribution)
IdentitySource = SecAggIdentity | Callable[[], SecAggIdentity] | None


# A plain sum's request (and its reply, the site's vector) can ride inside another message, as the
# SecAgg+ setup does (EMBEDDED_SETUP): a plain round's training message carries it, so the round is
# one message phase, not the broadcast and then a query for the vectors
EMBEDDED_PLAIN_SUM = PLAIN_SUM + "."
# a training reply's field: the site trained but will not send its vector in the clear (its reason)
PLAIN_SUM_REFUSED = "plain_sum_refused"


def plain_sum_request(round_id: int | str, dim: int) -> dict[str, Any]:
    return {"round_id": round_id, "dim": dim}


def embed_plain_sum(payload: Mapping[str, Any]) -> dict[str, Any]:
    """A plain-sum request or reply as fields to merge into another message."""
    return {EMBEDDED_PLAIN_SUM + key: value for key, value in payload.items()}


def embedded_plain_sum(message: Mapping[str, Any]) -> dict[str, Any] | None:
    """The plain-sum request or reply inside `message`, or None when it carries none."""
    n = len(EMBEDDED_PLAIN_SUM)
    found = {k[n:]: v for k, v in message.items() if k.startswith(EMBEDDED_PLAIN_SUM)}
    return found or None


def _plain_sum(
    transport: Transport,
    nodes: list[int],
    dim: int,
    round_id: int | str,
    carried: Mapping[int, Mapping[str, Any]] | None = None,
) -> VectorSum:
    """`carried`: replies that came with an earlier message (the training reply); only the nodes
    with none are asked. A node in `carried` with no vector (it refused) counts as dropped."""
    carried = carried or {}
    ask = [u for u in nodes if u not in carried]
    replies = dict(carried)
    if ask:
        replies.update(transport.exchange(PLAIN_SUM, {u: plain_sum_request(round_id, dim) for u in ask}))
    total = np.zeros(dim, dtype=np.float64)
    survivors = []
    for node, reply in replies.items():
        vec = reply.get("vector")
        if node in nodes and isinstance(vec, np.ndarray) and vec.shape == (dim,):
            total += vec
            survivors.append(node)
    if not survivors:
        raise SecAggAbort("plain sum: no site answered")
    return VectorSum(total=total, survivors=sorted(survivors), dropped=sorted(set(nodes) - set(survivors)))


def sum_vectors(
    transport: Transport,
    node_ids: Sequence[int],
    dim: int,
    settings: SecAggSettings | None,
    round_id: int | str = 0,
    rng: random.Random | None = None,
    advertised: Advertised | None = None,
    carried: Mapping[int, Mapping[str, Any]] | None = None,
) -> VectorSum:
    """Sum the sites' `dim`-vectors: plainly when `settings` is None, else with SecAgg+.

    With SecAgg+ the server learns only the survivors' sum (to within `quantisation_bound` per
    coordinate) and the clipped fraction; `SecAggAbort` is raised, with nothing released, when too
    few sites stay. `rng` only shapes the masking graph (default: the OS's randomness);
    `advertised` is a setup already carried by an earlier message (`plan_setup`); `carried`, a
    plain sum's replies already carried by an earlier message (`embed_plain_sum`).
    """
    nodes = sorted(set(node_ids))
    if settings is None:
        return _plain_sum(transport, nodes, dim, round_id, carried)
    return run_secagg(transport, nodes, dim, settings, round_id, rng, advertised)


def client_step(
    phase: str,
    request: Mapping[str, Any],
    state: Mapping[str, Any],
    vector: np.ndarray,
    *,
    identity: IdentitySource = None,
    entropy: Entropy = os.urandom,
    context: bytes = b"",
    fingerprint: str | None = None,
    rules: SiteRules | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Client side of `sum_vectors` for every phase (plain and SecAgg+); `vector` never leaves unmasked
    except in the plain phase, which a client whose policy demands SecAgg+ must not be asked to run.

    The SecAgg+ setup and share distribution need the site's `identity`: a `SecAggIdentity`
    (`load_identity(keys_dir, site, run_id)`) or a function returning one, called only for those
    two phases; without one they are refused. `context` (bytes every participant must hold alike,
    such as the digest of server-chosen weights) is signed with the setup keys and checked against
    the neighbours'. Pass every step the state the previous step returned,
    the setup included: it carries the record of updates already masked, which makes a second
    secure sum over the same update impossible (its setup or masked phase is refused). `rules`:
    what the site sets itself (`SiteRules`: quantisation, factor sites, the update's round)."""
    if phase == PLAIN_SUM:
        vec = np.asarray(vector)
        if vec.ndim != 1 or request.get("dim") != len(vec):
            raise SecAggRefused(
                f"server expects a {request.get('dim')}-vector, this client holds shape {vec.shape}"
            )
        return {"vector": vec}, {}
    if callable(identity):
        identity = identity() if phase in IDENTIFIED_PHASES else None
    return secagg_client_step(
        phase,
        request,
        state,
        vector,
        identity=identity,
        entropy=entropy,
        context=context,
        fingerprint=fingerprint,
        rules=rules,
    )
