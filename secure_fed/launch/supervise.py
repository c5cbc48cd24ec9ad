"""Run a hospital's SuperNode so that nothing it started outlives it.

`flower-supernode` starts a SuperExec child that keeps dialling the SuperLink on its own: when
the SuperNode exits (refused by the SuperLink, crashed, stopped), the child would stay behind,
retrying, in a hardened host's process table. The node therefore runs in a process group of its
own; when it ends, or when we are told to stop, the whole group is ended.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from types import FrameType

_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member we may not signal still exists
        return True
    return True


def end_group(pgid: int, grace: float = 10.0) -> None:
    """SIGTERM every process of the group, SIGKILL what is left after `grace` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, grace)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _group_alive(pgid):
                return
            time.sleep(0.05)


def run_node(cmd: Sequence[str], env: Mapping[str, str], grace: float = 10.0) -> int:
    """Run `cmd` in a new process group, forwarding SIGTERM/SIGINT/SIGHUP to the group; return its
    exit status once it and every process it started have ended (128 + N when signal N ended it,
    as a shell reports it, so that a service manager sees a stopped node, not status 241)."""
    proc = subprocess.Popen(list(cmd), env=dict(env), start_new_session=True)

    def forward(signum: int, _frame: FrameType | None) -> None:
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            pass

    previous = {sig: signal.signal(sig, forward) for sig in _FORWARDED}
    try:
        status = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        end_group(proc.pid, grace)
    return status if status >= 0 else 128 - status
