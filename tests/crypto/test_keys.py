from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
import tenseal as ts
from cryptography.exceptions import InvalidSignature

from secure_fed.crypto import keys

PARTIES = ["server", "site-a", "site-b"]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(scope="module")
def keydir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("k") / "KEYS"
    keys.init_keys(root, PARTIES)
    return root


@pytest.fixture(scope="module")
def other_keydir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("k2") / "KEYS"
    keys.init_keys(root, PARTIES)
    return root


def test_layout_and_modes(keydir: Path) -> None:
    assert _mode(keydir) == 0o700
    assert _mode(keydir / "he") == 0o700
    assert _mode(keydir / "signing") == 0o700
    assert _mode(keydir / "he" / "secret.tenseal") == 0o600
    for party in PARTIES:
        assert _mode(keydir / "signing" / f"{party}.pem") == 0o600
        assert (keydir / "signing" / f"{party}.pub").read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")
        assert (keydir / "signing" / f"{party}.pem").read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    fps = json.loads((keydir / "fingerprints.json").read_text())
    assert set(fps) == {"he_public", "he_secret", "signing", "coordinator"}
    assert set(fps["signing"]) == set(PARTIES) and fps["coordinator"] == "server"


def test_public_context_has_no_secret_no_galois_no_relin(keydir: Path) -> None:
    raw = (keydir / "he" / "public.tenseal").read_bytes()
    ctx = ts.context_from(raw)
    assert not ctx.is_private()
    assert not ctx.has_galois_keys()
    assert not ctx.has_relin_keys()
    # Galois keys for N = 8192 would be tens of MB; the public key alone is about half a MB
    assert 200_000 < len(raw) < 1_000_000
    secret = ts.context_from((keydir / "he" / "secret.tenseal").read_bytes())
    assert secret.is_private() and not secret.has_galois_keys()


def test_refuses_to_overwrite_then_force_replaces(tmp_path: Path) -> None:
    root = tmp_path / "K"
    first = keys.init_keys(root, ["server", "old-site"])
    with pytest.raises(keys.KeyMaterialError, match="already exists"):
        keys.init_keys(root, ["server"])
    assert json.loads((root / "fingerprints.json").read_text()) == first  # untouched
    second = keys.init_keys(root, ["server", "site-a"], force=True)
    assert second["he_secret"] != first["he_secret"]
    assert second["signing"]["server"] != first["signing"]["server"]
    assert not (root / "signing" / "old-site.pem").exists()
    assert set(keys.load_public_keys(root)) == {"server", "site-a"}


def test_party_names_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="party names"):
        keys.init_keys(tmp_path / "K", ["../evil"])
    with pytest.raises(ValueError, match="duplicate"):
        keys.init_keys(tmp_path / "K", ["a", "a"])
    assert not (tmp_path / "K").exists()


def test_loads_with_fingerprints(keydir: Path) -> None:
    fps = keys.load_fingerprints(keydir)
    secret = keys.load_he_context(keys.secret_context_path(keydir), expect_secret=True, fingerprints=fps)
    public = keys.load_he_context(keys.public_context_path(keydir), expect_secret=False, fingerprints=fps)
    assert secret.is_private() and not public.is_private()


def test_mismatched_key_fails_early(keydir: Path, other_keydir: Path) -> None:
    foreign = keys.load_fingerprints(other_keydir)
    path = keys.secret_context_path(keydir)
    with pytest.raises(keys.KeyMaterialError) as err:
        keys.load_he_context(path, expect_secret=True, fingerprints=foreign)
    assert str(path) in str(err.value) and "different `keys init` run" in str(err.value)
    with pytest.raises(keys.KeyMaterialError, match="different `keys init` run"):
        keys.load_he_context(keys.public_context_path(keydir), expect_secret=False, fingerprints=foreign)


def test_secret_must_pair_with_public(tmp_path: Path, keydir: Path, other_keydir: Path) -> None:
    # fingerprints whose file hash matches but whose public half names another key pair
    fps = dict(keys.load_fingerprints(keydir))
    fps["he_public"] = keys.load_fingerprints(other_keydir)["he_public"]
    with pytest.raises(keys.KeyMaterialError, match="not the provisioned public context"):
        keys.load_he_context(keys.secret_context_path(keydir), expect_secret=True, fingerprints=fps)


def test_wrong_kind_of_context(keydir: Path) -> None:
    with pytest.raises(keys.KeyMaterialError, match="server must only ever hold"):
        keys.load_he_context(keys.secret_context_path(keydir), expect_secret=False)
    with pytest.raises(keys.KeyMaterialError, match="holds no secret key"):
        keys.load_he_context(keys.public_context_path(keydir), expect_secret=True)


def test_missing_and_corrupt_files(tmp_path: Path, keydir: Path) -> None:
    missing = tmp_path / "nope" / "secret.tenseal"
    with pytest.raises(keys.KeyMaterialError) as err:
        keys.load_he_context(missing, expect_secret=True)
    assert str(missing) in str(err.value) and "keys init" in str(err.value)

    truncated = tmp_path / "secret.tenseal"
    truncated.write_bytes(keys.secret_context_path(keydir).read_bytes()[:5000])
    with pytest.raises(keys.KeyMaterialError) as err:
        keys.load_he_context(truncated, expect_secret=True)
    assert str(truncated) in str(err.value) and "corrupt" in str(err.value)

    bad_json = tmp_path / "fingerprints.json"
    bad_json.write_text("{not json")
    with pytest.raises(keys.KeyMaterialError, match="not valid JSON"):
        keys.load_fingerprints(tmp_path)


def test_signing_keys_round_trip(keydir: Path) -> None:
    publics = keys.load_public_keys(keydir)
    assert set(publics) == set(PARTIES)
    sk = keys.load_signing_key(keydir, "site-a")
    sig = sk.sign(b"record")
    publics["site-a"].verify(sig, b"record")
    with pytest.raises(InvalidSignature):
        publics["site-b"].verify(sig, b"record")
    assert keys.public_key_fingerprint(sk.public_key()) == keys.load_fingerprints(keydir)["signing"]["site-a"]


def test_swapped_public_key_is_caught(tmp_path: Path, other_keydir: Path) -> None:
    root = tmp_path / "K"
    keys.init_keys(root, ["server", "site-a"])
    (root / "signing" / "site-a.pub").write_bytes((other_keydir / "signing" / "site-a.pub").read_bytes())
    with pytest.raises(keys.KeyMaterialError, match="site-a.pub: fingerprint"):
        keys.load_public_keys(root)
    (root / "signing" / "site-a.pub").unlink()
    with pytest.raises(keys.KeyMaterialError, match="site-a.pub: Ed25519 public key not found"):
        keys.load_public_keys(root)


def test_unlisted_public_key_is_not_trusted(tmp_path: Path, other_keydir: Path) -> None:
    root = tmp_path / "K"
    keys.init_keys(root, ["server"])
    (root / "signing" / "intruder.pub").write_bytes((other_keydir / "signing" / "server.pub").read_bytes())
    assert set(keys.load_public_keys(root)) == {"server"}


def test_signing_key_not_listed_or_corrupt(tmp_path: Path, keydir: Path) -> None:
    with pytest.raises(keys.KeyMaterialError, match="not found"):
        keys.load_signing_key(keydir, "site-z")
    root = tmp_path / "K"
    keys.init_keys(root, ["server"])
    (root / "signing" / "server.pem").write_text("-----BEGIN PRIVATE KEY-----\ngarbage\n")
    with pytest.raises(keys.KeyMaterialError, match="corrupt"):
        keys.load_signing_key(root, "server")


def test_cli_entry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "K"
    assert keys.keys_init_main(root, ["server", "site-a"], force=False) == 0
    assert keys.load_fingerprints(root)["he_public"] in capsys.readouterr().out
    assert keys.keys_init_main(root, ["server"], force=False) == 1
    assert "refusing to overwrite" in capsys.readouterr().err
    assert keys.keys_init_main(root, ["server"], force=True) == 0
