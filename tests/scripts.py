"""Run a script of the repository (benchmarks/...) as its documented command does: from the repository
root, on one torch thread, telemetry off, with stdout and stderr captured."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_script(*args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1", "FLWR_TELEMETRY_ENABLED": "0", **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
