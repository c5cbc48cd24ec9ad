"""SecAgg+ client: one pure step per phase, with all state in a flat dict of wire-safe values.

The server may send anything at all, so a client checks every instruction against what it already
agreed to and what it can verify, and refuses (`SecAggRefused`) rather than reveal more than the
protocol allows:

- its peers' public keys must be signed by distinct provisioned sites (`SecAggIdentity`), enough of
  them for the Shamir threshold: the server cannot stand in for a neighbour or count one twice;
- its update takes part in one secure sum only: once masked, the same update is refused for any
  later setup or masked phase, even after the server has restarted the protocol, so no two sums
  can differ by exactly this site's update; with an `upload_id` (the site's training round) so is
  any other update made for the same round: without DP a global moved by one ulp retrains the
  round into new bytes, and the two sums' difference was one site's update;
- with `members` (the sites of a server-chosen factor vector) its signed peers and itself must be
  exactly those sites: a vector padded with sites that never sum weighs one site above the rest;
- with the site's own `clip` and `bits`, the server's quantisation must be the site's;
- it masks only with a threshold of partners or more, answers one unmask request per round, and
  about each partner reveals either that partner's self-mask share (survived) or the pairwise mask
  key the two share (dropped), never both; its own pairwise keys only while a threshold of its
  partners survive. With the threshold at `collusion_safe_threshold`, the server, even with one
  colluding site, is then always at least one mask short of any single site's update
  (docs/THREAT_MODEL_secagg.md, tests/adversarial/test_secagg_collusion.py).

A dropped site's masks are cancelled with the pairwise keys its surviving partners reveal, not, as
in Bonawitz et al. (2017) and Bell et al. (2020), by rebuilding its mask key from Shamir shares: a
server that calls a live site "dropped" would get that key and with it every pairwise mask of the
site at once, while each partner's self-mask share opened the rest (the attack in
test_secagg_collusion.py, which needed no colluder). The price: a survivor that also goes silent
before revealing its key with a dropped partner ends the round with no aggregate.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from cryptography.exceptions import InvalidTag

from secure_fed.crypto import secagg_channel as channel
from secure_fed.crypto.masking import add_masks, keystream_words
from secure_fed.crypto.quantize import modulus_bits, quantise_to_ring, ring_dtype
from secure_fed.crypto.secagg_identity import (
    SIGNATURE_BYTES,
    SecAggIdentity,
    confirmation_statement,
    key_statement,
    survivors_statement,
)
from secure_fed.crypto.secagg_protocol import (
    CONSISTENCY,
    MASKED,
    SETUP,
    SHARES,
    UNMASK,
    SecAggRefused,
    ShareRejected,
    collusion_safe_threshold,
    share_associated_data,
    site_threshold,
    word_bits,
)
from secure_fed.crypto.secagg_shamir import SECRET_BYTES, SHARE_BYTES, split_secret

State = dict[str, Any]
Entropy = Callable[[int], bytes]


@dataclass(frozen=True)
class SiteQuantisation:
    """The site's own SecAgg+ quantisation (its policy's `secagg.clip`, `secagg.bits`): the server's
    must match. clip None: the site sets none and takes the server's (tests of the protocol alone)."""

    clip: float | None = None
    bits: int | None = None  # None with a clip: the most bits a 32-bit ring holds (`word_bits`)


@dataclass(frozen=True)
class SiteRules:
    """What a site decides itself about a secure sum, whatever the server sends.

    quantisation: its clip and bits. members: the sites its input was scaled for (a factor
    vector's), which must be exactly its signed peers and itself; () = no such vector. upload_id:
    what its update was made for (its training round): one secure sum per id, whatever the bytes.
    ring_bits: set, its input is already integers mod 2^ring_bits (a distributed-DP noise share),
    masked as it is, and the round's ring must be exactly that. honest_min: h, the fewest sites
    (itself included) its signed view of the survivors must hold before it reveals anything that
    unmasks a sum: its share carries only part of the noise, which h sites' shares complete.
    colluders: c, the colluding neighbours its Shamir threshold must hold against (dp.colluders).
    """

    quantisation: SiteQuantisation = field(default_factory=SiteQuantisation)
    members: tuple[str, ...] = ()
    upload_id: str | None = None
    ring_bits: int | None = None
    honest_min: int | None = None
    colluders: int = 1


# Updates this site has sent masked, as "fingerprint@round": carried over every setup, which
# otherwise starts the state afresh, so restarting the protocol cannot buy a second sum.
MASKED_UPLOADS = "masked_uploads"

# what a client forgets once its masked vector is out: with them, a later leak of its state would
# let anyone strip its masks. The pairwise keys with its partners stay until the unmask request
# (a dropped partner's mask is cancelled with them) and go with it.
_SECRETS = ("enc_sk", "mask_sk", "seed", "peer_enc_pk", "peer_mask_pk", "peer_channel_key")
# this round's own public keys, kept from the setup to the share distribution (which checks no peer
# relays one of them) so they need not be derived again from the secrets
_OWN_PUBLIC = ("own_enc_pk", "own_mask_pk")

# the phases a client must have just completed before it accepts each request (an unmask follows
# the consistency step where the site requires one: `SiteRules.honest_min`)
_AFTER = {SHARES: (SETUP,), MASKED: (SHARES,), CONSISTENCY: (MASKED,), UNMASK: (MASKED, CONSISTENCY)}
# the phases that sign (setup, consistency) or check (share distribution, an unmask after the
# consistency step) identities
IDENTIFIED_PHASES = frozenset({SETUP, SHARES, CONSISTENCY, UNMASK})

# what one SecAgg+ round keeps in the state; a setup replaces exactly these and carries anything
# else (the record of masked updates, other protocols' records in the same state) to the new round
_ROUND_KEYS = frozenset(
    {
        "stage",
        "round_id",
        "node_id",
        "neighbours",
        "threshold",
        "modulus_bits",
        "clip",
        "bits",
        "enc_sk",
        "mask_sk",
        "own_enc_pk",
        "own_mask_pk",
        "seed",
        "upload_fingerprint",
        "context",
        "members",
        "ring_input",
        "upload_id",
        "peers",
        "peer_enc_pk",
        "peer_mask_pk",
        "peer_channel_key",
        "peer_confirm_key",
        "peer_sites",
        "partners",
        "held_seed",
        "pair_keys",
        "survivors",
        "survivor_sites",
        "confirmed_nodes",
    }
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


def _strs(request: Mapping[str, Any], key: str, count: int) -> list[str]:
    value = request.get(key)
    if not isinstance(value, list) or len(value) != count or not all(isinstance(v, str) for v in value):
        raise SecAggRefused(f"request field {key!r} must be a list of {count} strings")
    return value


def _round_id(request: Mapping[str, Any]) -> int | str:
    value = request.get("round_id")
    if not isinstance(value, int | str) or isinstance(value, bool):
        raise SecAggRefused("request field 'round_id' must be an int or str")
    return value


def _check_order(phase: str, request: Mapping[str, Any], state: State) -> None:
    if state.get("stage") not in _AFTER[phase]:
        raise SecAggRefused(
            f"{phase} arrived after {state.get('stage') or 'nothing'}, expected after "
            f"{' or '.join(_AFTER[phase])}"
        )
    if _round_id(request) != state["round_id"]:
        raise SecAggRefused(
            f"{phase} is for round {request.get('round_id')!r}, this client is in {state['round_id']!r}"
        )


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


def secagg_client_step(
    phase: str,
    request: Mapping[str, Any],
    state: Mapping[str, Any],
    vector: np.ndarray,
    *,
    identity: SecAggIdentity | None,
    entropy: Entropy = os.urandom,
    context: bytes = b"",
    fingerprint: str | None = None,
    rules: SiteRules | None = None,
) -> tuple[dict[str, Any], State]:
    """Run one SecAgg+ phase as the site `identity`; `entropy` is injectable only so tests can be
    deterministic. `rules`: what the site itself sets (its quantisation, the factor vector's sites,
    the id of the update's training round); the setup reads members and quantisation. The setup
    (which signs this site's keys) and the share distribution (which checks the peers') are
    refused without an identity: SecAgg+ never runs unauthenticated. `context` (read at the setup
    only) is signed with the keys: only neighbours that signed the same context
    are accepted. `fingerprint`, when given, is `upload_fingerprint(vector)` of a read-only
    `vector`, made by the caller once for the update's lifetime."""
    if phase != SETUP and phase not in _AFTER:
        raise SecAggRefused(f"unknown SecAgg+ phase {phase!r}")
    state = dict(state)
    rules = rules or SiteRules()
    _check_upload_id(rules.upload_id)
    if phase in (SETUP, SHARES, CONSISTENCY) and identity is None:
        raise SecAggRefused("SecAgg+ needs this site's identity: its signing key and the sites' public keys")
    if phase == SETUP:
        assert identity is not None
        return _setup(request, state, vector, identity, entropy, context, fingerprint, rules)
    _check_order(phase, request, state)
    if phase == SHARES:
        assert identity is not None
        return _shares(request, state, identity, entropy)
    if phase == MASKED:
        return _masked(request, state, vector, entropy, fingerprint, rules.upload_id)
    if phase == CONSISTENCY:
        assert identity is not None
        return _consistency(request, state, identity, rules.honest_min)
    return _unmask(request, state, identity, rules.honest_min)
