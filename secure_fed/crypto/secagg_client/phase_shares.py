"""Share distribution: check each peer's signed keys, then seal a Shamir share of the self-mask seed
to each; and the opening of the peers' shares the masked phase starts with."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from cryptography.exceptions import InvalidTag

from secure_fed.crypto import secagg_channel as channel
from secure_fed.crypto.secagg_client.fields import _blobs, _ids, _strs
from secure_fed.crypto.secagg_client.state import Entropy, State
from secure_fed.crypto.secagg_identity import (
    SIGNATURE_BYTES,
    SecAggIdentity,
    key_statement,
)
from secure_fed.crypto.secagg_protocol import (
    SHARES,
    SecAggRefused,
    ShareRejected,
    share_associated_data,
)
from secure_fed.crypto.secagg_shamir import SHARE_BYTES, split_secret


def _check_identities(
    request: Mapping[str, Any],
    state: State,
    peers: list[int],
    enc_pks: list[bytes],
    mask_pks: list[bytes],
    identity: SecAggIdentity,
) -> list[str]:
    """Refuse unless every peer is a distinct provisioned site (not this one) that signed the keys
    relayed for it, for this node id, this round and this run, and enough of them for the threshold;
    return the peers' sites."""
    sites = _strs(request, "peer_site", len(peers))
    signatures = _blobs(request, "peer_key_sig", len(peers), SIGNATURE_BYTES)
    seen: dict[str, int] = {}
    relayed = zip(peers, sites, enc_pks, mask_pks, signatures, strict=True)
    for peer, site, enc_pk, mask_pk, signature in relayed:
        if site == identity.site:
            raise SecAggRefused(f"repeated identity: node {peer} claims to be this site ({site!r})")
        if site in seen:
            raise SecAggRefused(f"repeated identity: site {site!r} appears as nodes {seen[site]} and {peer}")
        if site not in identity.peer_public_keys:
            raise SecAggRefused(f"node {peer} claims to be site {site!r}, which is not a provisioned site")
        statement = key_statement(
            identity.run_id, state["round_id"], peer, site, enc_pk, mask_pk, state.get("context", b"")
        )
        if not identity.signed_by(site, signature, statement):
            raise SecAggRefused(
                f"the keys relayed for node {peer} are not signed by site {site!r} for this node, "
                "round, run and context (forged, altered, replayed, or the server showed the sites "
                "different factors)"
            )
        seen[site] = peer
    members = set(state.get("members") or ())
    if members and set(seen) | {identity.site} != members:
        missing, extra = sorted(members - set(seen) - {identity.site}), sorted(set(seen) - members)
        raise SecAggRefused(
            "the round's signed peers and this site are not the sites of the factor vector its input "
            f"was scaled for (missing: {', '.join(missing) or 'none'}; "
            f"not in it: {', '.join(extra) or 'none'}): a vector padded with sites that never sum "
            "weighs one site above the rest"
        )
    t = state["threshold"]
    if len(seen) + 1 < t + 1:
        raise SecAggRefused(
            f"only {len(seen) + 1} distinct sites (this one included) in this node's neighbourhood; "
            f"the Shamir threshold {t} needs {t + 1}"
        )
    return sites


def _shares(
    request: Mapping[str, Any], state: State, identity: SecAggIdentity, entropy: Entropy
) -> tuple[dict[str, Any], State]:
    peers = _ids(request, "peers")
    enc_pks = _blobs(request, "peer_enc_pk", len(peers), channel.KEY_BYTES)
    mask_pks = _blobs(request, "peer_mask_pk", len(peers), channel.KEY_BYTES)
    me, t = state["node_id"], state["threshold"]
    if not set(peers) <= set(state["neighbours"]):
        raise SecAggRefused(
            f"peers {sorted(set(peers) - set(state['neighbours']))} are not this node's neighbours"
        )
    peer_sites = _check_identities(request, state, peers, enc_pks, mask_pks, identity)
    all_keys = [
        *enc_pks,
        *mask_pks,
        state["own_enc_pk"],
        state["own_mask_pk"],
    ]
    if len(set(all_keys)) != len(all_keys):
        raise SecAggRefused("public keys are not all distinct")
    seed_shares = split_secret(state["seed"], t, len(peers))
    # kept for opening the peers' shares in the masked phase: one key agreement per pair, not two
    keys = _agreed(lambda pks: channel.channel_keys(state["enc_sk"], pks), peers, enc_pks)
    sealed = [
        channel.seal(key, share_associated_data(state["round_id"], me, peer), share, entropy)
        for peer, key, share in zip(peers, keys, seed_shares, strict=True)
    ]
    state = {
        **state,
        "stage": SHARES,
        "peers": peers,
        "peer_enc_pk": enc_pks,
        "peer_mask_pk": mask_pks,
        "peer_channel_key": keys,
        # who each neighbour is: a survivor set naming one of them as another site is refused
        "peer_sites": peer_sites,
        # what the pair confirms the survivor set with (kept past the masked phase, to the unmask)
        "peer_confirm_key": channel.confirmation_keys(keys),
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


def _open_shares(request: Mapping[str, Any], state: State) -> tuple[list[int], list[bytes]]:
    senders = _ids(request, "share_from")
    sealed = _blobs(request, "share_ct", len(senders))
    channel_key = dict(zip(state["peers"], state["peer_channel_key"], strict=True))
    if not set(senders) <= set(channel_key):
        raise ShareRejected(
            f"shares from {sorted(set(senders) - set(channel_key))}, who are not this node's peers"
        )
    seed_shares = []
    for sender, blob in zip(senders, sealed, strict=True):
        aad = share_associated_data(state["round_id"], sender, state["node_id"])
        try:
            plain = channel.open_sealed(channel_key[sender], aad, blob)
        except InvalidTag as exc:
            raise ShareRejected(
                f"share from node {sender} failed authentication (tampered or replayed)"
            ) from exc
        if len(plain) != SHARE_BYTES:
            raise ShareRejected(f"share from node {sender} has the wrong length")
        seed_shares.append(plain)
    return senders, seed_shares
