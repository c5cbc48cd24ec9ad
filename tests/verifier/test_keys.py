from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from secure_fed.audits.keys import KeyFileError, load_private_key, load_public_keys, write_key_pair


def test_key_layout_round_trip(tmp_path: Path) -> None:
    keys = {party: Ed25519PrivateKey.generate() for party in ("site-0", "server")}
    for party, key in keys.items():
        private_path, _ = write_key_pair(tmp_path, party, key)
        assert private_path == tmp_path / "signing" / f"{party}.pem"
        assert private_path.stat().st_mode & 0o777 == 0o600
    public = load_public_keys(tmp_path)
    assert sorted(public) == ["server", "site-0"]
    loaded = load_private_key(tmp_path, "site-0")
    signature = loaded.sign(b"x")
    public["site-0"].verify(signature, b"x")
    raw = PublicFormat.Raw
    assert public["server"].public_bytes(Encoding.Raw, raw) == keys["server"].public_key().public_bytes(
        Encoding.Raw, raw
    )


def test_key_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="no such directory"):
        load_public_keys(tmp_path / "absent")
    with pytest.raises(KeyFileError, match="no <party>.pub files"):
        load_public_keys(tmp_path)  # a public-keys folder may hold the .pub files at its top
    (tmp_path / "signing").mkdir()
    with pytest.raises(KeyFileError, match="no <party>.pub files"):
        load_public_keys(tmp_path)
    other = X25519PrivateKey.generate().public_key()
    (tmp_path / "signing" / "site-0.pub").write_bytes(
        other.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    )
    with pytest.raises(KeyFileError, match="not an Ed25519 public key"):
        load_public_keys(tmp_path)
    with pytest.raises(KeyFileError, match="cannot load the private signing key"):
        load_private_key(tmp_path, "site-0")
