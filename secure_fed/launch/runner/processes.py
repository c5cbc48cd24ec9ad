"""Supervising the processes a simulation starts: the site logs taken back from Ray's workers, and
an exit that ends every process of the run."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from secure_fed.audits.log import AuditLog, AuditLogBusy

log = logging.getLogger(__name__)


def _descendants() -> list[int]:
    """Every process this one started, and theirs (Ray's GCS and raylet, its agents and workers)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                # the parent pid is the 2nd field after the command name, which may hold spaces
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    ours, todo = [], list(children.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        ours.append(pid)
        todo += children.get(pid, [])
    return ours


def _own_processes() -> list[int]:
    """Every process of this user but this one (another user's fds cannot be read, nor signalled)."""
    me, uid = os.getpid(), os.getuid()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != me:
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    pids.append(int(entry.name))
    return pids


def _holds(pid: int, paths: set[str]) -> bool:
    """Whether process `pid` has one of `paths` open for writing, as a log's writer (and the lock's
    holder) does; a reader (an operator's `tail -f`) is left alone, and a zombie holds nothing."""
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                if os.readlink(f"/proc/{pid}/fd/{fd}") in paths:
                    info = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
                    flags = int(info.split("flags:", 1)[1].split()[0], 8)
                    if flags & os.O_ACCMODE != os.O_RDONLY:
                        return True
    return False


def _reopen_ray_site_logs(paths: dict[str, Path], keys_dir: Path, run_id: str) -> list[AuditLog]:
    """The simulation's site logs, taken over from Ray's workers so this process can sign each
    site's stop: Ray is frozen first (SIGSTOP to every process it runs: no worker writes on, and the
    raylet sees nothing to report to Flower's threads), then the workers holding a site log are
    killed, which frees the log's lock, and each log is reopened at the end of its own chain.

    Why this process may sign for the sites: in a simulation every party's signing key sits in the
    one key folder this process made or was given and holds, and the sites' workers sign with the
    keys they load from it, as the in-process runner's sites sign with them in this very process.
    So signing a site's `run_aborted` here is the trust of in-process mode, not the server forging
    a record: this process holds that key for the whole run either way. It signs only the stop, on
    the site's own chain, once the site's process is gone. (A deployed site's key never leaves its
    node; the server signs nothing for it.)"""
    import signal
    import time

    from secure_fed.audits.keys import load_private_key

    present = {site: path for site, path in paths.items() if path.exists()}
    wanted = {str(path.resolve()) for path in present.values()}
    # Again until this process holds every site log's lock itself: an empty scan for holders is not
    # enough. A killed process's fds vanish from /proc a moment before the kernel drops its lock (a
    # SIGTERM stop lost every site's `run_aborted` to that window), and a worker the raylet forked
    # while the first pass froze the others takes a log after the scan. A killed worker stuck in a
    # disk wait (an fsync on a loaded machine) is waited for, not taken for gone.
    # The holders are looked for among all of this user's processes, not only our descendants: a
    # worker killed while it forked leaves its child an orphan outside our tree, still holding the
    # log's lock (a fresh-clone suite hung on it). Holding this run's own site log makes a process
    # one of the run's workers, whoever its parent now is.
    frozen: set[int] = set()
    logs: dict[str, AuditLog] = {}
    left = dict(present)  # the sites whose log is neither reopened nor found unreadable
    busy: dict[str, Exception] = {}
    deadline = time.monotonic() + 30.0
    while True:
        for pid in set(_descendants()) - frozen:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGSTOP)
            frozen.add(pid)
        for pid in _own_processes():
            if _holds(pid, wanted):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        busy = {}
        for site, path in list(left.items()):
            try:
                logs[site] = AuditLog(path, site, run_id, load_private_key(keys_dir, site))
            except AuditLogBusy as err:
                busy[site] = err
                continue
            except Exception as err:  # noqa: BLE001 (a torn tail: verify names the log)
                log.error("could not reopen %s to sign its run_aborted: %s", path, err)
            del left[site]
        if not busy or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for site, err in busy.items():
        log.error("could not reopen %s to sign its run_aborted: %s", present[site], err)
    return [logs[site] for site in present if site in logs]


def _exit_and_end_ray(code: int) -> None:
    """Exit with `code` now, then SIGKILL every process this one started and theirs (Ray's GCS and
    raylet, the raylet's agents and workers: the agents outlived a killed raylet by over a minute).

    The killing is left to a forked child that waits for this process to be gone: any teardown of
    Ray before our exit (ray.shutdown(), or a killed raylet) lets Flower's engine threads, still
    waiting on actors, make Ray's core worker end the process with status 1 first (seen in a
    fresh-clone run, and after killing the raylet in 1 of 6 runs)."""
    import signal
    import time

    me, ours = os.getpid(), _descendants()
    if ours and os.fork() == 0:  # the child: only syscalls, no locks another thread might hold
        while os.getppid() == me:
            time.sleep(0.01)
        for pid in ours:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        os._exit(0)
    os._exit(code)
