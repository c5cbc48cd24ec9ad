"""The deployment's key ceremony (examples/key-ceremony/ceremony.sh, shown in docs/DEPLOYMENT.md):
every party makes its own signing key, one site the CKKS keys, and only public halves move. Each
line of docs/THREAT_MODEL.md's "who holds what" table about key material is checked here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from secure_fed.audits.keys import load_public_keys as verifier_public_keys
from secure_fed.audits.log import AuditLog
from secure_fed.crypto import ckks
from secure_fed.crypto.key_ceremony import assemble
from secure_fed.crypto.keys import (
    KeyMaterialError,
    load_fingerprints,
    load_he_context,
    load_public_keys,
    load_signing_key,
    public_context_path,
    secret_context_path,
)
from secure_fed.crypto.secagg_identity import key_statement, load_identity
from secure_fed.verifier.verify import verify_logs

ROOT = Path(__file__).resolve().parents[2]
SITES = ["site0", "site1", "site2"]
PARTIES = ["server", *SITES]


@pytest.fixture(scope="module")
def ceremony(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("ceremony")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", str(ROOT / "examples" / "key-ceremony" / "ceremony.sh"), str(work), *SITES],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return work


def _private_files(folder: Path) -> set[str]:
    return {p.name for p in folder.rglob("*.pem")} | {p.name for p in folder.rglob("secret.tenseal")}


@pytest.mark.slow
def test_each_party_holds_only_its_own_signing_key(ceremony: Path) -> None:
    for party in PARTIES:
        kit = ceremony / f"{party}-keys"
        assert {p.name for p in kit.rglob("*.pem")} == {f"{party}.pem"}
        assert load_signing_key(kit, party)  # checked against the pinned fingerprint
        assert sorted(load_public_keys(kit)) == sorted(PARTIES)


@pytest.mark.slow
def test_every_kit_pins_the_same_keys(ceremony: Path) -> None:
    pinned = [load_fingerprints(ceremony / f"{party}-keys") for party in PARTIES]
    assert all(p == pinned[0] for p in pinned)
    assert sorted(pinned[0]["signing"]) == sorted(PARTIES)


@pytest.mark.slow
def test_only_sites_can_decrypt_and_the_server_cannot(ceremony: Path) -> None:
    """Whoever can decrypt is named: every site (with a secret context matching the pinned public
    one); the server holds the public context only."""
    server = ceremony / "server-keys"
    assert not secret_context_path(server).exists()
    public = load_he_context(
        public_context_path(server), expect_secret=False, fingerprints=load_fingerprints(server)
    )
    for site in SITES:
        kit = ceremony / f"{site}-keys"
        ctx = load_he_context(
            secret_context_path(kit), expect_secret=True, fingerprints=load_fingerprints(kit)
        )
        assert ckks.he_key_id(ctx) == ckks.he_key_id(public)


@pytest.mark.slow
def test_kits_made_apart_authenticate_each_other_for_secagg(ceremony: Path) -> None:
    alice = load_identity(ceremony / "site0-keys", "site0", "run-1")
    bob = load_identity(ceremony / "site1-keys", "site1", "run-1")
    statement = key_statement("run-1", 1, 0, "site0", b"e" * 32, b"m" * 32)
    assert bob.signed_by("site0", alice.sign(statement), statement)
    assert "server" not in bob.peer_public_keys  # the server's key never vouches for a peer


@pytest.mark.slow
def test_the_verifier_folder_has_no_secret_and_verifies_logs(ceremony: Path, tmp_path: Path) -> None:
    verifier = ceremony / "verifier-keys"
    assert _private_files(verifier) == set()
    log_path = tmp_path / "site1.jsonl"
    log = AuditLog(log_path, "site1", "run-1", load_signing_key(ceremony / "site1-keys", "site1"))
    log.append("policy", {"site": "site1", "budget": 8.0}, round=1)
    log.close()
    assert verify_logs([log_path], verifier_public_keys(verifier)).ok


@pytest.mark.slow
def test_a_substituted_public_key_is_refused(ceremony: Path, tmp_path: Path) -> None:
    """The server (or anyone relaying published/) swaps site1's key for one it holds the secret of."""
    published = tmp_path / "published"
    shutil.copytree(ceremony / "published", published)
    from secure_fed.crypto.key_ceremony import new_signing_key

    forged = tmp_path / "forged"
    new_signing_key(forged, "site1")
    shutil.copyfile(forged / "signing" / "site1.pub", published / "site1.pub")
    kit = tmp_path / "site2-kit"
    shutil.copytree(ceremony / "site2-keys", kit)
    before = (kit / "fingerprints.json").read_text()
    agreed = load_fingerprints(kit)
    with pytest.raises(KeyMaterialError, match="refusing a substituted key"):
        assemble(kit, published, {"he_public": agreed["he_public"], "signing": agreed["signing"]})
    assert (kit / "fingerprints.json").read_text() == before


def test_a_kit_without_the_ckks_public_context_is_refused(tmp_path: Path) -> None:
    from secure_fed.crypto.key_ceremony import new_signing_key

    fingerprint = new_signing_key(tmp_path / "mine", "site0")
    with pytest.raises(KeyMaterialError, match="public.tenseal"):
        expect = {"he_public": "0" * 64, "signing": {"site0": fingerprint}}
        assemble(tmp_path / "mine", tmp_path / "mine" / "signing", expect)
    assert not (tmp_path / "mine" / "fingerprints.json").exists()


def test_keys_new_never_replaces_a_key(tmp_path: Path) -> None:
    from secure_fed.crypto.key_ceremony import new_signing_key

    new_signing_key(tmp_path, "site0")
    pem = (tmp_path / "signing" / "site0.pem").read_bytes()
    with pytest.raises(KeyMaterialError, match="already exists"):
        new_signing_key(tmp_path, "site0")
    assert (tmp_path / "signing" / "site0.pem").read_bytes() == pem
    assert oct((tmp_path / "signing" / "site0.pem").stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["keys", "new", "--party", "bad name!", "--out", "{tmp}/k"], "party names"),
        (
            ["keys", "assemble", "--keys", "{tmp}/k", "--public", "{tmp}/no", "--expect", "{tmp}/p.json"],
            "p.json: no such file",
        ),
        (["keys", "export-public", "--keys", "{tmp}/nothing", "--out", "{tmp}/pub"], "fingerprints.json"),
    ],
)
def test_ceremony_mistakes_are_one_line_errors(tmp_path: Path, args: list[str], names: str) -> None:
    from typer.testing import CliRunner

    from secure_fed.cli import app

    result = CliRunner().invoke(app, [a.format(tmp=tmp_path) for a in args])
    assert result.exit_code == 2
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and names in lines[0], result.output
