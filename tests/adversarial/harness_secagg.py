"""A scripted malicious SecAgg+ server facing the real SecAgg+ client code.

Honest sites run `secure_fed.crypto.vectors.client_step` with their own provisioned identity and
keep their state as Flower's `context.state` would (through the wire codec, between every step);
the server sees only their replies. The server may send each of them anything, and it plays the
parties it controls itself: Sybils (nodes it made up, with keys it chose and whatever signature it
can produce) and a colluding site (a real provisioned site that gives the server everything it
knows, its signing key included). `honest_*` helpers build what our own server would send, so an
attack starts from a legitimate round and departs from it where it likes. Later attacks are new
tests, not new plumbing.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from secure_fed.crypto import secagg_channel as channel
from secure_fed.crypto.masking import add_masks
from secure_fed.crypto.quantize import dequantise, from_ring, ring_dtype
from secure_fed.crypto.secagg_client import SiteRules
from secure_fed.crypto.secagg_identity import SecAggIdentity, key_statement
from secure_fed.crypto.secagg_protocol import MASKED, SETUP, SHARES, SecAggRefused, SecAggSettings
from secure_fed.crypto.secagg_server import SetupPlan, plan_setup
from secure_fed.crypto.secagg_shamir import combine_secret
from secure_fed.crypto.transport import decode_payload, encode_payload
from secure_fed.crypto.vectors import client_step

SETTINGS = SecAggSettings(clip=8.0, bits=24)
DIM = 1000
RUN_ID = "run-adversarial"
Payload = dict[str, Any]


class Pki:
    """What `secure-fed keys init` hands out: each site its own signing key, everyone the sites'
    public keys. The server gets none of the sites' private keys."""

    def __init__(self, sites: Iterable[str]) -> None:
        self.keys = {site: Ed25519PrivateKey.generate() for site in sites}
        self.public = {site: key.public_key() for site, key in self.keys.items()}

    def identity(self, site: str) -> SecAggIdentity:
        return SecAggIdentity(site, RUN_ID, self.keys[site], self.public)


@dataclass
class Site:
    """One party to the round. `honest` sites are driven only through `send`; the server may read
    the state (the secrets) of the parties it controls, and only theirs."""

    node: int
    identity: SecAggIdentity
    vector: np.ndarray
    honest: bool = True
    fingerprint: str | None = None  # made once per update by the caller, as SiteRuntime does
    rules: SiteRules | None = None  # what the site sets itself (ring input, h), as SiteRuntime does
    _state: bytes = field(default_factory=lambda: encode_payload({}))

    def send(self, phase: str, request: Payload) -> Payload:
        """The real client step on `request` (raises what it raises: SecAggRefused is a refusal)."""
        delivered = decode_payload(encode_payload(request))
        reply, state = client_step(
            phase,
            delivered,
            decode_payload(self._state),
            self.vector,
            identity=self.identity,
            fingerprint=self.fingerprint,
            rules=self.rules,
        )
        self._state = encode_payload(state)
        return decode_payload(encode_payload(reply))

    def ask(self, phase: str, request: Payload) -> Payload | None:
        """What the site would answer to `request` now, or None if it refuses, leaving its state as
        it is: one of many hypothetical requests, each in a world of its own (a site answers only one)."""
        before = self._state
        try:
            return self.send(phase, request)
        except SecAggRefused:  # a refusal reveals nothing; any other error is a bug and surfaces
            return None
        finally:
            self._state = before

    @property
    def secrets(self) -> Payload:
        if self.honest:
            raise PermissionError(f"node {self.node} is honest: its state never leaves it")
        return decode_payload(self._state)

    @property
    def state_for_checks(self) -> Payload:
        """The state, for a test's own assertions about the site (never for an attack)."""
        return decode_payload(self._state)


def keys_request(round_id: int | str, peers: list[int], keys: Mapping[int, Payload]) -> Payload:
    """A share-distribution request relaying the setup replies `keys[p]` as they came."""
    return {
        "round_id": round_id,
        "peers": peers,
        "peer_enc_pk": [keys[p]["enc_pk"] for p in peers],
        "peer_mask_pk": [keys[p]["mask_pk"] for p in peers],
        "peer_site": [keys[p]["site"] for p in peers],
        "peer_key_sig": [keys[p]["key_sig"] for p in peers],
    }


def sybil_keys(
    round_id: int | str,
    node: int,
    site: str,
    signer: Ed25519PrivateKey | None,
    run_id: str = RUN_ID,
    context: bytes = b"",
) -> tuple[Payload, Payload]:
    """Keys the server makes up for node `node` claiming to be `site`, signed by `signer` (None:
    unsigned, 64 zero bytes); returns (the advertised keys, their secrets)."""
    enc_sk, enc_pk = channel.new_keypair(random.Random(f"enc|{node}").randbytes)
    mask_sk, mask_pk = channel.new_keypair(random.Random(f"mask|{node}").randbytes)
    statement = key_statement(run_id, round_id, node, site, enc_pk, mask_pk, context)
    signature = signer.sign(statement) if signer else bytes(64)
    return (
        {"enc_pk": enc_pk, "mask_pk": mask_pk, "site": site, "key_sig": signature},
        {"enc_sk": enc_sk, "mask_sk": mask_sk},
    )


def inbox(shares: Mapping[int, Payload], recipient: int) -> list[tuple[int, bytes]]:
    return [
        (sender, ct)
        for sender, reply in shares.items()
        for to, ct in zip(reply["share_to"], reply["share_ct"], strict=True)
        if to == recipient
    ]


def masked_request(round_id: int | str, mail: list[tuple[int, bytes]]) -> Payload:
    return {"round_id": round_id, "share_from": [u for u, _ in mail], "share_ct": [ct for _, ct in mail]}


def unmask_request(round_id: int | str, survived: list[int], dropped: list[int]) -> Payload:
    return {"round_id": round_id, "survived": survived, "dropped": dropped}


def consistency_request(round_id: int | str, survivors: list[int], keys: Mapping[int, Payload]) -> Payload:
    """The consistency step's request showing `survivors` as the round's survivor set, each node
    named as the site its setup reply `keys[node]` signed as."""
    sites = [keys[u]["site"] for u in survivors]
    return {"round_id": round_id, "survivors": survivors, "survivor_sites": sites}


@dataclass
class Transcript:
    """What the server holds after an honest round's masked phase."""

    plan: SetupPlan
    keys: dict[int, Payload]
    shares: dict[int, Payload]
    partners: dict[int, list[int]]
    masked: dict[int, np.ndarray]


def honest_until_unmask(
    sites: Mapping[int, Site],
    round_id: int | str = 1,
    seed: int = 0,
    withhold: Iterable[tuple[int, int]] = (),
    settings: SecAggSettings = SETTINGS,
) -> Transcript:
    """Setup, share distribution and masked input as our server runs them, except that the shares
    in `withhold` ((sender, recipient) pairs) are not delivered."""
    dim = len(next(iter(sites.values())).vector)
    plan = plan_setup(sorted(sites), dim, settings, round_id, random.Random(seed))
    keys = {n: site.send(SETUP, plan.requests[n]) for n, site in sites.items()}
    shares = {n: site.send(SHARES, keys_request(round_id, plan.graph[n], keys)) for n, site in sites.items()}
    held_back = set(withhold)
    mail = {n: [(u, ct) for u, ct in inbox(shares, n) if (u, n) not in held_back] for n in sites}
    replies = {n: site.send(MASKED, masked_request(round_id, mail[n])) for n, site in sites.items()}
    return Transcript(
        plan=plan,
        keys=keys,
        shares=shares,
        partners={n: [u for u, _ in mail[n]] for n in sites},
        masked={n: r["masked"] for n, r in replies.items()},
    )


@dataclass
class Learned:
    """What the server and its colluders can compute about the honest sites' inputs from one set of
    unmask answers: the sums over `sets` (each a set of honest nodes whose masks all cancel or are
    known), and the secrets that got them there."""

    seeds: dict[int, list[bytes]]
    pair_keys: dict[tuple[int, int], bytes]
    sets: list[frozenset[int]]

    def smallest_containing(self, node: int) -> frozenset[int] | None:
        found = [s for s in self.sets if node in s]
        return min(found, key=len) if found else None


def what_is_learned(
    transcript: Transcript,
    sites: Mapping[int, Site],
    answers: Mapping[int, Payload | None],
) -> Learned:
    """Combine the honest sites' unmask `answers` (None: no answer) with everything the colluding
    sites know, and find the sets of honest sites whose summed input the server can compute.

    Every mask is an independent uniform word stream, so a combination of masked inputs reveals
    something only if each mask in it is known or cancels: a self mask appears in one input only
    (it must be known: a threshold of seed shares), a pairwise mask in the two partners' inputs with
    opposite signs (both in the set, or the key known). The learnable sums are therefore over
    unions of the components that unknown pairwise keys form among honest sites."""
    t = transcript.plan.params.threshold
    honest = sorted(n for n, site in sites.items() if site.honest)
    colluders = [n for n, site in sites.items() if not site.honest]
    seeds: dict[int, list[bytes]] = {n: [] for n in honest}
    pair_keys: dict[tuple[int, int], bytes] = {}
    for c in colluders:
        secrets = sites[c].secrets
        for owner, share in zip(secrets["partners"], secrets["held_seed"], strict=True):
            if owner in seeds:
                seeds[owner].append(share)
        for other, key in zip(secrets["partners"], secrets["pair_keys"], strict=True):
            pair_keys[c, other] = pair_keys[other, c] = key
    for u, answer in answers.items():
        if answer is None:
            continue
        for owner, share in zip(answer["seed_of"], answer["seed_shares"], strict=True):
            if owner in seeds:  # the colluders' own seeds they know anyway
                seeds[owner].append(share)
        for other, key in zip(answer["key_of"], answer["pair_keys"], strict=True):
            pair_keys[u, other] = pair_keys[other, u] = key
    # a node can be in a learnable set only if its self mask is known and each of its pairwise
    # masks is known or shared with an honest partner that also carries it
    usable = {u for u in honest if len({s[:4] for s in seeds[u]}) >= t}
    linked: dict[int, set[int]] = {u: set() for u in honest}
    for u in honest:
        for w in transcript.partners[u]:
            if (u, w) in pair_keys:
                continue
            if w in linked and u in transcript.partners[w]:
                linked[u].add(w)
            else:  # only in u's input (one-sided routing) and unknown: u's input never comes clean
                usable.discard(u)
    components: list[frozenset[int]] = []
    seen: set[int] = set()
    for u in honest:
        if u in seen:
            continue
        todo, part = [u], {u}
        while todo:
            for w in linked[todo.pop()]:
                if w not in part:
                    part.add(w)
                    todo.append(w)
        seen |= part
        components.append(frozenset(part))
    clean = [c for c in components if c <= usable]
    return Learned(seeds=seeds, pair_keys=pair_keys, sets=clean)


def sum_of(transcript: Transcript, learned: Learned, nodes: frozenset[int]) -> np.ndarray:
    """The server's computation of the summed input of `nodes` (a learnable set)."""
    plan = transcript.plan
    total = np.sum([np.asarray(transcript.masked[u], dtype=np.uint64) for u in nodes], axis=0)
    masks = [self_mask(learned.seeds[u], plan) for u in nodes]
    for u in nodes:
        for w in transcript.partners[u]:
            if w not in nodes:
                masks.append((learned.pair_keys[u, w], pair_sign(u, w)))
    return strip(total.astype(ring_dtype(plan.params.modulus_bits)), masks, plan)


def strip(y: np.ndarray, masks: list[tuple[bytes, int]], plan: SetupPlan) -> np.ndarray:
    """The attacker's decode: take the given (key, sign) masks off the ring vector `y`."""
    word = np.array(y, dtype=ring_dtype(plan.params.modulus_bits))
    add_masks(word, [(key, -sign) for key, sign in masks])
    return dequantise(from_ring(word, plan.params.modulus_bits)[:DIM], SETTINGS.clip, plan.params.bits)


def self_mask(seed_shares: list[bytes], plan: SetupPlan) -> tuple[bytes, int]:
    seed = combine_secret(seed_shares, plan.params.threshold)
    return channel.self_mask_key(seed, plan.round_id), +1


def pair_sign(owner: int, other: int) -> int:
    """The sign `owner` gave the mask it shares with `other` (the lower id adds)."""
    return +1 if owner < other else -1


def quantum(plan: SetupPlan) -> float:
    return SETTINGS.clip / 2**plan.params.bits
