"""Key agreement and authenticated share encryption between two SecAgg+ clients.

X25519 gives each pair of clients a shared secret; HKDF-SHA256 turns it into one AES-256-GCM key
for the share channel and one 256-bit mask key. The channel key is the same in both directions,
so the associated data names sender, recipient and round: a ciphertext reflected back, routed to
someone else, or replayed from another round fails authentication.
"""

from __future__ import annotations

from collections.abc import Callable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

KEY_BYTES = 32
NONCE_BYTES = 12
_RAW = serialization.Encoding.Raw


def new_keypair(entropy: Callable[[int], bytes]) -> tuple[bytes, bytes]:
    """(secret, public) raw X25519 keys; `entropy` is os.urandom outside tests."""
    secret = X25519PrivateKey.from_private_bytes(entropy(KEY_BYTES))
    raw_secret = secret.private_bytes(_RAW, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    return raw_secret, public_key(raw_secret)


def public_key(raw_secret: bytes) -> bytes:
    return (
        X25519PrivateKey.from_private_bytes(raw_secret)
        .public_key()
        .public_bytes(_RAW, serialization.PublicFormat.Raw)
    )


def _agree(raw_secret: bytes, raw_public: bytes, info: bytes) -> bytes:
    shared = X25519PrivateKey.from_private_bytes(raw_secret).exchange(
        X25519PublicKey.from_public_bytes(raw_public)
    )
    return HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None, info=info).derive(shared)


def channel_key(raw_secret: bytes, peer_public: bytes) -> bytes:
    return _agree(raw_secret, peer_public, b"secure_fed/secagg+/v1/share-channel")


def pairwise_mask_key(raw_secret: bytes, peer_public: bytes, round_id: int | str) -> bytes:
    return _agree(raw_secret, peer_public, f"secure_fed/secagg+/v1/pairwise-mask|round={round_id!s}".encode())


def seal(key: bytes, associated_data: bytes, plaintext: bytes, entropy: Callable[[int], bytes]) -> bytes:
    """nonce || AES-GCM(plaintext) with the tag."""
    nonce = entropy(NONCE_BYTES)
    return nonce + AESGCM(key).encrypt(nonce, plaintext, associated_data)


def open_sealed(key: bytes, associated_data: bytes, sealed: bytes) -> bytes:
    """Inverse of `seal`; raises cryptography's InvalidTag on any mismatch."""
    if len(sealed) < NONCE_BYTES + 16:
        raise InvalidTag("ciphertext too short")
    return AESGCM(key).decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], associated_data)
