"""The key ceremony of a deployment: every party makes its own secret, and only public halves move.

`secure-fed keys init` makes a whole kit in one folder, which suits a simulation and nothing else:
whoever ran it held every hospital's signing key. In a deployment:

1. each party (the server, every site) runs `keys new --party NAME --out DIR` on its own machine:
   `DIR/signing/NAME.pem` (0600) never leaves it, `DIR/signing/NAME.pub` is published;
2. one site, the CKKS key holder, runs `keys he-init --out DIR`: `he/secret.tenseal` goes to the
   other sites over their own channel (the sites are the only parties able to decrypt, and a single
   site's ciphertext decrypts only to masked values), `he/public.tenseal` to everyone;
3. the parties agree, over a channel the server does not relay (a call, a signed letter), on
   `parties.json`: every party's name and the fingerprint its `keys new` printed, the public
   context's from `keys he-init`, and which party is the coordinator (runs the server; its key
   never counts as a site) (`load_expectation`);
4. each party runs `keys assemble --keys DIR --public PUBLIC --expect parties.json` with the
   published halves: they are copied in only if they are exactly the expected ones, and
   `fingerprints.json` is written, identical for every party; the one digest it prints
   (`ceremony_digest`) is compared between the parties out of band;
5. `keys export-public --keys DIR --out PUBLIC` makes the folder a verifier (or the next party)
   receives: public keys, the public context and fingerprints, never a private file.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tenseal as ts
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from secure_fed.crypto import ckks
from secure_fed.crypto.keys import (
    COORDINATOR,
    FINGERPRINTS,
    HE_DIR,
    SIGNING_DIR,
    KeyMaterialError,
    _check_parties,
    _load_public_key,
    _private_dir,
    _write,
    coordinator_of,
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


EXPECT_KEYS = ("he_public", "signing")
_OPTIONAL_KEYS = (COORDINATOR,)  # absent in a parties.json written before it: read as `server`
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_EXPECT_FIX = (
    'add "coordinator": "<the party that runs the server>" to parties.json, agreed by every party '
    "like the rest of it"
)


def load_expectation(path: Path | str) -> dict[str, Any]:
    """The keys every party expects, as agreed over a channel the server does not relay (a call
    between the hospitals, a signed letter): `{"he_public": sha256, "signing": {party: sha256},
    "coordinator": party}`, each hash as `keys new` / `keys he-init` printed it. Without
    "coordinator", a party named `server` is the coordinator, and no other reading is taken."""
    path = Path(path)
    shape = (
        '{"he_public": "<sha256>", "signing": {"<party>": "<sha256>", ...}, '
        '"coordinator": "<the party that runs the server>"}'
    )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise KeyMaterialError(
            f"{path}: no such file; write the parties' names and fingerprints, as each party read "
            f"them to the others out of band, as {shape}"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise KeyMaterialError(f"{path}: not a JSON expectation ({err}); expected {shape}") from None
    if not isinstance(data, dict) or not set(EXPECT_KEYS) <= set(data) <= {*EXPECT_KEYS, *_OPTIONAL_KEYS}:
        raise KeyMaterialError(f"{path}: expected exactly {shape}")
    signing, he_public = data["signing"], data["he_public"]
    if not isinstance(signing, dict) or not signing:
        raise KeyMaterialError(f"{path}: signing: name every party (the server and each site) and its sha256")
    _check_parties(list(signing))
    for party, fingerprint in [*signing.items(), ("he_public", he_public)]:
        if not isinstance(fingerprint, str) or not _HEX64.match(fingerprint.lower()):
            raise KeyMaterialError(f"{path}: {party}: not a sha256 (64 hex digits) as `keys new` prints it")
    coordinator = coordinator_of(signing, data.get(COORDINATOR), str(path), _EXPECT_FIX)
    return {
        "he_public": he_public.lower(),
        "signing": {p: f.lower() for p, f in signing.items()},
        COORDINATOR: coordinator,
    }


def ceremony_digest(fingerprints: dict[str, Any]) -> str:
    """One hash of the whole pinned set (names, signing keys, CKKS public context, coordinator):
    identical at every party exactly when their kits pin the same keys and the same coordinator:
    one line to compare out of band."""
    coordinator = coordinator_of(
        fingerprints["signing"], fingerprints.get(COORDINATOR), FINGERPRINTS, _EXPECT_FIX
    )
    pinned = {
        "he_public": fingerprints["he_public"],
        "signing": fingerprints["signing"],
        COORDINATOR: coordinator,
    }
    return sha256_hex(json.dumps(pinned, sort_keys=True, separators=(",", ":")).encode())


def assemble(
    keys_dir: Path | str,
    public_dir: Path | str,
    expect: dict[str, Any],
    expect_digest: str | None = None,
) -> dict[str, Any]:
    """Bring the published halves in `public_dir` (`<party>.pub`, in `signing/` or not, and
    `he/public.tenseal`) into this party's `keys_dir` and pin them in `fingerprints.json`.

    Whoever relays `public_dir` (the server, in practice) could swap a key for one it holds or add
    parties of its own, and then play a site's SecAgg+ neighbours. So the kit pins exactly the
    parties and fingerprints of `expect` (`load_expectation`), which came over a channel the relay
    does not control: a name not in it, a missing party, or a fingerprint that differs (so also a
    `.pub` that contradicts one already in the kit) is refused, and nothing is written. `expect_digest`,
    when given, must equal the `ceremony_digest` of the result."""
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
    expected = expect["signing"]
    held = sorted((root / SIGNING_DIR).glob("*.pub"))
    pinned: dict[str, str] = {}
    for pub_path in [*held, *offered]:
        party, fingerprint = pub_path.stem, public_key_fingerprint(_load_public_key(pub_path))
        if party not in expected:
            raise KeyMaterialError(
                f"{pub_path}: party {party!r} is not among the expected parties "
                f"({', '.join(sorted(expected))}); refusing a party nobody agreed to"
            )
        if fingerprint != expected[party]:
            raise KeyMaterialError(
                f"{pub_path}: fingerprint {fingerprint[:16]}… is not the expected {expected[party][:16]}… "
                f"for {party!r}; refusing a substituted key (compare with {party} out of band)"
            )
        # a held key and an offered one of the same party both equal the expected one by now
        pinned[party] = fingerprint
    missing = sorted(set(expected) - set(pinned))
    if missing:
        raise KeyMaterialError(f"{source}: no .pub of expected {missing}; collect every party's key there")
    for pem in (root / SIGNING_DIR).glob("*.pem"):
        if pem.stem not in pinned:
            raise KeyMaterialError(f"{pem}: its public half {pem.stem}.pub is not in the kit")
    own_public, offered_public = public_context_path(root), public_context_path(public)
    context_path = own_public if own_public.exists() else offered_public
    if not context_path.exists():
        raise KeyMaterialError(
            f"{offered_public}: missing; the CKKS key holder publishes it (`keys he-init`)"
        )
    public_bytes = context_path.read_bytes()
    if offered_public.exists() and own_public.exists() and offered_public.read_bytes() != public_bytes:
        raise KeyMaterialError(f"{offered_public}: differs from {own_public}; refusing a replaced context")
    if sha256_hex(public_bytes) != expect["he_public"]:
        raise KeyMaterialError(
            f"{context_path}: sha256 {sha256_hex(public_bytes)[:16]}… is not the expected he_public "
            f"{expect['he_public'][:16]}…; refusing a substituted CKKS context"
        )
    secret = secret_context_path(root)
    if secret.exists() and ckks.he_key_id(ts.context_from(secret.read_bytes())) != sha256_hex(public_bytes):
        raise KeyMaterialError(f"{secret}: not the secret of {context_path}")
    # a kit whose coordinator is not settled would count the server's key as a site's
    coordinator = coordinator_of(expect["signing"], expect.get(COORDINATOR), "parties.json", _EXPECT_FIX)
    fingerprints = {
        "he_public": sha256_hex(public_bytes),
        # the secret's own hash would differ between the sites that hold it and those that do not;
        # the secret is checked against he_public instead (load_he_context)
        "he_secret": "",
        "signing": dict(sorted(pinned.items())),
        COORDINATOR: coordinator,
    }
    digest = ceremony_digest(fingerprints)
    if expect_digest is not None and expect_digest.strip().lower() != digest:
        raise KeyMaterialError(
            f"{public}: these keys' ceremony digest {digest} is not the agreed {expect_digest.strip()}; "
            "some party was shown other keys"
        )
    # every check passed: only now does anything reach the kit
    _private_dir(root / SIGNING_DIR)
    for pub_path in offered:
        mine = root / SIGNING_DIR / pub_path.name
        if not mine.exists():
            _write(mine, pub_path.read_bytes(), 0o644)
    if not own_public.exists():
        _private_dir(root / HE_DIR)
        _write(own_public, public_bytes, 0o644)
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
