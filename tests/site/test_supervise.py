"""A SuperNode's leftovers end with it: the process group is ended when the node exits."""

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from secure_fed.launch.supervise import end_group, run_node

# exits with 3 after starting a child that would run forever,
# as flower-supernode leaves its SuperExec behind
NODE = """
import subprocess, sys, pathlib
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
pathlib.Path(sys.argv[1]).write_text(str(child.pid))
sys.exit(3)
"""


def _gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_node_exit_status_is_kept_and_its_children_end_with_it(tmp_path: Path):
    pid_file = tmp_path / "child.pid"
    status = run_node([sys.executable, "-c", NODE, str(pid_file)], env=os.environ, grace=5.0)
    assert status == 3
    child = int(pid_file.read_text())
    try:
        assert _gone(child), f"child {child} outlived the node"
    finally:  # if it did, end it — but only if that pid still is our sleeper
        try:
            proc = psutil.Process(child)
            if "time.sleep(600)" in " ".join(proc.cmdline()):
                proc.kill()
        except psutil.Error:
            pass


def test_end_group_kills_what_ignores_sigterm(tmp_path: Path):
    ignore = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    stubborn = subprocess.Popen([sys.executable, "-c", ignore], start_new_session=True)
    time.sleep(0.3)  # let it install the handler
    end_group(stubborn.pid, grace=0.5)
    assert stubborn.wait(timeout=5) == -9


# a supervisor as `secure-fed client` runs: the node sleeps (in its own group) until told to stop
SUPERVISOR = """
import os, sys
from secure_fed.launch.supervise import run_node
node = [sys.executable, "-c", "import time; time.sleep(600)"]
sys.exit(run_node(node, env=os.environ, grace=5.0))
"""


def test_sigterm_to_the_supervisor_stops_the_node(tmp_path: Path):
    """A service manager stopping `secure-fed client` stops the SuperNode's whole group too."""
    supervisor = subprocess.Popen([sys.executable, "-c", SUPERVISOR])
    deadline = time.monotonic() + 30
    nodes: list[psutil.Process] = []
    while not nodes and time.monotonic() < deadline:
        nodes = psutil.Process(supervisor.pid).children()
        time.sleep(0.05)
    assert nodes, "the supervisor never started its node"
    node = nodes[0]
    try:
        assert os.getpgid(node.pid) == node.pid != os.getpgid(supervisor.pid)  # a group of its own
        time.sleep(0.5)  # the supervisor installs its handlers right after starting the node
        supervisor.terminate()
        assert supervisor.wait(timeout=15) == 128 + 15  # the node was ended by the forwarded SIGTERM
        assert _gone(node.pid)
    finally:  # never leave the sleeper behind, whatever failed
        for proc in (node, psutil.Process(supervisor.pid) if supervisor.poll() is None else None):
            if proc is not None and proc.is_running():
                proc.kill()
