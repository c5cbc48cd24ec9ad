"""Shared fixtures: a small, fast configuration and one cache for the whole session.

Every test runs with Flower telemetry off and Ray on loopback (secure_fed sets both on import).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import secure_fed  # noqa: F401  (hardens the environment before Flower/Ray are imported)
from secure_fed.config import RunConfig, build_config

assert os.environ["FLWR_TELEMETRY_ENABLED"] == "0"


# Tiny models gain nothing from intra-op threads, and on a loaded 2-core machine a run's default
# two threads made an in-process test run 3.5 times slower (55 s against 190-210 s, measured while
# two sweeps ran). Subprocesses (`secure-fed run`, SuperNodes) inherit the variable; a test of
# `train.threads` sets its own count.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread_per_session() -> Iterator[None]:
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """Tiny matrices gain nothing from intra-op threads, and on a shared 2-core machine the spinning
    OpenMP workers made model tests ~10× slower (measured: 0.5 s vs 3–9 s CPU per JVP pass)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Cohorts and the pretrained base are built once per session and shared by the tests."""
    env = os.environ.get("SECURE_FED_TEST_CACHE")
    return Path(env) if env else tmp_path_factory.mktemp("secure_fed_cache")


@pytest.fixture(scope="session", autouse=True)
def _hermetic_cache(cache_dir: Path) -> Iterator[None]:
    """A config's default model.cache_dir ($SECURE_FED_CACHE, else ~/.cache) is the session's cache."""
    saved = os.environ.get("SECURE_FED_CACHE")
    os.environ["SECURE_FED_CACHE"] = str(cache_dir)
    yield
    if saved is None:
        os.environ.pop("SECURE_FED_CACHE", None)
    else:
        os.environ["SECURE_FED_CACHE"] = saved


# distributed DP on the small config: every one of its 3 sites needed (h = 3, c = 1), one private
# step a round: `make_config(**DISTRIBUTED_DP, fed__method=...)`
DISTRIBUTED_DP: dict[str, object] = {
    "dp__enabled": True,
    "dp__target_epsilon": 8.0,
    "dp__sample_rate": 0.5,
    "dp__noise": "distributed",
    "dp__honest_min": 3,
    "train__local_epochs": 1,
}


def small_config(cache_dir: Path, out: Path, **overrides: object) -> RunConfig:
    data: dict = {
        "seed": 0,
        "out": str(out),
        "data": {
            "synth": {"sites": 3, "patients": 16, "visits": 3},
            "max_visits": 3,
            "val_fraction": 0.25,
            "test_fraction": 0.25,
        },
        "model": {"cache_dir": str(cache_dir), "pretrain_steps": 150},
        "train": {"batch_size": 8},
        "fed": {"rounds": 2, "engine": "inprocess"},
    }
    for dotted, value in overrides.items():
        node = data
        *parents, leaf = dotted.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return build_config(data)


@pytest.fixture
def make_config(cache_dir: Path, tmp_path: Path):
    """make_config(fed__method="fedavg", dp__enabled=True, ...) → a small RunConfig in tmp_path."""

    def make(name: str = "run", **overrides: object) -> RunConfig:
        return small_config(cache_dir, tmp_path / name, **overrides)

    return make
