"""Consistency and unmask: confirm one survivor set a round, then reveal, about each partner, either
its self-mask share or the pairwise key the two share, never both."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from secure_fed.crypto import secagg_channel as channel
from secure_fed.crypto.secagg_client.fields import _blobs, _ids, _strs
from secure_fed.crypto.secagg_client.state import State
from secure_fed.crypto.secagg_identity import (
    SecAggIdentity,
    confirmation_statement,
    survivors_statement,
)
from secure_fed.crypto.secagg_protocol import (
    CONSISTENCY,
    UNMASK,
    SecAggRefused,
)


def _consistency(
    request: Mapping[str, Any], state: State, identity: SecAggIdentity, honest_min: int | None
) -> tuple[dict[str, Any], State]:
    """Confirm the round's survivor set as the server shows it, once: the only set this site will
    unmask for. It confirms the set to each neighbour in it with an HMAC under the key the two
    share (only they hold it: their keys were signed at the setup) over the set, this site as the
    sender and that neighbour as the recipient, so a tag is worth nothing but at its recipient
    (`confirmation_statement`). Every honest site confirms
    one set a round, so a server that shows sites different sets cannot gather h confirmations of
    two of them from fewer than 2(h − c) honest sites."""
    nodes = _ids(request, "survivors")
    sites = _strs(request, "survivor_sites", len(nodes))
    me = state["node_id"]
    named = dict(zip(nodes, sites, strict=True))
    if named.get(me) != identity.site:
        raise SecAggRefused(f"the survivor set does not name this site ({identity.site!r}) as node {me}")
    if len(set(sites)) != len(sites):
        raise SecAggRefused("the survivor set names a site twice")
    unknown = sorted(s for s in sites if s != identity.site and s not in identity.peer_public_keys)
    if unknown:
        raise SecAggRefused(f"the survivor set names sites that are not provisioned: {', '.join(unknown)}")
    _check_named_as_signed(named, state, identity)
    if honest_min is not None and len(nodes) < honest_min:
        raise SecAggRefused(
            f"distributed DP: the server says {len(nodes)} sites survived (nodes {sorted(nodes)}, this one "
            f"included), fewer than h = {honest_min} (dp.honest_min); nothing confirmed"
        )
    order = sorted(range(len(nodes)), key=nodes.__getitem__)
    nodes, sites = [nodes[i] for i in order], [sites[i] for i in order]
    context = state.get("context", b"")
    statement = survivors_statement(identity.run_id, state["round_id"], nodes, sites, context)
    keys = dict(zip(state["peers"], state["peer_confirm_key"], strict=True))
    site_of = dict(zip(state["peers"], state["peer_sites"], strict=True))
    to = [peer for peer in state["peers"] if peer in named]
    tags = [
        channel.confirm(keys[p], confirmation_statement(statement, me, identity.site, p, site_of[p]))
        for p in to
    ]
    state = {**state, "stage": CONSISTENCY, "survivors": nodes, "survivor_sites": sites}
    return {"confirm_to": to, "confirmations": tags}, state


def _check_named_as_signed(named: Mapping[int, str], state: State, identity: SecAggIdentity) -> None:
    """Refuse a survivor set that names a neighbour's node as another site, or a neighbour's site
    (or this one) under any node id but the one it signed its keys as. A site listed under a made-up
    id is a site the sum does not hold: every site would log the same site names while the server
    unmasked sums over fewer of them (tests/adversarial/test_survivor_reflection.py)."""
    signed_as = dict(zip(state["peer_sites"], state["peers"], strict=True))
    signed_as[identity.site] = state["node_id"]
    for node, site in named.items():
        if site in signed_as and signed_as[site] != node:
            raise SecAggRefused(
                f"the survivor set names site {site!r} as node {node}; it signed its keys as node "
                f"{signed_as[site]}"
            )
    for peer, site in zip(state["peers"], state["peer_sites"], strict=True):
        if peer in named and named[peer] != site:
            raise SecAggRefused(
                f"the survivor set names node {peer} as site {named[peer]!r}, it signed its keys as {site!r}"
            )


def _check_survivor_confirmations(
    request: Mapping[str, Any], state: State, identity: SecAggIdentity | None, honest_min: int | None
) -> set[int]:
    """The unmask request must carry confirmations of the set this site confirmed from at least h
    of its members (this site counts itself), each an HMAC under the key this site shares with the
    neighbour it names. Returns the nodes whose confirmations verified, this one included: each
    honest one of them is in the unmasked sum (its pairwise mask with this site is revealed by
    neither of the two), which is what a caller may size anything on."""
    if identity is None:
        raise SecAggRefused("checking the survivor confirmations needs this site's identity (its run)")
    nodes, sites = state["survivors"], state["survivor_sites"]
    confirmed_by = _ids(request, "confirmed_by")
    tags = _blobs(request, "confirmations", len(confirmed_by), channel.CONFIRMATION_BYTES)
    keys = dict(zip(state["peers"], state["peer_confirm_key"], strict=True))
    site_of = dict(zip(state["peers"], state["peer_sites"], strict=True))
    context = state.get("context", b"")
    statement = survivors_statement(identity.run_id, state["round_id"], nodes, sites, context)
    me = state["node_id"]
    confirmed = {me}
    for node, tag in zip(confirmed_by, tags, strict=True):
        if node not in nodes or node not in keys:
            raise SecAggRefused(f"node {node} is no neighbour of this site in the survivor set it confirmed")
        # from `node` to this site: this site's own tags to `node` (the other direction) never verify
        expected = confirmation_statement(statement, node, site_of[node], me, identity.site)
        if not channel.confirms(keys[node], expected, tag):
            raise SecAggRefused(
                f"node {node}'s confirmation is not its own of the survivor set this site confirmed, to "
                "this site (the server showed the sites different survivor sets, reflected this site's "
                "own confirmation, or forged it)"
            )
        confirmed.add(node)
    needed = honest_min or 1
    if len(confirmed) < needed:
        raise SecAggRefused(
            f"distributed DP: {len(confirmed)} sites (this one included) confirmed the survivor set this "
            f"site confirmed, fewer than h = {needed} (dp.honest_min); no unmasking share sent"
        )
    return confirmed


def _unmask(
    request: Mapping[str, Any], state: State, identity: SecAggIdentity | None, honest_min: int | None = None
) -> tuple[dict[str, Any], State]:
    survived = _ids(request, "survived")
    dropped = _ids(request, "dropped")
    partners, t = state["partners"], state["threshold"]
    confirmed: set[int] = set()
    if state["stage"] == CONSISTENCY:
        confirmed = _check_survivor_confirmations(request, state, identity, honest_min)
        if set(survived) != set(partners) & set(state["survivors"]):
            raise SecAggRefused(
                "the unmask request's survivors are not the survivor set this site confirmed: "
                f"told {sorted(survived)}, confirmed {sorted(set(partners) & set(state['survivors']))}"
            )
    elif honest_min is not None:
        # the list below is the server's word to this site alone: under distributed DP it counts
        # only once h sites have confirmed the same set (the consistency step)
        raise SecAggRefused(
            "distributed DP: an unmask request needs the round's confirmed survivor set first "
            f"({CONSISTENCY}); no unmasking share sent"
        )
    if set(survived) & set(dropped):
        raise SecAggRefused(
            f"nodes {sorted(set(survived) & set(dropped))} are listed as both survived and dropped"
        )
    if set(survived) | set(dropped) != set(partners):
        raise SecAggRefused("unmask must name each node this client masked with, and only those")
    if honest_min is not None and len(survived) + 1 < honest_min:
        # partners are distinct signed sites (checked at the share distribution): this is the
        # site's own view, whatever the server counts. Below h the shares in the sum may not carry
        # the noise the accounting assumes, so the server gets no secret that unmasks it.
        view = sorted([*survived, state["node_id"]])
        raise SecAggRefused(
            f"distributed DP: the server says {len(view)} sites survived (nodes {view}, this one "
            f"included), fewer than h = {honest_min} (dp.honest_min); no unmasking share sent"
        )
    if len(survived) < t:
        raise SecAggRefused(
            f"only {len(survived)} of this node's partners are said to have survived, {t} needed: "
            "revealing its pairwise keys with all the others could leave its own input unmasked"
        )
    seed = dict(zip(partners, state["held_seed"], strict=True))
    pair = dict(zip(partners, state["pair_keys"], strict=True))
    reply = {
        "seed_of": survived,
        "seed_shares": [seed[v] for v in survived],
        "key_of": dropped,
        "pair_keys": [pair[v] for v in dropped],
    }
    # forget the shares and keys: a second unmask request in this round finds nothing to reveal
    done = {k: v for k, v in state.items() if k not in ("held_seed", "pair_keys", "peer_confirm_key")}
    return reply, {**done, "stage": UNMASK, "confirmed_nodes": sorted(confirmed)}
