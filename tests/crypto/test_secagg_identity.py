"""A site's SecAgg+ identity from its provisioned key folder, and the statements it signs."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from secure_fed.crypto.keys import init_keys
from secure_fed.crypto.secagg_identity import (
    SERVER_PARTY,
    SecAggIdentity,
    key_statement,
    load_identity,
    statement,
)
from secure_fed.crypto.secagg_protocol import SecAggRefused


@pytest.fixture(scope="module")
def keys_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("keys")
    init_keys(root, [SERVER_PARTY, "north", "south", "east"])
    return root


def test_identity_holds_the_site_key_and_every_site_but_the_server(keys_dir: Path) -> None:
    identity = load_identity(keys_dir, "north", "run-7")
    assert identity.site == "north" and identity.run_id == "run-7"
    assert sorted(identity.peer_public_keys) == ["east", "north", "south"]
    statement = key_statement("run-7", 3, 11, "north", b"e" * 32, b"m" * 32)
    signature = identity.sign(statement)
    south = load_identity(keys_dir, "south", "run-7")
    assert south.signed_by("north", signature, statement)
    assert not south.signed_by("east", signature, statement)  # someone else's name on it
    assert not south.signed_by(SERVER_PARTY, signature, statement)  # the server's key vouches for no one
    assert not identity.signed_by("north", signature, statement)  # nor does a site vouch for itself


@pytest.mark.parametrize(
    ("keys", "site", "names"),
    [
        (None, "north", ["no key folder is set", "signing/north.pem", "secure-fed keys init"]),
        ("missing", "north", ["cannot load", "nowhere/signing/north.pem", "secure-fed keys init"]),
        ("provisioned", "west", ["signing/west.pem", "secure-fed keys init"]),
    ],
)
def test_missing_keys_are_refused_in_one_line_that_names_the_file_and_the_fix(
    keys_dir: Path, tmp_path: Path, keys: str | None, site: str, names: list[str]
) -> None:
    folder = {None: None, "missing": tmp_path / "nowhere", "provisioned": keys_dir}[keys]
    with pytest.raises(SecAggRefused) as err:
        load_identity(folder, site, "")
    message, detail = str(err.value), err.value.detail
    # the site's log (detail) names the file and the fix; what the server reads names no local path
    assert "\n" not in detail and all(name in detail for name in names), detail
    assert "\n" not in message and str(tmp_path) not in message and str(keys_dir) not in message, message


def test_an_identity_refuses_a_server_key_and_a_foreign_signing_key(keys_dir: Path) -> None:
    north = load_identity(keys_dir, "north", "")
    with pytest.raises(ValueError, match="server"):
        SecAggIdentity("north", "", north.signing_key, {**north.peer_public_keys, SERVER_PARTY: object()})
    with pytest.raises(ValueError, match="not the provisioned one"):
        SecAggIdentity("north", "", Ed25519PrivateKey.generate(), north.peer_public_keys)


def test_statements_never_collide_across_fields_or_purposes() -> None:
    statements = {
        key_statement("ab", 1, 2, "c", b"", b""),
        key_statement("a", 1, 2, "bc", b"", b""),
        key_statement("a", "1", 2, "c", b"", b""),
        key_statement("a", 1, 2, "c", b"x", b""),
        key_statement("a", 1, 2, "c", b"", b"x"),
        statement(b"other", "a", 1, 2, "c", b"", b""),
        statement(b"keys", "a", 1, 2, "c", b""),
        statement(b"keys", "a", 1, 2, "c", b"", b"", b""),
    }
    assert len(statements) == 8
    with pytest.raises(ValueError, match="purpose"):
        statement(b"keys|x")
