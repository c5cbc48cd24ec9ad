"""Deterministic SecAgg+/CKKS identities for benchmarks: every site's Ed25519 key is derived from
its name, so any process can rebuild any site's public key without provisioning files. Benchmarks
only: a real site's key is random and provisioned (`secure-fed keys init`)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping

from _process_cache import once_per_process  # noqa: E402  (benchmarks/ is on sys.path)
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from secure_fed.crypto.secagg_identity import SecAggIdentity


def _key(site: str) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(hashlib.sha256(f"benchmark|{site}".encode()).digest())


class _DerivedPublicKeys(Mapping[str, Ed25519PublicKey]):
    """Every "site…" name has a key; the server's name has none."""

    def __getitem__(self, site: str) -> Ed25519PublicKey:
        if not site.startswith("site"):
            raise KeyError(site)
        # derived once per process, as a real site loads its kit's public keys once
        return once_per_process("ed25519_public", site, lambda: _key(site).public_key())

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def bench_identity(node: int, run_id: str = "benchmark") -> SecAggIdentity:
    site = f"site{node}"
    return SecAggIdentity(site, run_id, _key(site), _DerivedPublicKeys())
