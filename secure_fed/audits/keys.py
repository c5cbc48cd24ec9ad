"""Ed25519 signing keys from the KEYS directory layout (docs/ARCHITECTURE.md).

KEYS/signing/<party>.pem is the PKCS8 private key (0600), KEYS/signing/<party>.pub the
SubjectPublicKeyInfo public key. The verifier reads only the .pub files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey


class KeyFileError(ValueError):
    """A key file is missing or is not an Ed25519 key."""


def signing_dir(keys_dir: Path | str) -> Path:
    return Path(keys_dir) / "signing"


def load_private_key(keys_dir: Path | str, party: str) -> Ed25519PrivateKey:
    path = signing_dir(keys_dir) / f"{party}.pem"
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as err:
        raise KeyFileError(f"{path}: cannot load the private signing key: {err}") from err
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(f"{path}: not an Ed25519 private key")
    return key


def load_public_key_file(path: Path | str) -> Ed25519PublicKey:
    path = Path(path)
    try:
        key = serialization.load_pem_public_key(path.read_bytes())
    except (OSError, ValueError) as err:
        raise KeyFileError(f"{path}: cannot load the public signing key: {err}") from err
    if not isinstance(key, Ed25519PublicKey):
        raise KeyFileError(f"{path}: not an Ed25519 public key")
    return key


def load_public_keys(keys_dir: Path | str) -> dict[str, Ed25519PublicKey]:
    """Every party's public key in KEYS/signing/, by party name (the file stem)."""
    folder = signing_dir(keys_dir)
    if not folder.is_dir():
        raise KeyFileError(f"{folder}: no such directory (expected KEYS/signing/<party>.pub)")
    keys = {path.stem: load_public_key_file(path) for path in sorted(folder.glob("*.pub"))}
    if not keys:
        raise KeyFileError(f"{folder}: no <party>.pub files")
    return keys


def write_key_pair(keys_dir: Path | str, party: str, key: Ed25519PrivateKey) -> tuple[Path, Path]:
    """Write `key` in the layout (private 0600), for tests and ephemeral run keys."""
    folder = signing_dir(keys_dir)
    folder.mkdir(parents=True, exist_ok=True)
    private_path, public_path = folder / f"{party}.pem", folder / f"{party}.pub"
    private_bytes = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    private_path.touch(mode=0o600, exist_ok=True)
    private_path.chmod(0o600)
    private_path.write_bytes(private_bytes)
    public_path.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private_path, public_path


def keys_for_cli(keys_dir: Path | str | None, console: Any, missing: str) -> tuple[bool, dict | None]:
    """Load `--keys` for a CLI command: (ok, keys). No folder → (True, None) after printing `missing`;
    an unreadable folder → (False, None) after printing why."""
    if keys_dir is None:
        console.print(missing)
        return True, None
    try:
        return True, load_public_keys(keys_dir)
    except KeyFileError as err:
        console.print(f"[bold red]Cannot load keys:[/] {err}")
        return False, None
