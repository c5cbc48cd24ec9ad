"""`secure-fed run` on Flower's simulation runtime (Ray): it completes, its audit logs verify, every
socket of the run's process tree (Ray's GCS, raylet, workers and actors included) stays on
loopback, and it computes exactly what the in-process engine computes on the same configuration.
SecAgg+ between Ray actors runs in test_worker_killed.py (a hardened run killed and resumed): one
Ray run fewer in the suite.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from secure_fed.config import load_config
from tests.server.test_deployment import BIN, SocketWatch, is_loopback, small_run_toml, stop_all, warm_cache

ROUNDS = 2
RUN_TIMEOUT = 300.0


def test_is_loopback() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("::ffff:127.0.0.1")
    assert not is_loopback("192.0.2.2") and not is_loopback("::ffff:192.0.2.2")
    assert not is_loopback("0.0.0.0") and not is_loopback("::")


def run_cli(
    config: Path, out: Path, *extra: str, watch: SocketWatch | None = None
) -> subprocess.CompletedProcess:
    log = out.with_suffix(".log")
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [str(BIN / "secure-fed"), "run", "--config", str(config), "--out", str(out), *extra],
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        if watch is not None:
            watch.add(proc.pid)
            watch.start()
        try:
            proc.wait(timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"`secure-fed run {' '.join(extra)}` did not finish within {RUN_TIMEOUT:.0f} s")
        finally:
            if watch is not None:
                watch.stop()
            stop_all([proc])
    return subprocess.CompletedProcess(proc.args, proc.returncode, log.read_text(errors="replace"), "")


@pytest.mark.slow
def test_simulation_engine_on_loopback_and_equal_to_inprocess(tmp_path: Path, cache_dir: Path) -> None:
    config = small_run_toml(tmp_path / "run.toml", tmp_path / "unused", cache_dir, ROUNDS)
    warm_cache(load_config(config))

    watch = SocketWatch(roots=[])
    sim = run_cli(config, tmp_path / "sim", watch=watch)  # fed.engine defaults to "simulation"
    assert sim.returncode == 0, sim.stdout[-4000:]
    assert "engine=simulation" in sim.stdout

    # Ray ran, and only on loopback: GCS, raylet and the actors were seen, none off 127.0.0.1/::1.
    names = {name for _, name, *_ in watch.seen}
    assert {"gcs_server", "raylet"} <= names, names
    assert any("ClientAppActor" in n for n in names), names
    assert watch.listening(), "no listening socket seen: the watch did not see Ray"
    assert watch.off_loopback() == [], watch.off_loopback()
    # Ray's dashboard head, even without a dashboard, runs a usage-stats module that asks the cloud
    # metadata service (169.254.169.254) which cloud it is on, whatever RAY_USAGE_STATS_ENABLED
    # says; a poll every 0.5 s catches that 1 s request only sometimes, so its process is refused.
    assert not [c for c in watch.commands if "dashboard/dashboard.py" in c], watch.commands
    # Flower's supported path (a SuperLink of the run's own, run_simulation_process): nothing
    # deprecated was called, on the console or in Flower's own logs of the run, and no filter sits
    # between them (test_cli); the SuperLink, seen on loopback above, does not outlive the run.
    flower_logs = sorted((tmp_path / "sim" / "flower").glob("*.log"))
    assert [p.name for p in flower_logs] == ["simulation.log", "superlink.log"]
    for text in (sim.stdout, *(p.read_text() for p in flower_logs)):
        assert "deprecat" not in text.lower(), text[-3000:]
    assert any("flower_superlink" in c for c in watch.commands), watch.commands
    assert not _running_with(str(tmp_path / "sim" / "flower" / "superlink.log"))

    sim_metrics = json.loads((tmp_path / "sim" / "metrics.json").read_text())
    assert sim_metrics["rounds"] == ROUNDS and len(sim_metrics["per_round"]) == ROUNDS
    logs = sorted((tmp_path / "sim" / "audit").glob("*.jsonl"))
    assert [p.stem for p in logs] == ["server", "site0", "site1", "site2"]
    keys = tmp_path / "sim" / "keys"
    verify = subprocess.run(
        [str(BIN / "secure-fed"), "audit", "verify", *map(str, logs), "--keys", str(keys)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr

    inproc = run_cli(config, tmp_path / "inproc", "--engine", "inprocess")
    assert inproc.returncode == 0, inproc.stdout[-4000:]
    in_metrics = json.loads((tmp_path / "inproc" / "metrics.json").read_text())
    assert sim_metrics["test"].keys() == in_metrics["test"].keys()
    for name, value in in_metrics["test"].items():
        assert sim_metrics["test"][name] == pytest.approx(value, abs=1e-9, rel=0), name
    assert sim_metrics["alpha"] == pytest.approx(in_metrics["alpha"], abs=1e-9, rel=0)


def _running_with(word: str) -> list[int]:
    """The processes whose command line holds ``word``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if word in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found
