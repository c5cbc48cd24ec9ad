"""`audit verify` as a compliance officer meets it: a public-keys folder, one message for a wrong
key folder (with fingerprints), and a warning when a party's log is missing (issue 15.7)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from secure_fed.audits.keys import key_fingerprint, load_public_keys, write_key_pair
from secure_fed.verifier.verify import verify_logs
from secure_fed.verifier.verify_console import verify_main

from .conftest import SITES, Run


def _public_folder(run: Run, dest: Path, nested: bool) -> Path:
    """What `secure-fed keys export-public` writes: the .pub files only (flat or under signing/)."""
    folder = dest / "signing" if nested else dest
    folder.mkdir(parents=True)
    for pub in sorted((run.keys_dir / "signing").glob("*.pub")):
        shutil.copy2(pub, folder / pub.name)
    return dest


@pytest.mark.parametrize("nested", [False, True])
def test_a_public_keys_folder_verifies_without_private_keys(
    pristine: Run, tmp_path: Path, capsys: pytest.CaptureFixture[str], nested: bool
) -> None:
    public = _public_folder(pristine, tmp_path / "pub", nested)
    assert not list(public.rglob("*.pem"))
    assert set(load_public_keys(public)) == {*SITES, "server"}
    assert verify_main(pristine.all_paths, public) == 0
    out = capsys.readouterr().out
    assert "VERIFIED: every log is complete" in out and "private keys" not in out


def test_the_folder_with_private_keys_is_flagged(pristine: Run, capsys: pytest.CaptureFixture[str]) -> None:
    assert verify_main(pristine.all_paths, pristine.keys_dir) == 0  # still verifies...
    out = capsys.readouterr().out
    assert "also holds private keys" in out and "keys export-public" in out  # ...but says so


def test_a_wrong_key_folder_is_one_problem_per_log_with_fingerprints(
    pristine: Run, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wrong = tmp_path / "other-run-keys"
    for party in (*SITES, "server"):
        write_key_pair(wrong, party, Ed25519PrivateKey.generate())
    given = load_public_keys(wrong)
    result = verify_logs(pristine.all_paths, given)
    per_log = [p for p in result.problems if "key mismatch" in p.reason]
    # One per log: not one per record, nor again for each copy of a site's records in the server's log.
    assert len(per_log) == len(pristine.all_paths) == len(result.problems)
    assert any("cross-log checks" in w for w in result.warnings)
    assert not [p for p in result.problems if "signature does not verify" in p.reason]
    site0 = next(p for p in per_log if p.path == str(pristine.paths["site-0"]))
    records = sum(1 for _ in pristine.paths["site-0"].open())
    assert f"none of site-0's {records} signature(s)" in site0.reason
    assert key_fingerprint(given["site-0"])[:16] in site0.reason  # the key given...
    assert "key_fingerprints record says 0000000000000000" in site0.reason  # ...and the log's
    assert "export-public" in site0.reason
    assert verify_main(pristine.all_paths, wrong) == 1
    out = capsys.readouterr().out
    listed = [line for line in out.splitlines() if line.startswith("  ") and "key mismatch" in line]
    assert len(listed) == len(pristine.all_paths)  # each log once, under the verdict that names the first
    assert out.count("key mismatch") == len(pristine.all_paths) + 1


def test_a_missing_log_is_a_warning(pristine: Run) -> None:
    keys = load_public_keys(pristine.keys_dir)
    without_server = verify_logs([pristine.paths[site] for site in SITES], keys)
    assert any(w.startswith("server: log not supplied") for w in without_server.warnings)
    without_site = verify_logs([pristine.paths["site-0"], pristine.paths["server"]], keys)
    assert any(w.startswith("site-1: log not supplied") for w in without_site.warnings)
    assert not verify_logs(pristine.all_paths, keys).warnings


def test_a_file_that_is_no_audit_log_is_one_line(
    pristine: Run, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A README passed by mistake is named once as not an audit log, not once per line as damaged."""
    notes = tmp_path / "notes.md"
    notes.write_text("# Notes\n\n" + "".join(f"line {k}: text, not a record\n" for k in range(3725)))
    assert verify_main([*pristine.all_paths, notes], pristine.keys_dir) == 1
    out = capsys.readouterr().out
    named = [line for line in out.splitlines() if "notes.md" in line and "not an audit log" in line]
    assert named and "record damaged" not in out, out
    assert len([line for line in out.splitlines() if line.startswith("  ") and "notes.md" in line]) == 1, out


def test_line_numbers_print_as_numbers_not_emoji(
    pristine: Run, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`path:100:` holds rich's emoji code `:100:` (and `:1234:`): the console must print the digits."""
    damaged = tmp_path / "site-0.jsonl"
    lines = pristine.paths["site-0"].read_text().splitlines(keepends=True)
    damaged.write_text("".join(lines) + "not a record\n" * (1300 - len(lines)))
    verify_main([damaged], pristine.keys_dir)
    out = capsys.readouterr().out
    for number in (100, 1234):
        assert f"site-0.jsonl:{number}: not valid JSON" in out, out[-2000:]
    assert "\N{HUNDRED POINTS SYMBOL}" not in out and "\N{INPUT SYMBOL FOR NUMBERS}" not in out
