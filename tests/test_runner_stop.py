"""The simulation's stop takes each site log over from Ray's workers to sign the site's `run_aborted`.

Real Ray workers are stood in for by plain child processes: what matters is which process holds the
log's lock, and when it lets go."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from secure_fed.audits.keys import write_key_pair

# A site's worker: opens the site log (taking its lock), signs one record and forks a child that
# shares the open file, which forks one more: the lock has three holders, none of which lets go by
# itself. It prints "ready" once the log is held.
WORKER = """
import os, sys, time
from pathlib import Path
from secure_fed.audits.keys import load_private_key
from secure_fed.audits.log import AuditLog
path, keys = Path(sys.argv[1]), Path(sys.argv[2])
log = AuditLog(path, "site0", "run1", load_private_key(keys, "site0"))
log.append("alpha", {"note": "a record of the round"})
if os.fork() == 0:
    os.fork()
    time.sleep(600)
print("ready", flush=True)
time.sleep(600)
"""


# The stopping process: it freezes and ends every process it started, so it runs apart from pytest
# (whose other children it must not touch), with the worker as its child, as Ray's workers are the
# run's descendants.
DRIVER = """
import contextlib, os, signal, subprocess, sys
from pathlib import Path
from secure_fed.launch.runner import _reopen_ray_site_logs
worker, path, keys = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
if len(sys.argv) > 4:  # the first scan for holders finds none, as when the holder was forked after it
    import secure_fed.launch.runner.processes as runner  # where _reopen_ray_site_logs looks it up
    scan, scans = runner._own_processes, []

    def missing_the_first(scan=scan, scans=scans):
        scans.append(1)
        return scan() if len(scans) > 1 else []

    runner._own_processes = missing_the_first
command = [sys.executable, "-c", worker, str(path), str(keys)]
# its own session, to end whatever of it the stop leaves (frozen holders keep pytest's pipes open)
proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, start_new_session=True)
assert proc.stdout.readline().strip() == "ready"
try:
    logs = _reopen_ray_site_logs({"site0": path, "site1": path.with_name("site1.jsonl")}, keys, "run1")
finally:
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
print(" ".join(log.party for log in logs), flush=True)
for log in logs:
    log.append("run_aborted", {"signal": "SIGTERM", "round": 2}, round=2)
    log.abandon()
"""


# A worker whose holder has left the run's process tree before the stop: its child forks a
# grandchild and exits, so the grandchild (holding the log) is an orphan, as a worker's fork is when
# the stop kills its parent mid-fork. It writes its pid, so the test can end it should the stop not.
ORPHANING_WORKER = """
import os, sys, time
from pathlib import Path
from secure_fed.audits.keys import load_private_key
from secure_fed.audits.log import AuditLog
path, keys = Path(sys.argv[1]), Path(sys.argv[2])
log = AuditLog(path, "site0", "run1", load_private_key(keys, "site0"))
log.append("alpha", {"note": "a record of the round"})
read, write = os.pipe()
if os.fork() == 0:
    if os.fork() == 0:
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        (path.parent / "orphan.pid").write_text(str(os.getpid()))
        os.write(write, b"x")
        time.sleep(600)
    os._exit(0)
os.read(read, 1)
print("ready", flush=True)
time.sleep(600)
"""


def _stop(tmp_path, worker: str, *flags: str) -> tuple[subprocess.CompletedProcess, Path]:
    keys = tmp_path / "keys"
    write_key_pair(keys, "site0", Ed25519PrivateKey.generate())
    path = tmp_path / "audit" / "site0.jsonl"
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, worker, str(path), str(keys), *flags],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done, path


@pytest.mark.slow
def test_the_stop_takes_a_site_log_from_every_process_holding_it(tmp_path):
    done, path = _stop(tmp_path, WORKER)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["site0"], done.stdout  # site1 never wrote a log: nothing to sign there
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["event"] for r in records] == ["alpha", "run_aborted"]
    assert records[1]["prev_hash"] == records[0]["hash"]  # on the site's own chain


@pytest.mark.slow
def test_the_stop_takes_a_site_log_whose_holder_the_first_scan_missed(tmp_path):
    """A worker the raylet forks while the stop freezes the others takes the log after the scan
    for holders found none (CI: a SIGTERM stop left site logs unsigned, "another process is writing
    this audit log"). The stop ends only once it holds each log's lock itself, not once a scan
    comes up empty."""
    done, path = _stop(tmp_path, WORKER, "miss-first-scan")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["site0"], done.stderr
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["event"] for r in records] == ["alpha", "run_aborted"]


@pytest.mark.slow  # waits on a holder process: make test-fast leaves it out
def test_the_stop_takes_a_site_log_from_a_holder_outside_the_process_tree(tmp_path):
    path = tmp_path / "audit" / "site0.jsonl"
    path.parent.mkdir(parents=True)
    path.touch()
    # an operator's reader of the log (as `tail -f`): not a writer, so the stop must leave it be
    reader = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; f = open(sys.argv[1]); print('ready', flush=True); time.sleep(600)",
            str(path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stdout.readline().strip() == "ready"
        done, path = _stop(tmp_path, ORPHANING_WORKER)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["site0"], done.stderr
        records = [json.loads(line) for line in path.read_text().splitlines()]
        assert [r["event"] for r in records] == ["alpha", "run_aborted"]
        assert reader.poll() is None, "the stop killed a process that only read the log"
    finally:
        reader.kill()
        reader.wait()
        pid_file = tmp_path / "audit" / "orphan.pid"
        if pid_file.exists():  # the orphan is this test's own process: end it if the stop did not
            with contextlib.suppress(OSError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
