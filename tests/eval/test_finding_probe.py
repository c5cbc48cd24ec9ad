"""benchmarks/finding_probe.py, the command docs/RESULTS.md gives for the readability of findings."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.scripts import run_script


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_script("benchmarks/finding_probe.py", *args, env={"SECURE_FED_CACHE": str(tmp_path / "cache")})


@pytest.mark.slow
def test_probe_reads_references_exactly_and_scores_every_finding(tmp_path):
    config = tmp_path / "quick.toml"
    config.write_text("[data.synth]\npatients = 20\n[model]\npretrain_steps = 20\n")
    done = _run(tmp_path, "--config", str(config), "--seeds", "0,1")
    assert done.returncode == 0, done.stderr
    runs = json.loads(done.stdout)["runs"]
    assert [r["seed"] for r in runs] == [0, 1]
    for run in runs:
        # the labeler reads the synthetic references exactly: it caps no generator's CE-F1
        assert run["references"] == {"CE-F1": 1.0, "CE-F1-micro": 1.0}
        # the tiny preset's grid: 8 x 8 patches of a 32-pixel image, plus the class token
        assert run["visual_tokens"] == 65
        findings = run["probe"]["findings"]
        assert set(findings) == {"nodule", "effusion", "cardiomegaly", "consolidation"}
        assert sum(f["test_positives"] for f in findings.values()) > 0
        assert all(0.0 <= f["f1"] <= 1.0 for f in findings.values())
        assert 0.0 <= run["probe"]["CE-F1"] <= 1.0
    assert runs[0]["test_visits"] != runs[1]["test_visits"] or runs[0]["probe"] != runs[1]["probe"]


@pytest.mark.slow
def test_bad_arguments_are_one_line(tmp_path):
    missing = tmp_path / "missing.toml"
    for args, expected in (
        (("--seeds", "x"), "error: --seeds: "),
        (("--config", str(missing)), f"error: {missing}: no such config file"),
    ):
        done = _run(tmp_path, *args)
        assert done.returncode == 2
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(expected), done.stderr
