"""A SuperNode's leftovers end with it: the process group is ended when the node exits."""

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from secure_fed.clients.supervise import end_group, run_node

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
    assert _gone(child), f"child {child} outlived the node"


def test_end_group_kills_what_ignores_sigterm(tmp_path: Path):
    ignore = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    stubborn = subprocess.Popen([sys.executable, "-c", ignore], start_new_session=True)
    time.sleep(0.3)  # let it install the handler
    end_group(stubborn.pid, grace=0.5)
    assert stubborn.wait(timeout=5) == -9
