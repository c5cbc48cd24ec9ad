"""Ed25519 signing keys from the KEYS directory layout (docs/ARCHITECTURE.md).

KEYS/signing/<party>.pem is the PKCS8 private key (0600), KEYS/signing/<party>.pub the
SubjectPublicKeyInfo public key. The verifier reads only the .pub files, from a key folder or from a
public folder (`secure-fed keys export-public`: signing/*.pub and fingerprints.json, or the .pub
files at its top).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from rich.markup import escape


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


def public_keys_folder(keys_dir: Path | str) -> Path:
    """Where the <party>.pub files are: KEYS/signing/ (a key folder, or a public folder that
    `secure-fed keys export-public` wrote with the same layout) or the folder itself."""
    root = Path(keys_dir)
    nested = signing_dir(root)
    if nested.is_dir() and any(nested.glob("*.pub")):
        return nested
    return root


def load_public_keys(keys_dir: Path | str) -> dict[str, Ed25519PublicKey]:
    """Every party's public key (`<party>.pub`, in the folder or its signing/), by party name."""
    root = Path(keys_dir)
    if not root.is_dir():
        raise KeyFileError(f"{root}: no such directory (expected a folder of <party>.pub public keys)")
    folder = public_keys_folder(root)
    keys = {path.stem: load_public_key_file(path) for path in sorted(folder.glob("*.pub"))}
    if not keys:
        raise KeyFileError(
            f"{root}: no <party>.pub files here or in signing/; "
            "give the folder `secure-fed keys export-public` wrote"
        )
    return keys


def holds_private_keys(keys_dir: Path | str) -> bool:
    """True when the folder (or its signing/) also holds private keys: a verifier needs none."""
    root = Path(keys_dir)
    return any(root.glob("*.pem")) or any(signing_dir(root).glob("*.pem"))


def key_fingerprint(key: Ed25519PublicKey) -> str:
    """SHA-256 of the DER SubjectPublicKeyInfo: the same value as KEYS/fingerprints.json holds."""
    import hashlib

    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


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
    """Load `--keys` for a CLI command: (ok, keys). No folder → (True, None) after printing `missing`
    (if any); an unreadable folder → (False, None) after printing why."""
    if keys_dir is None:
        if missing:
            console.print(missing)
        return True, None
    try:
        keys = load_public_keys(keys_dir)
    except KeyFileError as err:
        console.print(f"[bold red]Cannot load keys:[/] {escape(str(err))}", highlight=False)
        return False, None
    if holds_private_keys(keys_dir):
        console.print(
            f"[yellow]warning:[/] {escape(str(keys_dir))} also holds private keys; a verifier needs only"
            " the public ones: `secure-fed keys export-public --keys KEYS --out PUBDIR`, then --keys PUBDIR",
            highlight=False,
        )
    return True, keys
