"""The commands docs/BENCHMARKS.md gives for the GPU, tokenizer and threads sections run as documented."""

from __future__ import annotations

import importlib.util
import json
import sys
from typing import Any

import pytest
import torch

from tests.scripts import ROOT, run_script


def _bench_tables() -> Any:
    spec = importlib.util.spec_from_file_location("bench_tables", ROOT / "tools" / "bench_tables.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_tables"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.bench
def test_gpu_benchmark_command():
    # the documented command; without CUDA it must refuse in one line, not crash
    done = run_script("benchmarks/gpu.py")
    if torch.cuda.is_available():
        assert done.returncode == 0, done.stderr
        assert set(json.loads(done.stdout)["presets"]) == {"small", "paper"}
    else:
        assert done.returncode == 2
        assert done.stderr.strip().splitlines() == [
            "error: train.device = 'cuda' but this machine has no usable CUDA device "
            "(torch.cuda.is_available() is False); set train.device = 'cpu' or 'auto'"
        ]


@pytest.mark.bench
def test_gpu_benchmark_smoke_on_cpu():
    done = run_script("benchmarks/gpu.py", "--device", "cpu", "--quick", "--presets", "paper")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)["presets"]["paper"]
    assert result["trainable_parameters"] > 0 and result["rows_per_step"] > 0
    for variant in ("dp", "non_private"):
        assert result[variant]["median_s"] > 0 and result[variant]["samples_per_s"] > 0


def test_tokenizer_measurement_command():
    done = run_script("benchmarks/tokenizer_coverage.py")  # the documented command
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    real = result["real_looking"]
    assert real["words+chars"]["unk_rate"] < 0.01 < real["public"]["unk_rate"]
    assert real["bytes"]["unk_rate"] == 0.0
    assert real["bytes"]["tokens_per_report_mean"] > real["words+chars"]["tokens_per_report_mean"]
    assert result["synthetic"]["public"]["unk_rate"] == 0.0
    # docs/BENCHMARKS.md's table is this output shaped by tools/bench_tables.py: its fields are still there
    table = _bench_tables().shape("tokenizer-coverage", result, "cmd", "machine", None, "0" * 40)
    assert [r[0] for r in table["rows"]] == ["`public`", "`words+chars`", "`bytes`"]


@pytest.mark.bench
def test_threads_benchmark_command():
    # The documented command with its documented --steps, shortened: the test checks the cells and
    # the table's shape, which do not depend on how many steps each median is over. 35 steps in each
    # of 4 cells, two of them 2 threads beside a spinning core, took 330 s on a loaded machine.
    done = run_script("benchmarks/threads.py", "--steps", "3", "--warmup", "1")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    cells = {(c["busy_cores"], c["threads"]): c for c in result["cells"]}
    assert set(cells) == {(0, 1), (0, result["cores"]), (1, 1), (1, result["cores"])}
    assert all(0 < c["min_s"] <= c["median_s"] for c in cells.values())
    # docs/BENCHMARKS.md's table is this output shaped, one column per run
    table = _bench_tables().shape("threads", [result, result], "cmd", "machine", None, "0" * 40)
    assert table["columns"][2:] == [f"median s/step (run {i}, {result['steps']} steps)" for i in (1, 2)]
    assert {(r[0], r[1]) for r in table["rows"]} == set(cells)
