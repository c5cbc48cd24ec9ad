"""SecAgg+ server driver (Bell et al. 2020, with their PKI against a malicious server): routes
signed keys and encrypted shares, sums masked vectors, and collects just enough secrets to cancel
the masks of the survivors.

The server only ever holds public keys and signatures, ciphertexts, masked vectors, and -- after the
masked vectors are in -- the self-mask seeds of survivors and the pairwise mask keys that survivors
share with nodes that dropped. Nothing here is trusted by the sites: each checks what it is sent
(secagg_client/), so this driver is what an honest server does, not what keeps a site safe.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from secure_fed.crypto import secagg_channel as channel
from secure_fed.crypto.masking import MASK_KEY_BYTES, add_masks
from secure_fed.crypto.quantize import dequantise, error_bound, from_ring, ring_dtype
from secure_fed.crypto.secagg_channel import CONFIRMATION_BYTES
from secure_fed.crypto.secagg_graph import neighbour_graph
from secure_fed.crypto.secagg_identity import SIGNATURE_BYTES
from secure_fed.crypto.secagg_protocol import (
    CONSISTENCY,
    MASKED,
    NOISE_LAYER_INDEX,
    NOISE_LAYER_SEEDS,
    NOISE_SURVIVORS,
    SETUP,
    SHARES,
    UNMASK,
    RoundParams,
    SecAggAbort,
    SecAggSettings,
    VectorSum,
    round_params,
)
from secure_fed.crypto.secagg_shamir import combine_secret
from secure_fed.crypto.transport import Transport


def _require(alive: Sequence[int], params: RoundParams, phase: str) -> None:
    # every survivor needs `threshold` live neighbours to rebuild its seed, so fewer nodes is hopeless
    if len(alive) < params.threshold + 1:
        raise SecAggAbort(
            f"SecAgg+ aborted after {phase}: {len(alive)} sites left, at least {params.threshold + 1} needed "
            f"(threshold {params.threshold} of {params.degree} neighbours); no aggregate released"
        )


def _is_bytes_list(value: Any, count: int, size: int | None = None) -> bool:
    return (
        isinstance(value, list)
        and len(value) == count
        and all(isinstance(v, bytes) and (size is None or len(v) == size) for v in value)
    )


def _rebuild(owner: int, shares: list[bytes], params: RoundParams, what: str) -> bytes:
    if len(shares) < params.threshold:
        raise SecAggAbort(
            f"SecAgg+ aborted: only {len(shares)} of node {owner}'s {what} shares came back, "
            f"{params.threshold} needed; no aggregate released"
        )
    try:
        return combine_secret(shares, params.threshold)
    except ValueError as exc:
        raise SecAggAbort(f"SecAgg+ aborted: node {owner}'s {what} shares do not combine: {exc}") from exc


@dataclass(frozen=True)
class SetupPlan:
    """What the server fixes before any client hears of the round: the masking graph over the
    round's nodes, its parameters, and each node's setup request (parameters it will check and
    answer with its public keys). The requests can travel alone or inside another message — the
    training broadcast — so that key advertisement costs no round trip of its own."""

    round_id: int | str
    dim: int
    graph: dict[int, list[int]]
    params: RoundParams
    requests: dict[int, dict[str, Any]]


def plan_setup(
    node_ids: Sequence[int],
    dim: int,
    settings: SecAggSettings,
    round_id: int | str,
    rng: random.Random | None = None,
) -> SetupPlan:
    nodes = sorted(set(node_ids))
    params = round_params(len(nodes), dim, settings)
    graph = neighbour_graph(nodes, params.degree, rng or random.SystemRandom())
    requests = {
        u: {
            "round_id": round_id,
            "node_id": u,
            "neighbours": peers,
            "threshold": params.threshold,
            "num_nodes": len(graph),
            "dim": dim,
            "bits": params.bits,
            "clip": settings.clip,
            "modulus_bits": params.modulus_bits,
            **({"ring_input": True} if settings.ring_bits is not None else {}),
        }
        for u, peers in graph.items()
    }
    return SetupPlan(round_id=round_id, dim=dim, graph=graph, params=params, requests=requests)


@dataclass(frozen=True)
class AdvertisedKeys:
    """A node's setup reply: its two public keys for the round, the site it says it is, and that
    site's signature over them (checked by its peers, who hold the provisioned public keys)."""

    enc_pk: bytes
    mask_pk: bytes
    site: str
    signature: bytes


def advertised_keys(plan: SetupPlan, replies: Mapping[int, Mapping[str, Any]]) -> dict[int, AdvertisedKeys]:
    """The advertised keys of each planned node whose setup reply is complete and well-formed."""
    keys = {}
    for u, r in replies.items():
        pair = [r.get("enc_pk"), r.get("mask_pk")]
        site, signature = r.get("site"), r.get("key_sig")
        if (
            u in plan.requests
            and _is_bytes_list(pair, 2, channel.KEY_BYTES)
            and isinstance(site, str)
            and isinstance(signature, bytes)
            and len(signature) == SIGNATURE_BYTES
        ):
            keys[u] = AdvertisedKeys(pair[0], pair[1], site, signature)
    return keys


@dataclass(frozen=True)
class Advertised:
    """A setup that already happened (its requests went out with another message): the plan and
    the public keys that came back."""

    plan: SetupPlan
    keys: dict[int, AdvertisedKeys]


def _route_shares(
    transport: Transport,
    graph: dict[int, list[int]],
    keys: dict[int, AdvertisedKeys],
    round_id: int | str,
) -> dict[int, dict[str, Any]]:
    """Hand each node its live neighbours' signed public keys; return the masked-phase request of
    every node that shared its secrets, carrying the ciphertexts other such nodes addressed to it."""
    requests = {}
    for u in keys:
        peers = [v for v in graph[u] if v in keys]
        requests[u] = {
            "round_id": round_id,
            "peers": peers,
            "peer_enc_pk": [keys[v].enc_pk for v in peers],
            "peer_mask_pk": [keys[v].mask_pk for v in peers],
            "peer_site": [keys[v].site for v in peers],
            "peer_key_sig": [keys[v].signature for v in peers],
        }
    shared = []
    inbox: dict[int, list[tuple[int, bytes]]] = {}
    for u, r in transport.exchange(SHARES, requests).items():
        to, sealed = r.get("share_to"), r.get("share_ct")
        if u in requests and to == requests[u]["peers"] and _is_bytes_list(sealed, len(to)):
            shared.append(u)
            for v, blob in zip(to, sealed, strict=True):
                inbox.setdefault(v, []).append((u, blob))
    return {
        v: {
            "round_id": round_id,
            "share_from": [u for u, _ in inbox.get(v, [])],
            "share_ct": [blob for _, blob in inbox.get(v, [])],
        }
        for v in sorted(shared)
    }


def _collect_masked(
    transport: Transport, requests: dict[int, dict[str, Any]], dim: int, word: np.dtype
) -> tuple[np.ndarray, list[int]]:
    """Sum of the masked vectors in Z_{2^w}, and who sent one."""
    total: np.ndarray | None = None
    senders = []
    for v, r in transport.exchange(MASKED, requests).items():
        y = r.get("masked")
        if v in requests and isinstance(y, np.ndarray) and y.dtype == word and y.shape == (dim + 1,):
            # the first vector starts the sum (a copy: it may be a read-only view of the message),
            # one pass over 4 bytes a value fewer than adding it to zeros
            if total is None:
                total = np.array(y, dtype=word, order="C")
            else:
                np.add(total, y, out=total)  # wraps mod the word, a multiple of 2^m
            senders.append(v)
    return (np.zeros(dim + 1, dtype=word) if total is None else total), sorted(senders)


def _collect_survivor_confirmations(
    transport: Transport, survivors: list[int], keys: dict[int, AdvertisedKeys], round_id: int | str
) -> dict[int, dict[int, bytes]]:
    """The consistency step: show every survivor the one survivor set (nodes and the sites they
    signed their keys as) and collect each one's confirmations of it, addressed to its neighbours:
    recipient → {confirming node: tag}."""
    request = {
        "round_id": round_id,
        "survivors": survivors,
        "survivor_sites": [keys[u].site for u in survivors],
    }
    inbox: dict[int, dict[int, bytes]] = {}
    replied = []
    for u, r in transport.exchange(CONSISTENCY, {u: dict(request) for u in survivors}).items():
        to, tags = r.get("confirm_to"), r.get("confirmations")
        if u not in keys or not isinstance(to, list) or not _is_bytes_list(tags, len(to), CONFIRMATION_BYTES):
            continue
        replied.append(u)
        for v, tag in zip(to, tags, strict=True):
            if isinstance(v, int) and v in keys:
                inbox.setdefault(v, {})[u] = tag
    # only a node that confirmed the set itself will unmask
    return {v: inbox.get(v, {}) for v in sorted(replied)}


def _collect_unmask_shares(
    transport: Transport,
    partners: dict[int, list[int]],
    survivors: list[int],
    round_id: int | str,
    confirmations: dict[int, dict[int, bytes]] | None = None,
) -> tuple[dict[int, list[bytes]], dict[tuple[int, int], bytes]]:
    """Ask each survivor for its shares of surviving partners' self-mask seeds and for the pairwise
    mask keys it shares with partners that dropped. With `confirmations` (the consistency step's),
    only the survivors that confirmed are asked, each shown the confirmations addressed to it."""
    alive = set(survivors)

    def confirmed(u: int) -> dict[str, Any]:
        if confirmations is None:
            return {}
        mail = confirmations[u]
        # the survivor count the site will size its noise for: itself and each confirmation it is
        # shown; a site whose own count differs refuses (the server's word on m is checked)
        return {
            "confirmed_by": sorted(mail),
            "confirmations": [mail[v] for v in sorted(mail)],
            NOISE_SURVIVORS: len(mail) + 1,
        }

    requests = {
        u: {
            "round_id": round_id,
            "survived": [w for w in partners[u] if w in alive],
            "dropped": [w for w in partners[u] if w not in alive],
            **confirmed(u),
        }
        for u in survivors
        if confirmations is None or u in confirmations
    }
    seed_shares: dict[int, list[bytes]] = {u: [] for u in survivors}
    pair_keys: dict[tuple[int, int], bytes] = {}
    layers: dict[int, tuple[int, list[tuple[int, bytes]]]] = {}
    for u, r in transport.exchange(UNMASK, requests).items():
        asked = requests.get(u)
        if (
            asked is None
            or r.get("seed_of") != asked["survived"]
            or r.get("key_of") != asked["dropped"]
            or not _is_bytes_list(r.get("seed_shares"), len(asked["survived"]))
            or not _is_bytes_list(r.get("pair_keys"), len(asked["dropped"]), MASK_KEY_BYTES)
        ):
            continue
        for w, share in zip(asked["survived"], r["seed_shares"], strict=True):
            seed_shares[w].append(share)
        for v, key in zip(asked["dropped"], r["pair_keys"], strict=True):
            pair_keys[u, v] = key
        index, seeds = r.get(NOISE_LAYER_INDEX), r.get(NOISE_LAYER_SEEDS)
        if NOISE_SURVIVORS in asked and isinstance(index, list) and _is_bytes_list(seeds, len(index)):
            if r.get(NOISE_SURVIVORS) == asked[NOISE_SURVIVORS]:
                layers[u] = (asked[NOISE_SURVIVORS], list(zip(index, seeds, strict=True)))
    return seed_shares, pair_keys, layers


def _unmasking_keys(
    partners: dict[int, list[int]],
    survivors: list[int],
    seed_shares: dict[int, list[bytes]],
    pair_keys: dict[tuple[int, int], bytes],
    params: RoundParams,
    round_id: int | str,
) -> list[tuple[bytes, int]]:
    """(key, sign) of every mask left in the sum: survivors' self masks, and the pairwise masks
    survivors share with partners that dropped after sharing their secrets."""
    masks = [
        (channel.self_mask_key(_rebuild(u, seed_shares[u], params, "self-mask seed"), round_id), -1)
        for u in survivors
    ]
    alive = set(survivors)
    for u in survivors:
        for v in partners[u]:
            if v in alive:
                continue
            if (u, v) not in pair_keys:
                # only u and v ever knew this key; without it u's vector cannot be unmasked
                raise SecAggAbort(
                    f"SecAgg+ aborted: node {u} did not reveal its mask with dropped node {v}; "
                    "no aggregate released"
                )
            # u added +PRG(s_uv) if u < v, else -PRG(s_uv); take that back
            masks.append((pair_keys[u, v], -1 if u < v else +1))
    return masks


def run_secagg(
    transport: Transport,
    node_ids: Sequence[int],
    dim: int,
    settings: SecAggSettings,
    round_id: int | str,
    rng: random.Random | None = None,
    advertised: Advertised | None = None,
) -> VectorSum:
    """Securely sum the clients' `dim`-vectors; raise `SecAggAbort` if too many drop out.

    With `advertised`, the setup round trip already happened inside another message: its plan is
    used as it stands (graph, parameters) and only the keys of `node_ids` count."""
    nodes = sorted(set(node_ids))
    if advertised is None:
        plan = plan_setup(nodes, dim, settings, round_id, rng)
        keys = advertised_keys(plan, transport.exchange(SETUP, plan.requests))
    else:
        plan = advertised.plan
        if plan.dim != dim or plan.round_id != round_id or not set(nodes) <= set(plan.graph):
            raise ValueError("the advertised SecAgg+ setup was planned for another round, size or node set")
        keys = {u: key for u, key in advertised.keys.items() if u in nodes}
    graph, params = plan.graph, plan.params
    _require(list(keys), params, SETUP)
    masked_requests = _route_shares(transport, graph, keys, round_id)
    _require(list(masked_requests), params, SHARES)
    total, survivors = _collect_masked(transport, masked_requests, dim, ring_dtype(params.modulus_bits))
    _require(survivors, params, MASKED)

    # partners[v]: the nodes whose shares v was routed, i.e. whom v masked with
    partners = {v: r["share_from"] for v, r in masked_requests.items()}
    confirmations = None
    if settings.checks_survivors:
        confirmations = _collect_survivor_confirmations(transport, survivors, keys, round_id)
        _require(sorted(confirmations), params, CONSISTENCY)
    seed_shares, pair_keys, layers = _collect_unmask_shares(
        transport, partners, survivors, round_id, confirmations
    )
    add_masks(total, _unmasking_keys(partners, survivors, seed_shares, pair_keys, params, round_id))

    if settings.ring_bits is not None:
        # the sites' own integer encodings: the residues mod 2^m are the result, their mechanism
        # decodes them (the last coordinate carries no clipped count in this mode)
        residues = np.asarray(total[:dim], dtype=np.uint64) & np.uint64((1 << params.modulus_bits) - 1)
        return VectorSum(
            total=residues,
            survivors=survivors,
            dropped=sorted(set(nodes) - set(survivors)),
            noise_layers=layers,
        )
    signed = from_ring(total, params.modulus_bits)
    return VectorSum(
        total=dequantise(signed[:dim], settings.clip, params.bits),
        survivors=survivors,
        dropped=sorted(set(nodes) - set(survivors)),
        quantisation_bound=error_bound(len(survivors), settings.clip, params.bits),
        clipped_fraction=float(signed[dim]) / (len(survivors) * dim) if dim else 0.0,
    )
