"""Run a script of the repository (benchmarks/...) as its documented command does: from the repository
root, on one torch thread, telemetry off, with stdout and stderr captured; or import one (tools/ and
benchmarks/ are not packages) to test its functions."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

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


def load_script(relative: str) -> ModuleType:
    """tools/NAME.py or benchmarks/NAME.py as module NAME (registered, so dataclasses and pickling
    inside it resolve)."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module
