"""The key ceremony of a deployment: every party makes its own secret, and only public halves move.

`secure-fed keys init` makes a whole kit in one folder, which suits a simulation and nothing else:
whoever ran it held every hospital's signing key. In a deployment:

1. each party (the server, every site) runs `keys new --party NAME --out DIR` on its own machine:
   `DIR/signing/NAME.pem` (0600) never leaves it, `DIR/signing/NAME.pub` is published;
2. one site, the CKKS key holder, runs `keys he-init --out DIR`: `he/secret.tenseal` goes to the
   other sites over their own channel (the sites are the only parties able to decrypt, and a single
   site's ciphertext decrypts only to masked values), `he/public.tenseal` to everyone;
3. each party runs `keys assemble --keys DIR --public PUBLIC` with the published halves: their
   `.pub` files and `he/public.tenseal` are copied in and `fingerprints.json` written, identical
   for every party, so the kit pins exactly the keys that were published;
4. `keys export-public --keys DIR --out PUBLIC` makes the folder a verifier (or the next party)
   receives: public keys, the public context and fingerprints, never a private file.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tenseal as ts
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from secure_fed.crypto import ckks
from secure_fed.crypto.keys import (
    FINGERPRINTS,
    HE_DIR,
    SIGNING_DIR,
    KeyMaterialError,
    _check_parties,
    _load_public_key,
    _private_dir,
    _write,
    public_context_path,
    public_key_fingerprint,
    secret_context_path,
    sha256_hex,
)


def new_signing_key(out_dir: Path | str, party: str) -> str:
    """Make `party`'s Ed25519 key pair in `out_dir/signing/`; returns the public fingerprint."""
    root = Path(out_dir)
    (name,) = _check_parties([party])
    pem_path = root / SIGNING_DIR / f"{name}.pem"
    if pem_path.exists():
        raise KeyMaterialError(f"{pem_path}: a signing key already exists; refusing to replace it")
    _private_dir(root)
    _private_dir(root / SIGNING_DIR)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    pub = key.public_key()
    _write(pem_path, pem, 0o600)
    _write(
        root / SIGNING_DIR / f"{name}.pub",
        pub.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo),
        0o644,
    )
    return public_key_fingerprint(pub)


def new_he_context(
    out_dir: Path | str,
    poly_modulus_degree: int = 8192,
    coeff_mod_bit_sizes: Sequence[int] = (60, 40, 40, 60),
    scale_bits: int = 40,
) -> str:
    """Make the CKKS contexts in `out_dir/he/`; returns the public context's fingerprint."""
    root = Path(out_dir)
    if secret_context_path(root).exists() or public_context_path(root).exists():
        raise KeyMaterialError(f"{root / HE_DIR}: a CKKS context already exists; refusing to replace it")
    _private_dir(root)
    _private_dir(root / HE_DIR)
    ctx = ckks.make_context(poly_modulus_degree, list(coeff_mod_bit_sizes), scale_bits)
    public = ckks.serialize_public(ctx)
    _write(secret_context_path(root), ckks.serialize_secret(ctx), 0o600)
    _write(public_context_path(root), public, 0o644)
    return sha256_hex(public)


def assemble(keys_dir: Path | str, public_dir: Path | str) -> dict[str, Any]:
    """Bring the published halves in `public_dir` (`<party>.pub`, in `signing/` or not, and
    `he/public.tenseal`) into this party's `keys_dir` and pin them in `fingerprints.json`.

    A `.pub` that contradicts one already in `keys_dir` (this party's own, or one assembled before)
    is refused, never overwritten: that is a substituted key."""
    root, public = Path(keys_dir), Path(public_dir)
    source = public / SIGNING_DIR if (public / SIGNING_DIR).is_dir() else public
    offered = sorted(source.glob("*.pub"))
    if not offered:
        raise KeyMaterialError(f"{public}: no <party>.pub files; collect every party's published key there")
    if not any((root / SIGNING_DIR).glob("*.pem")):
        # a misspelt kit folder would otherwise become a new kit of public keys only
        raise KeyMaterialError(
            f"{root}: no private signing key (signing/<party>.pem); give the folder "
            f"`secure-fed keys new --out` made for this party"
        )
    _private_dir(root / SIGNING_DIR)
    for pub_path in offered:
        key = _load_public_key(pub_path)
        mine = root / SIGNING_DIR / pub_path.name
        if mine.exists() and public_key_fingerprint(_load_public_key(mine)) != public_key_fingerprint(key):
            raise KeyMaterialError(
                f"{pub_path}: differs from {mine} already in the kit; refusing a replaced key"
            )
        if not mine.exists():
            _write(mine, pub_path.read_bytes(), 0o644)
    own_public, offered_public = public_context_path(root), public_context_path(public)
    if offered_public.exists():
        if own_public.exists() and own_public.read_bytes() != offered_public.read_bytes():
            raise KeyMaterialError(
                f"{offered_public}: differs from {own_public}; refusing a replaced context"
            )
        if not own_public.exists():
            _private_dir(root / HE_DIR)
            _write(own_public, offered_public.read_bytes(), 0o644)
    if not own_public.exists():
        raise KeyMaterialError(
            f"{offered_public}: missing; the CKKS key holder publishes it (`keys he-init`)"
        )
    signing = {
        p.stem: public_key_fingerprint(_load_public_key(p))
        for p in sorted((root / SIGNING_DIR).glob("*.pub"))
    }
    for pem in (root / SIGNING_DIR).glob("*.pem"):
        if pem.stem not in signing:
            raise KeyMaterialError(f"{pem}: its public half {pem.stem}.pub is not in the kit")
    secret = secret_context_path(root)
    public_bytes = own_public.read_bytes()
    if secret.exists() and ckks.he_key_id(ts.context_from(secret.read_bytes())) != sha256_hex(public_bytes):
        raise KeyMaterialError(f"{secret}: not the secret of {own_public}")
    fingerprints = {
        "he_public": sha256_hex(public_bytes),
        # the secret's own hash would differ between the sites that hold it and those that do not;
        # the secret is checked against he_public instead (load_he_context)
        "he_secret": "",
        "signing": signing,
    }
    _write(root / FINGERPRINTS, (json.dumps(fingerprints, indent=2, sort_keys=True) + "\n").encode(), 0o644)
    return fingerprints


def export_public(keys_dir: Path | str, out_dir: Path | str) -> list[Path]:
    """Copy what may be published (public keys of the parties pinned in fingerprints.json, the
    public context, fingerprints.json) from a kit to `out_dir`; returns the files written."""
    from secure_fed.crypto.keys import load_public_keys

    root, out = Path(keys_dir), Path(out_dir)
    parties = sorted(load_public_keys(root))  # checks every .pub against fingerprints.json
    (out / SIGNING_DIR).mkdir(parents=True, exist_ok=True)
    written = []
    for src in [*(root / SIGNING_DIR / f"{p}.pub" for p in parties), public_context_path(root)]:
        if not src.exists():
            continue
        dst = out / src.relative_to(root)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        written.append(dst)
    shutil.copyfile(root / FINGERPRINTS, out / FINGERPRINTS)
    return [*written, out / FINGERPRINTS]
