"""Who a SecAgg+ site is, and whom it accepts as a peer: the PKI that Bell et al. (2020) assume
against a malicious server.

Without it a site masks with whatever public keys the server relays as its neighbours', so a server
that plays every neighbour itself opens the site's shares and masks (tests/adversarial). Every
site holds the Ed25519 key `secure-fed keys init` provisioned for it (KEYS/signing/<site>.pem) and
the provisioned public keys of every site; a site signs what it advertises and checks what it is
shown. The server relays signatures and site names but holds no site's signing key, so it can
neither invent a site nor put one site in two places.

Statements are domain-separated and length-prefixed field by field, so no two different
statements share an encoding, and a signature made for one purpose never verifies for another.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from secure_fed.crypto.secagg_protocol import SecAggRefused

# the coordinator of a kit made before kits marked it (`keys.coordinator_of`); a key the server
# holds must never vouch for a peer
SERVER_PARTY = "server"
SIGNATURE_BYTES = 64
_DOMAIN = b"secure_fed/secagg+/v2|"


@dataclass(frozen=True)
class SecAggIdentity:
    """A site's signing key and the public keys of the sites it accepts as peers.

    run_id: the run every party of it agrees on ("" when none is known); signatures are bound to it
        so that what a site signed in one run is worthless in another.
    peer_public_keys: every provisioned site, by name; may include this site, never the coordinator.
    coordinator: the party that runs the server, as the kit marks it: its key vouches for no peer.
    """

    site: str
    run_id: str
    signing_key: Ed25519PrivateKey
    peer_public_keys: Mapping[str, Ed25519PublicKey]
    coordinator: str = SERVER_PARTY

    def __post_init__(self) -> None:
        if self.coordinator in self.peer_public_keys:
            raise ValueError(
                f"the coordinator's key ({self.coordinator!r}) cannot vouch for a SecAgg+ peer: "
                "the server holds it"
            )
        if self.site == self.coordinator:
            raise ValueError(f"{self.site!r} is the kit's coordinator (it runs the server), not a site")
        own = self.peer_public_keys.get(self.site)
        if own is not None and own.public_bytes_raw() != self.signing_key.public_key().public_bytes_raw():
            raise ValueError(f"site {self.site!r}: the signing key is not the provisioned one")

    def sign(self, statement: bytes) -> bytes:
        return self.signing_key.sign(statement)

    def signed_by(self, site: str, signature: bytes, statement: bytes) -> bool:
        """Whether `site` is a provisioned site (not this one) whose key made `signature`."""
        key = self.peer_public_keys.get(site)
        if key is None or site == self.site:
            return False
        try:
            key.verify(signature, statement)
        except InvalidSignature:
            return False
        return True


def _field(value: str | int | bytes) -> bytes:
    if isinstance(value, bytes):
        tag, raw = b"y", value
    elif isinstance(value, int) and not isinstance(value, bool):
        tag, raw = b"i", str(value).encode()
    elif isinstance(value, str):
        tag, raw = b"s", value.encode()
    else:
        raise TypeError(f"cannot sign a {type(value).__name__}")
    return tag + len(raw).to_bytes(8, "big") + raw


def statement(purpose: bytes, *fields: str | int | bytes) -> bytes:
    """The bytes a site signs: `purpose` (one per kind of statement, so that a signature made for
    one never verifies as another) and the fields, each typed and length-prefixed."""
    if b"|" in purpose:
        raise ValueError("a statement's purpose cannot contain '|'")
    return _DOMAIN + purpose + b"|" + b"".join(_field(f) for f in fields)


def key_statement(
    run_id: str,
    round_id: int | str,
    node_id: int,
    site: str,
    enc_pk: bytes,
    mask_pk: bytes,
    context: bytes = b"",
) -> bytes:
    """What a site signs in its setup reply: these are my keys, as this node, in this round, for
    inputs prepared under `context` (e.g. the digest of server-chosen weights every participant must
    have been shown alike; empty when nothing of the sort applies). A neighbour checks the signature
    against its own context, so two sites shown different contexts never mask together."""
    return statement(b"keys", run_id, round_id, node_id, site, enc_pk, mask_pk, context)


def survivors_statement(
    run_id: str, round_id: int | str, nodes: list[int], sites: list[str], context: bytes = b""
) -> bytes:
    """What a site signs in a distributed-DP round's consistency step: these nodes, as these sites,
    are the round's survivors. Bound to the run, the round and the setup's `context` (which carries
    the distributed-DP plan's digest), so a signature over one round's set or plan counts for no other."""
    if len(nodes) != len(sites):
        raise ValueError("one site per survivor node")
    pairs = sorted(zip(nodes, sites, strict=True))
    return statement(b"survivors", run_id, round_id, context, *(f for pair in pairs for f in pair))


def confirmation_statement(
    survivors: bytes, sender_node: int, sender_site: str, recipient_node: int, recipient_site: str
) -> bytes:
    """What one site MACs to confirm `survivors` (a `survivors_statement`) to one neighbour: the
    statement bound to its direction. The pair's confirmation key is symmetric, so a tag over the
    bare statement that u sent v also verified at u as v's tag to u: a server could hand each site
    its own tags back as its peers' and needed no peer to agree (tests/adversarial/
    test_survivor_reflection.py). Naming the sender and the recipient, node and site, makes u's
    tag to v worthless anywhere but at v, as coming from u."""
    return statement(
        b"survivors-confirmation", survivors, sender_node, sender_site, recipient_node, recipient_site
    )


def load_identity(keys_dir: Path | str | None, site: str, run_id: str) -> SecAggIdentity:
    """The site's identity from its provisioned key folder; `SecAggRefused` naming the missing or
    bad file and the fix when it cannot be loaded (SecAgg+ never runs unauthenticated)."""
    from secure_fed.crypto import keys  # imports TenSEAL: only where a site actually loads keys

    if keys_dir is None:
        raise SecAggRefused(
            f"SecAgg+ needs this site's keys, and no key folder is set (expected KEYS/signing/{site}.pem "
            "and KEYS/fingerprints.json): run `secure-fed keys init --out KEYS` and give the site KEYS"
        )
    try:
        signing_key = keys.load_signing_key(keys_dir, site)
        public = keys.load_public_keys(keys_dir)
        coordinator = keys.kit_coordinator(keys_dir)
    except keys.KeyMaterialError as err:
        # the reason goes to the server; the file (a local path) only to the site's log
        raise SecAggRefused(
            "SecAgg+ cannot load this site's keys (its signing key, the parties' public keys or "
            "fingerprints.json; the site's log names the file): fix its key folder with `secure-fed "
            "keys assemble`",
            detail=f"SecAgg+ cannot load this site's keys: {err}",
        ) from None
    peers = {party: key for party, key in public.items() if party != coordinator}
    try:
        return SecAggIdentity(
            site=site, run_id=run_id, signing_key=signing_key, peer_public_keys=peers, coordinator=coordinator
        )
    except ValueError as err:
        raise SecAggRefused(
            f"SecAgg+ cannot use this site's keys: {err}",
            detail=f"SecAgg+ cannot use the keys in {keys_dir}: {err}",
        ) from None
