"""A simulation whose SuperLink stops hearing from it (a loaded machine starves the heartbeat):
the run ends with one line naming the cause and the key that sizes the wait, no traceback, exit 1.
Here the wait is 1 s, shorter than Ray takes to start, so the task lapses before the first round;
at the default (`fed.simulation_heartbeat_s`, 600 s) the same run finishes (tests/e2e)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from secure_fed.config import load_config
from tests.server.test_deployment import BIN, small_run_toml, warm_cache


@pytest.mark.slow
def test_a_lapsed_heartbeat_is_one_line_naming_the_key_and_the_resume(
    tmp_path: Path, cache_dir: Path
) -> None:
    config = small_run_toml(tmp_path / "run.toml", tmp_path / "unused", cache_dir, 1)
    config.write_text(config.read_text() + 'method = "fedavg"\nsimulation_heartbeat_s = 1.0\n')
    warm_cache(load_config(config))
    out = tmp_path / "run"
    done = subprocess.run(
        [str(BIN / "secure-fed"), "run", "--config", str(config), "--out", str(out)],
        capture_output=True, text=True, timeout=600, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    console = done.stdout + done.stderr
    assert done.returncode == 1, console[-4000:]
    assert "Traceback" not in console, console[-4000:]
    errors = [line for line in console.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, console[-4000:]
    assert "no heartbeat from the simulation process within 1 s" in errors[0]
    assert "simulation_heartbeat_s" in errors[0] and f"secure-fed run --resume {out}" in errors[0]
