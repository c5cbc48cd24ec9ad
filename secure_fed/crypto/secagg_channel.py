"""Key agreement and authenticated share encryption between two SecAgg+ clients.

X25519 gives each pair of clients a shared secret; HKDF-SHA256 turns it into one AES-256-GCM key
for the share channel and one 256-bit mask key. The channel key is the same in both directions,
so the associated data names sender, recipient and round: a ciphertext reflected back, routed to
someone else, or replayed from another round fails authentication.

A client's mask key pair is fresh per round and never leaves it: a dropped partner's pairwise mask
is cancelled with the key a surviving partner reveals (secagg_client/ says why), so no share of a
mask key exists for a server to collect. The self-mask seed is 128 bits (X25519's own security
level), one Shamir field element.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

KEY_BYTES = 32
CONFIRMATION_BYTES = 32  # HMAC-SHA256
SEED_BYTES = 16  # self-mask seeds
NONCE_BYTES = 12
_RAW = serialization.Encoding.Raw
_SHARE_CHANNEL = b"secure_fed/secagg+/v1/share-channel"
_SURVIVOR_CONFIRMATION = b"secure_fed/secagg+/v1/survivor-confirmation"


def new_keypair(entropy: Callable[[int], bytes]) -> tuple[bytes, bytes]:
    """(secret, public) raw X25519 keys; `entropy` is os.urandom outside tests."""
    secret = X25519PrivateKey.from_private_bytes(entropy(KEY_BYTES))
    raw_secret = secret.private_bytes(_RAW, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    # the public key from this same object: loading the secret again costs a scalar multiplication
    return raw_secret, secret.public_key().public_bytes(_RAW, serialization.PublicFormat.Raw)


def public_key(raw_secret: bytes) -> bytes:
    return (
        X25519PrivateKey.from_private_bytes(raw_secret)
        .public_key()
        .public_bytes(_RAW, serialization.PublicFormat.Raw)
    )


def _derive(key_material: bytes, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None, info=info).derive(key_material)


def self_mask_key(seed: bytes, round_id: int | str) -> bytes:
    """The 256-bit AES key of a client's self mask, from its fresh 128-bit self-mask seed."""
    if len(seed) != SEED_BYTES:
        raise ValueError(f"self-mask seeds are {SEED_BYTES} bytes, got {len(seed)}")
    return _derive(seed, f"secure_fed/secagg+/v1/self-mask|round={round_id!s}".encode())


def agree(raw_secret: bytes, peer_publics: list[bytes], info: bytes) -> list[bytes]:
    # one private-key object for all peers: loading it costs as much as an exchange
    secret = X25519PrivateKey.from_private_bytes(raw_secret)
    return [_derive(secret.exchange(X25519PublicKey.from_public_bytes(pk)), info) for pk in peer_publics]


def channel_keys(raw_secret: bytes, peer_publics: list[bytes]) -> list[bytes]:
    """Share-channel key with each peer; raises ValueError on a low-order (invalid) public key."""
    return agree(raw_secret, peer_publics, _SHARE_CHANNEL)


def channel_key(raw_secret: bytes, peer_public: bytes) -> bytes:
    return channel_keys(raw_secret, [peer_public])[0]


def pairwise_mask_keys(raw_secret: bytes, peer_publics: list[bytes], round_id: int | str) -> list[bytes]:
    """Pairwise mask key with each peer for this round; ValueError on an invalid public key."""
    info = f"secure_fed/secagg+/v1/pairwise-mask|round={round_id!s}".encode()
    return agree(raw_secret, peer_publics, info)


def pairwise_mask_key(raw_secret: bytes, peer_public: bytes, round_id: int | str) -> bytes:
    return pairwise_mask_keys(raw_secret, [peer_public], round_id)[0]


def confirmation_keys(channel_keys: list[bytes]) -> list[bytes]:
    """The key each pair confirms the round's survivor set with, from their share-channel key: an
    HMAC under it costs microseconds where checking a signature costs ~60 µs, and only the two
    sites hold it (their X25519 keys were signed at the setup)."""
    return [_derive(key, _SURVIVOR_CONFIRMATION) for key in channel_keys]


def confirm(key: bytes, statement: bytes) -> bytes:
    return hmac.new(key, statement, hashlib.sha256).digest()


def confirms(key: bytes, statement: bytes, tag: bytes) -> bool:
    return hmac.compare_digest(confirm(key, statement), tag)


def seal(key: bytes, associated_data: bytes, plaintext: bytes, entropy: Callable[[int], bytes]) -> bytes:
    """nonce || AES-GCM(plaintext) with the tag."""
    nonce = entropy(NONCE_BYTES)
    return nonce + AESGCM(key).encrypt(nonce, plaintext, associated_data)


def open_sealed(key: bytes, associated_data: bytes, sealed: bytes) -> bytes:
    """Inverse of `seal`; raises cryptography's InvalidTag on any mismatch."""
    if len(sealed) < NONCE_BYTES + 16:
        raise InvalidTag("ciphertext too short")
    return AESGCM(key).decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], associated_data)
