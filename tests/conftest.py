"""Shared fixtures: a small, fast configuration and one cache for the whole session.

Every test runs with Flower telemetry off and Ray on loopback (secure_fed sets both on import).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
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


# `make test-fast` runs the tests not marked `slow`; a test that starts a federation process without
# the marker would make it slow unseen, so such a start fails the test. Seen from here: a process
# started by a test or its fixtures (a script's own children are not).
_FLOWER_BINARIES = {
    "flower-superlink",
    "flower-supernode",
    "flwr-simulation",
    "flwr-serverapp",
    "flwr-clientapp",
}


def _argv(args: object) -> list[str]:
    if isinstance(args, str):
        return args.split()
    return [str(a) for a in args] if isinstance(args, Sequence) else []


def starts_a_federation(args: object) -> bool:
    """Whether a command line starts Flower's SuperLink or SuperNode, or a `secure-fed run`."""
    argv = _argv(args)
    names = [Path(a).name for a in argv]
    if "--help" in argv:
        return False
    if _FLOWER_BINARIES & set(names) or "--superexec-auth-secret-file" in argv:  # the run's own SuperLink
        return True
    for i, name in enumerate(names[:-1]):
        if name in ("secure-fed", "secure_fed.cli") and names[i + 1] == "run":
            return True
        # `secure-fed client` starts a SuperNode of its own (a dry run prints its command only)
        if name in ("secure-fed", "secure_fed.cli") and names[i + 1] == "client" and "--dry-run" not in argv:
            return True
    return "make" in names and "demo" in names


_unmarked: list[pytest.Item] = []  # the test running now, where it is not marked slow or bench
_started: list[str] = []


class _WatchedPopen(subprocess.Popen):
    def __init__(self, args: object, *rest: object, **kwargs: object) -> None:
        # a command that cannot run starts nothing (a test of a SuperLink that fails to start)
        runnable = bool(_argv(args)) and shutil.which(_argv(args)[0]) is not None
        if _unmarked and runnable and starts_a_federation(args):
            _started.append(" ".join(_argv(args))[:200])
            raise RuntimeError("a test not marked slow starts a federation process")
        super().__init__(args, *rest, **kwargs)  # type: ignore[arg-type]


def _watched(item: pytest.Item) -> Iterator[None]:
    if item.get_closest_marker("slow") or item.get_closest_marker("bench"):
        yield
        return
    _unmarked.append(item)
    _started.clear()
    saved, subprocess.Popen = subprocess.Popen, _WatchedPopen  # type: ignore[misc]
    try:
        yield
    finally:
        subprocess.Popen = saved  # type: ignore[misc]
        _unmarked.clear()
    if _started:
        pytest.fail(f"{item.nodeid} starts {_started[0]!r}: mark it @pytest.mark.slow", pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    yield from _watched(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    yield from _watched(item)


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
