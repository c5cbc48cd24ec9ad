"""The README's verifier commands, run as written on a run folder laid out as they expect."""

from __future__ import annotations

import glob
import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from secure_fed.audits.keys import key_fingerprint
from secure_fed.cli import app

from .conftest import build_run

README = Path(__file__).resolve().parents[2] / "README.md"
VERIFIER = ("secure-fed keys export-public", "secure-fed audit verify", "secure-fed audit report")


def _readme_lines() -> list[str]:
    lines = [line.split("  #")[0].strip() for line in README.read_text().splitlines()]
    return [line for line in lines if line.startswith(VERIFIER)]


def test_readme_verifier_commands_run_and_never_use_private_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = _readme_lines()
    assert [line.split()[1:3] for line in lines] == [
        ["keys", "export-public"],
        ["audit", "verify"],
        ["audit", "report"],
    ]
    run = build_run(tmp_path / "runs" / "dp8")  # the folder the README names
    assert run.keys_dir == tmp_path / "runs" / "dp8" / "keys"
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    # A whole KEYS folder as `keys init` makes it, holding the signing keys the logs were signed with.
    full = tmp_path / "full-keys"
    made = runner.invoke(app, ["keys", "init", "--out", str(full), "--parties", ",".join(run.keys)])
    assert made.exit_code == 0, made.output
    fingerprints = json.loads((full / "fingerprints.json").read_text())
    for party in run.keys:
        for suffix in (".pem", ".pub"):
            shutil.copy2(run.keys_dir / "signing" / f"{party}{suffix}", full / "signing" / f"{party}{suffix}")
        fingerprints["signing"][party] = key_fingerprint(run.keys[party].public_key())
    (full / "fingerprints.json").write_text(json.dumps(fingerprints))
    shutil.rmtree(run.keys_dir)
    shutil.copytree(full, run.keys_dir)
    for line in lines:
        words = shlex.split(line)[1:]
        args = [match for word in words for match in (sorted(glob.glob(word)) if "*" in word else [word])]
        if words[0] == "audit":
            keys = Path(args[args.index("--keys") + 1])
            assert keys.is_dir() and not list(keys.rglob("*.pem")), (
                f"{line}: a verifier gets public keys only"
            )
        result = runner.invoke(app, args)
        assert result.exit_code == 0, (line, result.output)
        assert "private keys" not in result.output
    assert Path("report.html").is_file()
    page = Path("report.html").read_text()
    assert "<h1 id='title'>VERIFIED — every site within budget: max ε " in page
    assert re.search(r"<th>accountant</th>.*<td>RDP</td>", page, re.DOTALL)
