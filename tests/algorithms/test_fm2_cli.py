"""FM2 from the command line and the documented Table-1 command: a multi-modality manifest made by
`data synth --kind multimodal`, a DP run over it, bad input named by file and line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from secure_fed.cli import app

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def _invoke_synth(out: Path, *extra: str) -> Any:
    return runner.invoke(app, ["data", "synth", "--kind", "multimodal", "--out", str(out), *extra])


def _synth(out: Path, *extra: str) -> Path:
    result = _invoke_synth(out, "--sites", "3", "--per-class", "6", *extra)
    assert result.exit_code == 0, result.output
    assert re.search(r"site0 \d+, site1 \d+, site2 \d+", result.output.replace("\n", ""))
    return out / "manifest.jsonl"


@pytest.mark.slow  # a whole DP run from the CLI: make test-fast leaves it out
def test_a_dp_fm2_run_over_a_synthesised_manifest(tmp_path, cache_dir) -> None:
    manifest = _synth(tmp_path / "mm", "--phi", "0.3")
    records = [json.loads(line) for line in manifest.read_text().splitlines()]
    assert {r["site"] for r in records} == {"site0", "site1", "site2"}
    config = tmp_path / "fm2.toml"
    config.write_text(
        f'[data]\nkind = "imaging"\n[data.imaging]\npath = "{manifest}"\n'
        f'[fed]\nmethod = "fm2"\nrounds = 1\nengine = "inprocess"\n[model]\ncache_dir = "{cache_dir}"\n'
        "[train]\nthreads = 1\n"
    )
    out = tmp_path / "run"
    result = runner.invoke(
        app, ["run", "--config", str(config), "--dp", "--target-epsilon", "8", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["method"] == "fm2" and 0.0 <= metrics["test"]["accuracy"] <= 1.0
    assert set(metrics["privacy"]["epsilon"]) == {"site0", "site1", "site2"}


def test_a_bad_record_is_named_by_file_and_line(tmp_path, cache_dir) -> None:
    manifest = _synth(tmp_path / "mm")
    lines = manifest.read_text().splitlines()
    bad = json.loads(lines[2]) | {"modality": "pet"}
    lines[2] = json.dumps(bad)
    manifest.write_text("\n".join(lines) + "\n")
    out = tmp_path / "run"
    config = tmp_path / "bad.toml"
    config.write_text(
        f'[data]\nkind = "imaging"\n[data.imaging]\npath = "{manifest}"\n[fed]\nmethod = "fm2"\n'
    )
    result = runner.invoke(app, ["run", "--config", str(config), "--out", str(out)])
    assert result.exit_code != 0
    assert f"{manifest}:3: modality: 'pet'" in result.output and "Traceback" not in result.output


def test_disjoint_split_refuses_more_sites_than_modalities(tmp_path) -> None:
    result = _invoke_synth(tmp_path / "d", "--sites", "9", "--split", "disjoint")
    assert result.exit_code != 0 and "9 sites cannot each hold their own of 5 modalities" in result.output
    assert not (tmp_path / "d").exists()  # refused before rendering anything


@pytest.mark.slow
def test_the_documented_table_command_runs(tmp_path, cache_dir) -> None:
    """docs/RESULTS.md's FM2 table command, on a tiny grid (later flags override the documented ones)."""
    text = (ROOT / "docs" / "RESULTS.md").read_text()
    section = text[text.index("## FM2") :]
    commands = [
        ln.split() for ln in section.splitlines() if ln.startswith(".venv/bin/python benchmarks/fm2_table.py")
    ]
    assert len(commands) == 2  # the table and its DP variant
    command = commands[1]  # the DP one: it also exercises --epsilon (later flags shrink the grid)
    tiny = [
        "--seeds",
        "0,1",
        "--phis",
        "0.1",
        "--participation",
        "1.0",
        "--methods",
        "fm2,fedavg",
        "--rounds",
        "1",
        "--per-class",
        "4",
        "--sites",
        "3",
        "--no-disjoint",
        "--out",
        str(tmp_path / "t"),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SECURE_FED_CACHE": str(cache_dir)}
    done = subprocess.run(
        [sys.executable, *command[1:], *tiny], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    summary = json.loads(next(ln for ln in lines if ln.startswith('{"summary"')))["summary"]
    assert set(summary) == {"fm2|overlapped|0.1|1", "fedavg|overlapped|0.1|1"}
    cell = json.loads((tmp_path / "t" / "fm2-overlapped-phi0.1-p1-s0" / "metrics.json").read_text())
    assert all(0 < e["rdp"] <= 8 for e in cell["privacy"]["epsilon"].values())  # the DP variant ran
    assert all(s["n"] == 2 and 0 <= s["mean"] <= 1 for s in summary.values())
    assert any(ln.startswith("| fm2 | ") for ln in lines)


@pytest.mark.slow
def test_the_readme_fm2_commands_run_as_written(tmp_path, cache_dir, monkeypatch) -> None:
    text = (ROOT / "README.md").read_text()
    lines = [ln.split("#")[0].split() for ln in text.splitlines() if ln.startswith("secure-fed ")]
    commands = [c for c in lines if "fm2" in c or "multimodal" in c]
    assert len(commands) == 2
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SECURE_FED_CACHE", str(cache_dir))
    for command in commands:
        result = runner.invoke(app, command[1:])
        assert result.exit_code == 0, (command, result.output[-2000:])
    assert (tmp_path / "data" / "mm" / "manifest.jsonl").exists()
    metrics = json.loads((tmp_path / "runs" / "fm2" / "metrics.json").read_text())
    assert metrics["method"] == "fm2" and metrics["rounds"] == 3
    assert all(e["rdp"] <= 8 for e in metrics["privacy"]["epsilon"].values())
    assert (tmp_path / "runs" / "fm2" / "report.html").exists()
