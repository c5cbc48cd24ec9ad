"""Key provisioning (`secure-fed keys init`) and loaders for the key directory.

Layout (a contract, see docs/ARCHITECTURE.md)::

    KEYS/he/secret.tenseal      CKKS context with the secret key (sites only), 0600
    KEYS/he/public.tenseal      server's context: no secret, Galois or relinearisation keys
    KEYS/signing/<party>.pem    Ed25519 private key, PKCS8 PEM, 0600
    KEYS/signing/<party>.pub    Ed25519 public key, SubjectPublicKeyInfo PEM
    KEYS/fingerprints.json      {"he_public": sha256, "he_secret": sha256, "signing": {party: sha256},
                                 "coordinator": party}

Fingerprints: `he_public` / `he_secret` are the SHA-256 of the file bytes (for the public context
this equals `ckks.he_key_id` of either context); `signing[party]` is the SHA-256 of the DER
SubjectPublicKeyInfo (`public_key_fingerprint`), so PEM line wrapping does not matter.
`coordinator` marks the party that runs the server: its key is never a SecAgg+ or CKKS peer, so a
coordinator under any name can neither vouch for a Sybil nor count as a site. A kit without the
marker (made before it existed) is read as coordinator = `server` when it has a party of that name,
and refused otherwise (`coordinator_of`).
Like a PKI startup kit, the directory is made once; hand `he/secret.tenseal` and a site's own
`signing/<site>.pem` to each site, and `he/public.tenseal` plus `signing/server.pem` to the server.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import tenseal as ts
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from secure_fed.crypto import ckks

HE_DIR = "he"
SIGNING_DIR = "signing"
SECRET_CONTEXT = "secret.tenseal"
PUBLIC_CONTEXT = "public.tenseal"
FINGERPRINTS = "fingerprints.json"

# a party's name becomes a file name in a key folder: no separators, no leading dot
PARTY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# a deployed party's kit comes from the ceremony (keys new, he-init, assemble), a simulation's from init
_INIT_HINT = (
    "a party's kit is made with `secure-fed keys new` and completed with `secure-fed keys assemble` "
    "(docs/DEPLOYMENT.md); a simulation's with `secure-fed keys init --out DIR`"
)


# the name every kit made before the coordinator was marked gave the server's key
LEGACY_COORDINATOR = "server"
COORDINATOR = "coordinator"  # the key of fingerprints.json and parties.json that marks it


class KeyMaterialError(KeyError):
    """Missing, corrupt, mismatched or misplaced key material; the message names the file."""

    def __str__(self) -> str:
        # KeyError's __str__ shows repr(arg) (quoted, escaped); ours is meant for people.
        return str(self.args[0]) if self.args else ""


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def public_key_fingerprint(key: Ed25519PublicKey) -> str:
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return sha256_hex(der)


def secret_context_path(keys_dir: Path | str) -> Path:
    return Path(keys_dir) / HE_DIR / SECRET_CONTEXT


def public_context_path(keys_dir: Path | str) -> Path:
    return Path(keys_dir) / HE_DIR / PUBLIC_CONTEXT


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write through a temp file created with its final mode, so a secret is never world-readable
    even for an instant, and a crash never leaves half a key under the real name."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.write(fd, data)
        os.fchmod(fd, mode)  # the umask may have narrowed it; we want exactly `mode`
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _private_dir(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)


def _existing_key_files(root: Path) -> list[Path]:
    candidates = (root / FINGERPRINTS, secret_context_path(root), public_context_path(root))
    found = [p for p in candidates if p.exists()]
    signing = root / SIGNING_DIR
    if signing.is_dir():
        found += sorted(p for p in signing.iterdir() if p.suffix in (".pem", ".pub"))
    return found


def _check_parties(parties: Sequence[str]) -> list[str]:
    names = list(parties)
    if not names:
        raise ValueError("at least one party (e.g. 'server') needs a signing key")
    bad = [p for p in names if not PARTY_NAME.match(p)]
    if bad:
        raise ValueError(f"party names must be letters, digits, '.', '_' or '-' (≤ 64 chars): {bad}")
    dupes = sorted({p for p in names if names.count(p) > 1})
    if dupes:
        raise ValueError(f"duplicate party names: {dupes}")
    return names


def coordinator_of(signing: Mapping[str, Any], marked: object, where: str, fix: str) -> str:
    """The one party of `signing` that runs the server, as `marked` names it (`where`'s
    "coordinator"). Unmarked, only a party named `server` can be read as the coordinator, which is
    what every kit made before the marker meant; zero or two coordinators are refused with `fix`."""
    if marked is None:
        if LEGACY_COORDINATOR in signing:
            return LEGACY_COORDINATOR
        raise KeyMaterialError(
            f"{where}: names no coordinator, and no party is called {LEGACY_COORDINATOR!r}; {fix}"
        )
    if isinstance(marked, list):
        if len(marked) != 1:
            raise KeyMaterialError(
                f"{where}: {COORDINATOR} names {len(marked)} parties, not exactly one; {fix}"
            )
        (marked,) = marked
    if not isinstance(marked, str) or marked not in signing:
        raise KeyMaterialError(f"{where}: {COORDINATOR} {marked!r} is not among its parties; {fix}")
    if marked != LEGACY_COORDINATOR and LEGACY_COORDINATOR in signing:
        # unmarked kits read a party named `server` as the coordinator: this one would have two
        raise KeyMaterialError(
            f"{where}: {COORDINATOR} is {marked!r}, beside a party named {LEGACY_COORDINATOR!r}, which "
            f"is always a coordinator: two coordinators; {fix}"
        )
    return marked


_COORDINATOR_FIX = (
    'name exactly one party that runs the server as "coordinator": "<party>" in parties.json and '
    "re-run `secure-fed keys assemble` (a simulation: `secure-fed keys init --coordinator`)"
)


def kit_coordinator(keys_dir: Path | str) -> str:
    """The coordinator a kit's fingerprints.json marks (KeyMaterialError naming the file if none)."""
    path = Path(keys_dir) / FINGERPRINTS
    data = load_fingerprints(keys_dir)
    return coordinator_of(data["signing"], data.get(COORDINATOR), str(path), _COORDINATOR_FIX)


def init_keys(
    out_dir: Path | str,
    parties: list[str],
    force: bool = False,
    poly_modulus_degree: int = 8192,
    coeff_mod_bit_sizes: Sequence[int] = (60, 40, 40, 60),
    scale_bits: int = 40,
    coordinator: str = LEGACY_COORDINATOR,
) -> dict[str, Any]:
    """Provision the whole key directory and return the fingerprints written to it; `coordinator`
    is the party that runs the server (one of `parties`)."""
    root = Path(out_dir)
    names = _check_parties(parties)
    if coordinator not in names:
        raise ValueError(
            f"coordinator {coordinator!r} is not among the parties {names}: name the party that runs "
            "the server with --coordinator"
        )
    coordinator_of(dict.fromkeys(names, ""), coordinator, "keys init", "name it with --coordinator")
    existing = _existing_key_files(root)
    if existing and not force:
        listed = ", ".join(str(p) for p in existing[:5]) + (" …" if len(existing) > 5 else "")
        raise KeyMaterialError(
            f"{root}: key material already exists ({listed}); refusing to overwrite it. "
            "Sites and server holding the old keys would stop matching; pass force=True (--force) "
            "only if you mean to replace every key."
        )
    if not root.exists():
        _private_dir(root)  # an existing folder keeps its mode; the secrets sit in 0700 subfolders
    for p in existing:  # force: drop old signing keys of parties that no longer exist
        p.unlink()
    _private_dir(root / HE_DIR)
    _private_dir(root / SIGNING_DIR)

    ctx = ckks.make_context(poly_modulus_degree, coeff_mod_bit_sizes, scale_bits)
    secret_bytes = ckks.serialize_secret(ctx)
    public_bytes = ckks.serialize_public(ctx)
    _write(secret_context_path(root), secret_bytes, 0o600)
    _write(public_context_path(root), public_bytes, 0o644)

    signing: dict[str, str] = {}
    for party in names:
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        pub = key.public_key()
        pub_pem = pub.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        _write(root / SIGNING_DIR / f"{party}.pem", pem, 0o600)
        _write(root / SIGNING_DIR / f"{party}.pub", pub_pem, 0o644)
        signing[party] = public_key_fingerprint(pub)

    fingerprints = {
        "he_public": sha256_hex(public_bytes),
        "he_secret": sha256_hex(secret_bytes),
        "signing": signing,
        COORDINATOR: coordinator,
    }
    _write(root / FINGERPRINTS, (json.dumps(fingerprints, indent=2, sort_keys=True) + "\n").encode(), 0o644)
    return fingerprints


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise KeyMaterialError(f"{path}: {what} not found; {_INIT_HINT}") from None
    except IsADirectoryError:
        raise KeyMaterialError(f"{path}: expected the {what} file, found a directory") from None
    except PermissionError:
        raise KeyMaterialError(f"{path}: {what} is not readable by this user") from None


def load_fingerprints(keys_dir: Path | str) -> dict[str, Any]:
    path = Path(keys_dir) / FINGERPRINTS
    raw = _read(path, "key fingerprints")
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise KeyMaterialError(f"{path}: not valid JSON ({err})") from None
    ok = (
        isinstance(data, dict)
        and isinstance(data.get("he_public"), str)
        and isinstance(data.get("he_secret"), str)
        and isinstance(data.get("signing"), dict)
        and all(isinstance(v, str) for v in data["signing"].values())
    )
    if not ok:
        raise KeyMaterialError(f"{path}: expected {{'he_public', 'he_secret', 'signing': {{party: sha256}}}}")
    return data


def _short(fp: str) -> str:
    return fp[:16]


def load_he_context(
    path: Path | str, expect_secret: bool, fingerprints: Mapping[str, Any] | None = None
) -> ts.Context:
    """Load a CKKS context and check it is the kind the caller should hold.

    `expect_secret=True` (sites) insists on the secret key; `False` (server) insists it is absent.
    With `fingerprints` (from `load_fingerprints`) the file must be the one `keys init` wrote, and a
    secret context must also be the partner of the provisioned public context.
    """
    path = Path(path)
    kind = "secret CKKS context" if expect_secret else "public CKKS context"
    data = _read(path, kind)
    if fingerprints is not None:
        expected = fingerprints["he_secret" if expect_secret else "he_public"]
        actual = sha256_hex(data)
        # an assembled kit pins no secret hash (`keys assemble`): the check against he_public below
        # is the one that matters
        if expected and actual != expected:
            raise KeyMaterialError(
                f"{path}: fingerprint {_short(actual)}… does not match the provisioned "
                f"{_short(expected)}… — this {kind} comes from a different `keys init` run "
                "than fingerprints.json; use the files from one key directory"
            )
    try:
        ctx = ts.context_from(data)
    except (ValueError, RuntimeError, TypeError) as err:
        raise KeyMaterialError(f"{path}: corrupt or not a TenSEAL context ({err})") from None
    if ctx.seal_context().data.key_context_data().parms().scheme().name != "CKKS":
        raise KeyMaterialError(f"{path}: a TenSEAL context, but not a CKKS one")
    if expect_secret and not ctx.is_private():
        raise KeyMaterialError(f"{path}: holds no secret key; sites need {HE_DIR}/{SECRET_CONTEXT}")
    if not expect_secret and ctx.is_private():
        raise KeyMaterialError(
            f"{path}: contains the CKKS secret key; the server must only ever hold {HE_DIR}/{PUBLIC_CONTEXT}"
        )
    if fingerprints is not None and expect_secret and ckks.he_key_id(ctx) != fingerprints["he_public"]:
        raise KeyMaterialError(f"{path}: its public key is not the provisioned public context's")
    return ctx


def _load_public_key(path: Path) -> Ed25519PublicKey:
    data = _read(path, "Ed25519 public key")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm) as err:
        raise KeyMaterialError(f"{path}: corrupt public key PEM ({err})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise KeyMaterialError(f"{path}: not an Ed25519 public key ({type(key).__name__})")
    return key


def load_signing_key(keys_dir: Path | str, party: str) -> Ed25519PrivateKey:
    """A party's Ed25519 private key; checked against fingerprints.json when that file exists."""
    root = Path(keys_dir)
    path = root / SIGNING_DIR / f"{party}.pem"
    data = _read(path, f"signing key of {party!r}")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as err:
        raise KeyMaterialError(f"{path}: corrupt or encrypted private key PEM ({err})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyMaterialError(f"{path}: not an Ed25519 private key ({type(key).__name__})")
    if (root / FINGERPRINTS).exists():
        expected = load_fingerprints(root)["signing"].get(party)
        actual = public_key_fingerprint(key.public_key())
        if expected is None:
            raise KeyMaterialError(f"{path}: party {party!r} is not listed in {root / FINGERPRINTS}")
        if actual != expected:
            raise KeyMaterialError(
                f"{path}: fingerprint {_short(actual)}… does not match {_short(expected)}… in {FINGERPRINTS}"
            )
    return key


def load_public_keys(keys_dir: Path | str) -> dict[str, Ed25519PublicKey]:
    """Every provisioned party's verification key, each checked against fingerprints.json.

    The party list comes from fingerprints.json, not from the folder, so a `.pub` file dropped
    into `signing/` is never trusted.
    """
    root = Path(keys_dir)
    expected = load_fingerprints(root)["signing"]
    keys: dict[str, Ed25519PublicKey] = {}
    for party, fp in sorted(expected.items()):
        path = root / SIGNING_DIR / f"{party}.pub"
        key = _load_public_key(path)
        actual = public_key_fingerprint(key)
        if actual != fp:
            raise KeyMaterialError(
                f"{path}: fingerprint {_short(actual)}… does not match {_short(fp)}… in {FINGERPRINTS}"
            )
        keys[party] = key
    return keys


def keys_init_main(
    out: Path | str, parties: list[str], force: bool, coordinator: str = LEGACY_COORDINATOR
) -> int:
    """CLI body of `secure-fed keys init --out DIR`; returns the exit status."""
    try:
        fps = init_keys(out, parties, force=force, coordinator=coordinator)
    except (KeyMaterialError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    root = Path(out)
    print(f"wrote keys to {root}")
    print(f"  {secret_context_path(root)}  (give to every site; never to the server)")
    print(f"  {public_context_path(root)}  (give to the server)")
    print(f"  he_public  {fps['he_public']}")
    print(f"  he_secret  {fps['he_secret']}")
    for party, fp in fps["signing"].items():
        print(f"  signing/{party}  {fp}")
    print(f"  coordinator  {fps[COORDINATOR]}  (runs the server; never a SecAgg+ or CKKS peer)")
    return 0
