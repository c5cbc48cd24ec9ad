"""A second run in a finished run's folder must not touch the first run's audit trail.

Seen: `make demo` twice (or `secure-fed run --out D` twice) appended the second run's `hello` and
refused `train` records after the first run's signed head record, so the first run's logs stopped
verifying (`truncated`); and the run id was a hash of the folder, so both runs carried the same id.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from secure_fed.audits.log import AuditLog, AuditLogError
from secure_fed.verifier.verify import verify_logs


def test_a_closed_log_is_never_reopened(tmp_path: Path) -> None:
    """A second run in a finished run's folder appended after the head record: the first run's log
    then read `truncated` and stopped verifying. A log that ends with its head opens closed."""
    key = Ed25519PrivateKey.generate()
    path = tmp_path / "a.jsonl"
    with AuditLog(path, "site-0", "run-1", key) as log:
        log.append("policy", {"budget": 3.0})
    before = path.read_bytes()
    log = AuditLog(path, "site-0", "run-1", key)
    assert log.closed
    with pytest.raises(AuditLogError, match="closed"):
        log.append("alpha", {"alpha": 1.0}, round=1)
    assert log.close() is None
    log.abandon()
    assert path.read_bytes() == before
    assert verify_logs([path], {"site-0": key.public_key()}).ok


def _finished_run(folder: Path) -> dict[Path, bytes]:
    """A folder as a finished run leaves it: its configuration and a closed, signed log."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    with AuditLog(folder / "audit" / "server.jsonl", "server", "run-1", Ed25519PrivateKey.generate()) as log:
        log.append("run_config", {})
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_new_run_refuses_a_folder_that_holds_a_run_before_writing_anything(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from secure_fed.cli import app

    folder = tmp_path / "demo"
    before = _finished_run(folder)
    result = CliRunner().invoke(app, ["run", "--out", str(folder), "--engine", "inprocess"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert f"--out {folder}: holds a run already" in lines[0] and "--resume" in lines[0], lines[0]
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before
    (folder / "metrics.json").write_text("{}")  # finished: --resume would not take it either
    result = CliRunner().invoke(app, ["run", "--out", str(folder), "--engine", "inprocess"])
    assert result.exit_code == 2 and "that run finished: give another --out" in result.output


@pytest.mark.parametrize("inside", ["audit", "checkpoint/new", "flower"])
def test_a_new_run_refuses_a_folder_inside_a_runs_folder(tmp_path: Path, inside: str) -> None:
    """Seen: `--out runs/hard/audit` was taken, a new run written into a finished run's audit folder."""
    from typer.testing import CliRunner

    from secure_fed.cli import app

    folder = tmp_path / "runs" / "hard"
    before = _finished_run(folder)
    out = folder / inside
    result = CliRunner().invoke(app, ["run", "--out", str(out), "--engine", "inprocess"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert f"--out {out}: lies inside the run folder {folder.resolve()}" in lines[0], lines[0]
    assert "outside it" in lines[0]
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before
    assert not (folder / "checkpoint").exists() and not (folder / "flower").exists()


def test_a_missing_key_folder_is_refused_before_the_run_folder_exists(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from secure_fed.cli import app

    out, keys = tmp_path / "run", tmp_path / "no-keys"
    result = CliRunner().invoke(app, ["run", "--he", "--keys", str(keys), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert f"--keys {keys}: no such key folder" in result.output, result.output
    assert not out.exists()


def test_each_run_gets_its_own_id_and_a_resumed_run_keeps_it(tmp_path: Path) -> None:
    from secure_fed.launch.runner import run_id_for

    first = run_id_for(tmp_path / "a")
    assert run_id_for(tmp_path / "a", resume=True) == first  # --resume continues the same run
    (tmp_path / "a" / "run_id").unlink()
    # the same folder, a new run: not a hash of the path
    assert run_id_for(tmp_path / "a") != first
    assert run_id_for(tmp_path / "b") not in (first, run_id_for(tmp_path / "a"))


def test_a_finished_run_is_not_resumed(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from secure_fed.cli import app

    folder = tmp_path / "done"
    before = _finished_run(folder)
    (folder / "metrics.json").write_text("{}")
    before[folder / "metrics.json"] = b"{}"
    result = CliRunner().invoke(app, ["run", "--resume", str(folder)])
    assert result.exit_code == 2, result.output
    assert f"--resume {folder}: that run finished" in result.output and "--out" in result.output
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before
