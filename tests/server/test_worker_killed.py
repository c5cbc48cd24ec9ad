"""A simulation worker killed mid-round (SIGKILL, as Ray's out-of-memory monitor and the kernel's
OOM killer end one): the console names each site and the cause once, nothing of Ray's text reaches
a signed record or the report, the run exits non-zero, and `--resume` finishes it. The run sums its
updates with SecAgg+, so the protocol between Ray actors is exercised here too, across the resume."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from secure_fed.config import load_config
from tests.server.test_deployment import BIN, small_run_toml, stop_all, warm_cache

ROUNDS = 2
TIMEOUT = 600.0
# what Ray's texts carry and a signed record or the console must not: an actor's pid, ip and id,
# the memory monitor's table of the host's processes, a traceback, a framework class
RAW = re.compile(
    r"Top 10|\bPID\b|pid[:=]|actor_id|ActorDiedError|ray\.exceptions|Traceback|<class '|"
    r"UNEXPECTED_SYSTEM_EXIT|worker process has died|python-core-worker|ClientAppActor",
)


def _actor_workers(root: int) -> list[psutil.Process]:
    """The Ray worker processes running a ClientAppActor under the run's process tree."""
    found = []
    for proc in psutil.Process(root).children(recursive=True):
        try:
            if "ClientAppActor" in " ".join(proc.cmdline()):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _wait_for(text: str, log: Path, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            pytest.fail(f"the run ended before {text!r}:\n{log.read_text()[-4000:]}")
        time.sleep(0.2)
    pytest.fail(f"no {text!r} within {timeout:.0f} s:\n{log.read_text()[-4000:]}")


def _run(*args: str, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [str(BIN / "secure-fed"), "run", *args],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "COLUMNS": "100"},
    )


@pytest.mark.slow
def test_a_killed_worker_stops_the_run_clearly_and_resume_finishes_it(
    tmp_path: Path, cache_dir: Path
) -> None:
    config = small_run_toml(tmp_path / "run.toml", tmp_path / "unused", cache_dir, ROUNDS)
    warm_cache(load_config(config))
    out = tmp_path / "run"
    log = tmp_path / "run.log"
    proc = _run("--config", str(config), "--out", str(out), "--method", "fedavg", "--secagg", log=log)
    try:
        _wait_for(f"round 1/{ROUNDS}", log, proc, TIMEOUT)
        workers = _actor_workers(proc.pid)
        assert workers, "no ClientAppActor worker found under the run"
        for worker in workers:
            worker.kill()  # SIGKILL
        gone, alive = psutil.wait_procs(workers, timeout=30)
        assert not alive and gone, "the worker outlived its SIGKILL"
        assert not any(psutil.pid_exists(p.pid) and p.is_running() for p in gone)
        proc.wait(timeout=TIMEOUT)
    finally:
        stop_all([proc])
    console = log.read_text(errors="replace")
    assert proc.returncode == 1, console[-4000:]
    assert f"round {ROUNDS}/{ROUNDS}" not in console, console[-4000:]  # the kill landed mid-run

    # one line per site and cause, naming both; none of Ray's text
    killed = re.findall(r"(site\d): its worker process was killed \(SIGKILL", console)
    assert killed, console[-4000:]
    assert len(killed) == len(set(killed)), console[-4000:]
    assert not RAW.search(console), RAW.search(console)
    last = [line for line in console.splitlines() if line.startswith("error:")]
    assert len(last) == 1 and f"secure-fed run --resume {out}" in last[0], console[-4000:]

    # the signed logs: the server's ends with our own code and reason, no head record (resumable)
    logs = sorted((out / "audit").glob("*.jsonl"))
    for path in logs:
        assert not RAW.search(path.read_text()), (path, RAW.search(path.read_text()))
    server = [json.loads(line) for line in (out / "audit" / "server.jsonl").read_text().splitlines()]
    assert server[-1]["event"] == "run_aborted", server[-1]
    assert server[-1]["payload"]["code"] == "worker_killed", server[-1]["payload"]
    assert not (out / "metrics.json").exists()
    report = subprocess.run(
        [str(BIN / "secure-fed"), "audit", "report", *map(str, logs), "--keys", str(out / "keys"),
         "--out", str(tmp_path / "report.html")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    html = (tmp_path / "report.html").read_text()
    assert "worker process was killed" in html, report.stdout + report.stderr
    assert not RAW.search(html), RAW.search(html)

    again = tmp_path / "resume.log"
    proc = _run("--resume", str(out), log=again)
    try:
        proc.wait(timeout=TIMEOUT)
    finally:
        stop_all([proc])
    assert proc.returncode == 0, again.read_text()[-4000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["rounds"] == ROUNDS and [r["round"] for r in metrics["per_round"]] == [1, 2]
    # every round's sum went through SecAgg+ (a plain sum reports a zero quantisation bound)
    assert metrics["secure_aggregation"] == "secagg+"
    assert all(0 < r["quantisation_bound"] < 1e-7 for r in metrics["per_round"]), metrics["per_round"]
    # the resumed run's logs go on from where the kill left them: every one verifies and is closed
    verify = subprocess.run(
        [str(BIN / "secure-fed"), "audit", "verify", *map(str, logs), "--keys", str(out / "keys")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert not RAW.search((out / "report.html").read_text())
