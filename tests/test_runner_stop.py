"""The simulation's stop takes each site log over from Ray's workers to sign the site's `run_aborted`.

Real Ray workers are stood in for by plain child processes: what matters is which process holds the
log's lock, and when it lets go."""

from __future__ import annotations

import json
import subprocess
import sys

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
import subprocess, sys
from pathlib import Path
from secure_fed.runner import _reopen_ray_site_logs
worker, path, keys = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
command = [sys.executable, "-c", worker, str(path), str(keys)]
proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
assert proc.stdout.readline().strip() == "ready"
logs = _reopen_ray_site_logs({"site0": path, "site1": path.with_name("site1.jsonl")}, keys, "run1")
print(" ".join(log.party for log in logs), flush=True)
for log in logs:
    log.append("run_aborted", {"signal": "SIGTERM", "round": 2}, round=2)
    log.abandon()
"""


def test_the_stop_takes_a_site_log_from_every_process_holding_it(tmp_path):
    keys = tmp_path / "keys"
    write_key_pair(keys, "site0", Ed25519PrivateKey.generate())
    path = tmp_path / "audit" / "site0.jsonl"
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, WORKER, str(path), str(keys)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["site0"], done.stdout  # site1 never wrote a log: nothing to sign there
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["event"] for r in records] == ["alpha", "run_aborted"]
    assert records[1]["prev_hash"] == records[0]["hash"]  # on the site's own chain
