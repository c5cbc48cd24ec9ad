"""Wire a run together: sites, transport, server loop. The CLI and tests call these."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from secure_fed.audits.log import AuditLog, AuditLogBusy
from secure_fed.audits.reader import read_log
from secure_fed.clients.handler import handle
from secure_fed.clients.lifetime import log_lifetime_end
from secure_fed.clients.runtime import SiteRuntime
from secure_fed.config import RunConfig
from secure_fed.console import Terminated
from secure_fed.data.sites import site_names
from secure_fed.dp.site_ledger import SiteLedger
from secure_fed.keyring import audit_keys_dir
from secure_fed.registry import initial_state
from secure_fed.run_context import site_secret_context
from secure_fed.server.orchestrator import MachineryFailed, Orchestrator, RunOutcome, SitesLost
from secure_fed.server.strategies.base import RoundResult
from secure_fed.server.trail import ServerTrail
from secure_fed.server.transports import InProcessTransport

log = logging.getLogger(__name__)


def make_site_handler(runtime: SiteRuntime, secret_context: object | None) -> Callable[[str, dict], dict]:
    state: dict[str, Any] = {}

    def call(phase: str, request: dict[str, Any]) -> dict[str, Any]:
        nonlocal state
        reply, state = handle(runtime, phase, request, state, secret_context)
        return reply

    return call


def lifetime_handler(
    runtime: SiteRuntime, store: SiteLedger | None, run_id: str, secret_context: object | None = None
) -> Callable[[str, dict[str, Any]], dict[str, Any]]:
    """`make_site_handler` with the lifetime record written before `finish` closes the log (what
    clients/app.py does for a deployed node)."""
    state: dict[str, Any] = {}

    def call(phase: str, request: dict[str, Any]) -> dict[str, Any]:
        nonlocal state
        if phase == "finish":
            log_lifetime_end(runtime.trail, runtime.site, runtime.privacy, store, run_id)
        reply, state = handle(runtime, phase, request, state, secret_context)
        return reply

    return call


def run_inprocess(
    cfg: RunConfig,
    out: Path,
    resume: bool = False,
    progress: Callable[[int, int, RoundResult], None] | None = None,
    drop: dict[str, set[int]] | None = None,
    on_phase: Callable[[int, str], None] | None = None,
) -> RunOutcome:
    """All parties in this process (tests, sweeps); same protocol and payloads as over Flower."""
    cfg = cfg.model_copy(update={"out": Path(out)})
    secret = site_secret_context(cfg)
    names = site_names(cfg)
    keys_dir = run_keys_dir(cfg, names)
    run_id = run_id_for(out, resume)
    runtimes = {
        node: SiteRuntime.create(cfg, site, keys_dir=keys_dir, run_id=run_id)
        for node, site in enumerate(names)
    }
    for node, runtime in runtimes.items():
        runtime.node_id = node  # the id the transport delivers to: CKKS steps check they are addressed to it
    handlers = {node: make_site_handler(runtime, secret) for node, runtime in runtimes.items()}
    transport = InProcessTransport(handlers, drop=drop)
    trail = (
        ServerTrail(Path(out) / "audit" / "server.jsonl", run_id, keys_dir)
        if keys_dir and cfg.audit.enabled
        else None
    )
    if trail is not None and not resume:
        trail.start(cfg, keys_dir)  # type: ignore[arg-type]
    orchestrator = Orchestrator(
        cfg,
        transport,
        list(handlers),
        initial_state(cfg),
        out,
        events=trail.event if trail else (lambda *a: None),
        progress=progress,
        copy_record=trail.copy if trail else None,
        on_phase=on_phase,
    )
    try:
        outcome = orchestrator.run(resume=resume)
    except KeyboardInterrupt as stop:
        if trail is not None:
            sites = [r.trail for r in runtimes.values() if r.trail is not None]
            for site in sites:
                site.take_pending()
            _hand_over_pending(trail, [site.log.path for site in sites])
        logs = [trail.log] if trail else []
        sign_interrupt(signal_name(stop), orchestrator.interrupted_round(), logs, runtimes.values())
        raise
    except (SitesLost, MachineryFailed):
        # the run goes on with `--resume`, maybe in this very process (a sweep's cells): every log
        # is let go without a head record, the sites' too, as their lost workers would have
        for log_ in [trail.log] if trail else []:
            log_.abandon()
        for runtime in runtimes.values():
            if runtime.trail is not None:
                runtime.trail.log.abandon()
        raise
    except BaseException:
        if trail is not None and orchestrator.aborted:
            trail.log.close()  # it ends with the orchestrator's signed `run_aborted` record
        elif trail is not None:
            trail.log.abandon()  # no head record: the log shows the run did not stop cleanly
        raise
    if trail is not None:
        trail.finish(orchestrator.final_state)
    return outcome


def signal_name(stop: KeyboardInterrupt) -> str:
    return "SIGTERM" if isinstance(stop, Terminated) else "SIGINT"


def sign_interrupt(
    signal: str, round_id: int | None, logs: list[AuditLog], runtimes: Iterable[SiteRuntime] = ()
) -> None:
    """Ctrl-C or a service manager's SIGTERM: each log this process writes (the server's, and the
    in-process sites') ends with a signed `run_aborted` naming the signal and the round it cut short,
    so a report can say the run was interrupted. No head record: `--resume` goes on with the chains
    from the last checkpoint (a head would close them for good)."""
    payload = {"signal": signal, "round": round_id or None}
    for log_ in [*logs, *(r.trail.log for r in runtimes if r.trail is not None)]:
        if log_.closed:
            continue
        try:
            log_.append("run_aborted", payload, round=round_id or None)
        except Exception:  # noqa: BLE001 (the other parties' logs still get theirs; the stop goes on)
            log.exception("could not sign run_aborted in %s", log_.path)
        log_.abandon()


def _hand_over_pending(trail: ServerTrail, site_logs: Iterable[Path]) -> None:
    """The privacy records the sites signed in the round the stop cut short (charged at admission)
    reach the server with that round's replies, which the stop lost; the server's copies must hold
    them too, or a check of its log against each site's finds releases only the site shows. Where
    this process runs the server and holds the sites' logs (in-process, or a simulation's stop once
    Ray's workers are gone), what the server has not copied is copied from them now."""
    try:
        copied = {
            (r["payload"].get("party"), r["payload"].get("seq"))
            for r in map(json.loads, trail.log.path.read_text().splitlines())
            if r.get("event") == "site_record"
        }
        for path in site_logs:
            for record in map(json.loads, Path(path).read_text().splitlines()):
                if record.get("event") == "privacy" and (record["party"], record["seq"]) not in copied:
                    trail.copy(record)
    except Exception:  # noqa: BLE001 (the stop goes on; verify then names the gap)
        log.exception("could not copy the sites' last privacy records into the server's log")


def _log_records(path: Path) -> list[dict[str, Any]]:
    """The log's readable records (a stop reads what it can: a damaged line is verify's to judge)."""
    with contextlib.suppress(OSError):
        return [line.record for line in read_log(path) if line.record is not None]
    return []


def _checkpointed_round(out: Path) -> int:
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        return int(json.loads((Path(out) / "checkpoint" / "meta.json").read_text())["round"])
    return 0


def stop_words(out: Path, signed_round: int | None = None) -> str:
    """After a stop the logs signed: the round it cut short, what the stop cost there (from the
    sites' own signed records: a site is charged a round's ε when it is admitted to train, before
    anything leaves it), and how to go on. `signed_round`: the round the stop names, where the
    caller knows it; else the server's last `run_aborted` says it."""
    out = Path(out)
    audit = out / "audit"
    server = _log_records(audit / "server.jsonl")
    round_id = signed_round
    if round_id is None:
        aborts = [r for r in server if r.get("event") == "run_aborted"]
        round_id = aborts[-1]["payload"].get("round") if aborts else None
    done = _checkpointed_round(out)
    way_on = f"`secure-fed run --resume {out}` continues " + (
        f"after round {done}" if done else "from round 1"
    )
    if not isinstance(round_id, int):
        return way_on
    charged, dp = [], False
    for path in sorted(audit.glob("*.jsonl")):
        if path.stem == "server":
            continue
        own = [r for r in _log_records(path) if r.get("party") == path.stem and r.get("event") == "privacy"]
        dp = dp or bool(own)
        if any(r.get("round") == round_id for r in own):
            charged.append(path.stem)
    summed = any(r.get("event") == "secagg_round" and r.get("round") == round_id for r in server)
    where = f"in round {round_id}"
    if charged:
        released = (
            f"its sum was formed before the stop, but round {round_id} was not saved"
            if summed
            else f"nothing of round {round_id} was released"
        )
        cost = (
            f"round {round_id}'s ε was charged at every site that trained in it ({', '.join(charged)}), "
            f"and {released}: that ε is spent"
        )
        return f"{where}; {cost}; {way_on}"
    if dp:
        return f"{where}; no site was charged ε for round {round_id}; {way_on}"
    return f"{where}; {way_on}"


def report_after_stop(cfg: RunConfig, out: Path) -> str | None:
    """The report of a run that stopped (a signal, a failure): written as for a finished run, its
    verdict saying how far the run got; the console line naming it, or None (no audit log)."""
    if not cfg.audit.enabled:
        return None
    try:
        path = write_report(out, run_keys_dir(cfg.model_copy(update={"out": Path(out)}), site_names(cfg)))
    except Exception:  # noqa: BLE001 (the stop goes on; `secure-fed audit report` can write it later)
        log.info("could not write the report after the stop", exc_info=True)
        return (
            f"the report could not be written now; `secure-fed audit report {out}/audit/*.jsonl "
            f"--keys {out}/keys -o {out}/report.html` writes it"
        )
    return None if path is None else report_line(path)


def report_line(path: Path) -> str:
    """'wrote OUT/report.html (WORD: why)': the verdict the report leads with."""
    with contextlib.suppress(OSError, ValueError, KeyError):
        said = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))["verdict"]
        return f"wrote {path} ({said['word']}: {said['why']})"
    return f"wrote {path}"


def run_keys_dir(cfg: RunConfig, names: list[str]) -> Path | None:
    """Signing keys are needed for the audit log and for SecAgg+ / CKKS (sites sign their keys)."""
    return audit_keys_dir(cfg, names) if cfg.audit.enabled or cfg.secagg_on or cfg.he.enabled else None


RUN_ID_FILE = "run_id"


def run_id_for(out: Path, resume: bool = False) -> str:
    """The run's id, shared by every party of the run and kept by `--resume`: a random id, made
    when the run starts and kept in OUT/run_id (not derived from the folder: a second run there must
    not carry the first one's id). An id already in the folder is kept: the folder's run goes on (a
    finished run's closed logs refuse every record, so nothing is appended to them)."""
    import hashlib
    import uuid

    path = Path(out) / RUN_ID_FILE
    if path.is_file():
        return path.read_text().strip()
    if resume:
        # a folder from before run ids were random: its logs carry the hash of its path
        run_id = hashlib.sha256(str(Path(out).resolve()).encode()).hexdigest()[:12]
    else:
        run_id = uuid.uuid4().hex[:12]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(run_id + "\n")
    return run_id


def write_report(out: Path, keys_dir: Path | None) -> Path | None:
    """The compliance report over every party's log of the run."""
    from secure_fed.audits.keys import load_public_keys
    from secure_fed.audits.report import write_report as render

    logs = sorted((Path(out) / "audit").glob("*.jsonl"))
    if not logs or keys_dir is None:
        return None
    html, _, _ = render(logs, Path(out) / "report.html", public_keys=load_public_keys(keys_dir))
    return Path(html)


def loopback_ray_backend(client_cpus: float, client_gpus: float = 0.0) -> dict[str, Any]:
    """Flower simulation backend config: every Ray service on 127.0.0.1, no dashboard, 2 CPUs.

    ``client_gpus``: each site's share of the GPU when train.device resolves to CUDA (Ray hides
    every GPU from an actor that asked for none)."""
    return {
        "init_args": {
            "_node_ip_address": "127.0.0.1",
            "include_dashboard": False,
            "num_cpus": 2,
            "log_to_driver": False,
            "logging_level": logging.ERROR,
        },
        "client_resources": {"num_cpus": client_cpus, "num_gpus": client_gpus},
    }


@contextlib.contextmanager
def without_ray_dashboard() -> Iterator[None]:
    """Ray starts its dashboard head even with ``include_dashboard=False``, to run a usage-stats
    module that asks the cloud metadata service (169.254.169.254, metadata.google.internal) which
    cloud it is on before it reads RAY_USAGE_STATS_ENABLED. A hospital node must not make that
    request, and the simulation needs no dashboard, so the head is not started."""
    from ray._private.node import Node

    def no_api_server(node: Node, *, include_dashboard: bool | None, raise_on_failure: bool) -> None:
        node._webui_url = None

    started = Node.start_api_server
    Node.start_api_server = no_api_server  # type: ignore[method-assign]
    try:
        yield
    finally:
        Node.start_api_server = started  # type: ignore[method-assign]


def _site_gpu_share(cfg: RunConfig, sites: int) -> float:
    from secure_fed.model.device import resolve_device

    return 1.0 / max(sites, 1) if resolve_device(cfg.train.device).type == "cuda" else 0.0


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


@contextlib.contextmanager
def _stop_promptly_on_interrupt(
    trail: ServerTrail | None,
    folder: Path,
    box: dict[str, Any],
    site_logs: Callable[[], list[AuditLog]] = list,
    armed: Callable[[], None] = lambda: None,
) -> Iterator[None]:
    """Ctrl-C ends a simulation now, not after the round (or pretraining) in progress.

    Flower runs our ServerApp in a thread of its own and the Ray engine in the main one; a
    KeyboardInterrupt there left the ServerApp thread computing, and the process waited for it (over
    two minutes, measured). So the first Ctrl-C signs `run_aborted` (the signal, the round in
    progress) in the server's log and in each site's (`site_logs` takes them over from Ray's
    workers), leaves them without a head record for `--resume` to go on with, shuts Ray down and
    exits; the last checkpoint stays.
    """
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C must not start a second stop
            signal.signal(sig, signal.SIG_IGN)
        word = "terminated" if signum == signal.SIGTERM else "interrupted"
        print(f"\n{word}: stopping now", file=sys.stderr, flush=True)
        orchestrator = box.get("orchestrator")
        round_id = orchestrator.interrupted_round() if orchestrator is not None else None
        if trail is not None:
            with trail.log.held():
                sites = site_logs()
                _hand_over_pending(trail, [site.path for site in sites])
                sign_interrupt(signal.Signals(signum).name, round_id, [trail.log, *sites])
        # what the stop cost, from the logs just signed, and how to go on
        print(f"{word} {stop_words(folder, round_id)}", file=sys.stderr, flush=True)
        # Flower's engine threads report every message cut short by the shutdown as an error.
        logging.disable(logging.CRITICAL)
        logging.shutdown()
        # the shell's code for a process ended by that signal; Ray's services are this process's
        # children: they do not outlive it
        _exit_and_end_ray(128 + signum)

    import ray

    init = ray.init

    def init_keeping_ours(*args: Any, **kwargs: Any) -> Any:
        # What Flower's SimulationConfig cannot carry: every Ray service on 127.0.0.1, no dashboard.
        kwargs.update(_node_ip_address="127.0.0.1", include_dashboard=False, logging_level=logging.ERROR)
        started = init(*args, **kwargs)
        # Flower's simulation process took SIGINT and SIGTERM before (its handler ends the process
        # with nothing signed), and Ray's driver takes SIGTERM at init (its handler exits mid-round
        # after a native stack dump): the stop is ours again from here on
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, stop)
            armed()
        return started

    # SIGTERM too: a service manager stops a run with it
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    ray.init = init_keeping_ours
    try:
        yield
    finally:
        ray.init = init
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_simulation(
    cfg: RunConfig,
    out: Path,
    resume: bool = False,
    progress: Callable[[int, int, RoundResult], None] | None = None,
    on_phase: Callable[[int, str], None] | None = None,
) -> RunOutcome:
    """Flower's simulation runtime (Ray) on Flower's supported path: the run goes to a SuperLink of
    its own on 127.0.0.1 (secure_fed.superlink), and a simulation process this one starts takes it
    with `flwr.simulation.run_simulation_process`.

    That process is a child, not this one, because run_simulation_process ends its process
    (flwr_exit: sys.exit, and os._exit five seconds later from a thread of its own). The child runs
    the ServerApp and Ray's driver, holds the server's log and signs every party's stop; this process
    shows the child's progress and log lines (sent over a pipe), forwards a SIGINT/SIGTERM to it and
    keeps the SuperLink for the run's length. The child has a session of its own: a terminal's Ctrl-C
    reaches it once, through here, never twice."""
    import multiprocessing
    import shutil
    import signal
    import tempfile
    import threading

    from secure_fed.flower_apps import write_spec
    from secure_fed.superlink import local_superlink, submit

    cfg = cfg.model_copy(update={"out": Path(out)})
    names = site_names(cfg)
    keys_dir = run_keys_dir(cfg, names)
    run_id = run_id_for(out, resume)
    logs = Path(out) / "flower"
    received: dict[str, Any] = {}
    stop: dict[str, int] = {}
    flwr_home = os.environ.get("FLWR_HOME")
    with tempfile.TemporaryDirectory(prefix="secure-fed-flower-") as home, contextlib.ExitStack() as undo:
        os.environ["FLWR_HOME"] = home  # where the simulation installs the FAB; gone with the run
        undo.callback(
            lambda: (
                os.environ.__setitem__("FLWR_HOME", flwr_home)
                if flwr_home is not None
                else os.environ.pop("FLWR_HOME", None)
            )
        )
        spec = Path(home) / "spec.json"
        write_spec(spec, cfg.model_dump_json(), keys_dir, run_id)
        with local_superlink(
            Path(home) / "superlink", logs / "superlink.log", cfg.fed.simulation_heartbeat_s
        ) as link:
            token = submit(
                link, spec, len(names), client_cpus=2, client_gpus=_site_gpu_share(cfg, len(names))
            )
            context = multiprocessing.get_context("spawn")
            reader, writer = context.Pipe(duplex=False)
            verbose = logging.getLogger().getEffectiveLevel() <= logging.INFO
            job = _SimulationJob(cfg, Path(out), resume, keys_dir, run_id, link.address, token)
            child = context.Process(
                target=_simulation_process,
                args=(job, writer, verbose),
                name="secure-fed-simulation",
            )

            def forward(signum: int, frame: object) -> None:
                # one stop: the child signs it; a signal before the child's stop is armed waits for it
                stop.setdefault("signal", signum)
                if stop.get("armed"):
                    with contextlib.suppress(OSError):
                        os.kill(child.pid, stop["signal"])  # type: ignore[arg-type]

            def armed() -> None:
                stop["armed"] = 1
                if "signal" in stop:
                    forward(stop["signal"], None)

            previous = {}
            if threading.current_thread() is threading.main_thread():
                previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                child.start()
                writer.close()
                _relay(reader, received, progress, on_phase, armed)
                child.join()
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
            if "signal" in stop or (child.exitcode or 0) > 128:
                # the child printed the stop and signed every log; the report says how far the run
                # got; the SuperLink ends with us
                try:
                    written = report_after_stop(cfg, Path(out))
                    if written:
                        print(written, file=sys.stderr, flush=True)
                except BaseException:  # noqa: BLE001 (a second Ctrl-C: Ray's processes must still end)
                    pass
                logging.shutdown()
                shutil.rmtree(home, ignore_errors=True)  # the task secret and spec go as on a normal end
                _exit_and_end_ray(child.exitcode if (child.exitcode or 0) > 128 else 128 + stop["signal"])
    if "lost" in received:
        raise received["lost"]
    if "outcome" not in received:
        if heartbeat_lapsed(logs):
            raise SimulationFailed(
                f"the run's SuperLink dropped the run: no heartbeat from the simulation process within "
                f"{cfg.fed.simulation_heartbeat_s:g} s (a busy machine): raise `[fed] "
                f"simulation_heartbeat_s` in the config or free cores, then `secure-fed run --resume "
                f"{out} --config <the config>`"
            )
        why = received.get("error") or f"the simulation process ended with exit code {child.exitcode}"
        raise SimulationFailed(
            f"the simulation ended without a result ({why}); see {logs / 'simulation.log'}"
        )
    return received["outcome"]


def heartbeat_lapsed(logs: Path) -> bool:
    """Whether Flower's logs of the run say its SuperLink dropped the task for a missed heartbeat."""
    from secure_fed.superlink import LAPSED

    for name in ("simulation.log", "superlink.log"):
        path = logs / name
        if path.exists() and any(mark in path.read_text(errors="replace") for mark in LAPSED):
            return True
    return False


class SimulationFailed(RuntimeError):
    """The simulation process ended without the run's result (its reason, and where Flower's log is)."""


def _relay(
    reader: Any,
    received: dict[str, Any],
    progress: Callable[[int, int, RoundResult], None] | None,
    on_phase: Callable[[int, str], None] | None,
    armed: Callable[[], None],
) -> None:
    """The child's messages until it closes the pipe: progress, phases and its log lines are shown
    here, ``armed`` is called once its stop handler is in place, its result or error is kept in
    ``received``."""
    while True:
        try:
            kind, *body = reader.recv()
        except EOFError:
            return
        except InterruptedError:  # a forwarded signal: the child goes on to its stop
            continue
        if kind == "round" and progress is not None:
            progress(*body)
        elif kind == "phase" and on_phase is not None:
            on_phase(*body)
        elif kind == "log":
            record = logging.makeLogRecord(body[0])
            logging.getLogger(record.name).handle(record)
        elif kind == "armed":
            armed()
        elif kind in ("outcome", "error", "lost"):
            received[kind] = body[0]


class _PipeHandler(logging.Handler):
    """The simulation process's own log lines, sent to the runner to be shown as if logged there."""

    def __init__(self, writer: Any, level: int) -> None:
        super().__init__(level)
        self.writer = writer

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            fields = dict(record.__dict__, msg=record.msg if isinstance(record.msg, str) else str(record.msg))
            fields.update(exc_info=None, exc_text=self.format(record) if record.exc_info else None)
            self.writer.send(("log", fields))


@dataclass(frozen=True)
class _SimulationJob:
    """What the simulation process needs of the runner: the run, and the SuperLink task to take."""

    cfg: RunConfig
    out: Path
    resume: bool
    keys_dir: Path | None
    run_id: str
    address: str
    token: str


def _simulation_process(job: _SimulationJob, writer: Any, verbose: bool) -> None:
    """The simulation process (run_simulation's child): the ServerApp, Ray's driver and the stop."""
    from secure_fed.superlink import end_with_parent

    os.setsid()
    end_with_parent()  # a runner killed outright (OOM, SIGKILL) stops the run as SIGTERM does
    from secure_fed.console import quiet_frameworks

    quiet_frameworks(verbose)
    _simulation_logging(job.out / "flower", writer, verbose)
    try:
        _simulate(job, writer)
    except Exception as err:  # the runner says it in one line; the traceback goes to Flower's log
        from flwr.common.logger import FLOWER_LOGGER

        FLOWER_LOGGER.error("the simulation process failed", exc_info=err)
        from secure_fed.failures import console_reason

        writer.send(("error", console_reason(err)))


def _simulate(job: _SimulationJob, writer: Any) -> None:
    import queue

    from flwr.simulation import run_simulation_process

    from secure_fed.flower_apps import serve
    from secure_fed.server.app import make_server_app

    cfg, out, resume, keys_dir, run_id = job.cfg, job.out, job.resume, job.keys_dir, job.run_id
    names = site_names(cfg)
    trail = (
        ServerTrail(Path(out) / "audit" / "server.jsonl", run_id, keys_dir)
        if keys_dir and cfg.audit.enabled
        else None
    )
    if trail is not None and not resume:
        trail.start(cfg, keys_dir)  # type: ignore[arg-type]
    box: dict[str, Any] = {}
    serve(
        make_server_app(
            cfg,
            Path(out),
            resume,
            events=trail.event if trail else None,
            progress=lambda *shown: writer.send(("round", *shown)),
            copy_record=trail.copy if trail else None,
            result=box,
            on_phase=lambda *shown: writer.send(("phase", *shown)),
        )
    )
    paths = {site: Path(out) / "audit" / f"{site}.jsonl" for site in names}

    def site_logs() -> list[AuditLog]:
        return _reopen_ray_site_logs(paths, keys_dir, run_id) if keys_dir is not None else []

    armed = lambda: writer.send(("armed",))  # noqa: E731
    stops = _stop_promptly_on_interrupt(trail, Path(out), box, site_logs, armed)
    with _naming_simulated_nodes(), stops, without_ray_dashboard():
        try:
            run_simulation_process(
                runtime_api_address=job.address, log_queue=queue.Queue(), token=job.token, insecure=True
            )
        except SystemExit:  # its end, whatever the run's: the box says how the run went
            pass
    if "outcome" not in box:
        if trail is not None and box.get("aborted"):
            trail.log.close()  # it ends with the orchestrator's signed `run_aborted` record
        elif trail is not None:
            trail.log.abandon()
        if "lost" in box:
            writer.send(("lost", box["lost"]))
        writer.send(("error", box.get("error", "see Flower's log")))
        return
    if trail is not None:
        trail.finish(box["final_state"])
    writer.send(("outcome", box["outcome"]))


@contextlib.contextmanager
def _naming_simulated_nodes() -> Iterator[None]:
    """Keep the partition of each node Flower's simulation registers: a node that fails before it
    answered hello is then named by its site, not by Flower's random node id."""
    from flwr.server.superlink.fleet.vce import vce_api

    from secure_fed.server.app import SIMULATED_NODES

    register = vce_api._register_nodes

    def keeping(*args: Any, **kwargs: Any) -> Any:
        mapping = register(*args, **kwargs)
        SIMULATED_NODES.update(mapping)
        return mapping

    vce_api._register_nodes = keeping
    try:
        yield
    finally:
        vce_api._register_nodes = register


def _simulation_logging(folder: Path, writer: Any, verbose: bool) -> None:
    """The simulation process's logging: our records go to the runner's console (the pretraining
    bar watches two loggers at INFO); Flower's records go to FOLDER/simulation.log, and to the
    console only with --verbose, as the stock `flwr-simulation` sends them to the SuperLink and not
    to a console (an error that ends the run is the runner's one line naming the file). Its stdout
    (Flower prints the FAB's installation there) goes to that file too."""
    import threading

    from flwr.common.logger import FLOWER_LOGGER, console_handler

    folder.mkdir(parents=True, exist_ok=True)
    watched = ("secure_fed.model.setup", "secure_fed.model.build")
    shown = logging.INFO if verbose else logging.WARNING
    to_runner = _PipeHandler(writer, logging.INFO)
    to_runner.addFilter(lambda record: record.levelno >= shown or record.name in watched)
    ours = logging.getLogger("secure_fed")
    ours.setLevel(logging.INFO)
    ours.propagate = False
    ours.addHandler(to_runner)
    record_file = logging.FileHandler(folder / "simulation.log", encoding="utf-8")
    record_file.setLevel(logging.INFO)
    record_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    FLOWER_LOGGER.addHandler(record_file)
    if not verbose:
        # an error that ends the run reaches the console as the runner's one line naming this file
        console_handler.setLevel(logging.CRITICAL)
    sink = os.open(folder / "simulation.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    sys.stdout.flush()
    os.dup2(sink, 1)
    os.close(sink)

    def thread_died(args: Any) -> None:
        # Flower's heartbeat thread raises when the SuperLink has dropped the task; its traceback
        # belongs in the file, and the runner says what happened in one line
        FLOWER_LOGGER.error(
            "thread %s ended", getattr(args.thread, "name", "?"),
            exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
        )  # fmt: skip

    threading.excepthook = thread_died


def preflight(cfg: RunConfig) -> None:
    """Refuse, before anything slow, data that would stop the run midway (one message per problem).

    Raises ``DataValidationError`` whose problems each name the file or configuration key and the fix.
    """
    from secure_fed.data.cohort import cohort_problems, min_patients
    from secure_fed.data.manifest import DataValidationError

    d = cfg.data
    if d.kind == "imaging":
        from secure_fed.data.multimodal import imaging_split

        try:
            _, split = imaging_split(cfg)  # validates a manifest: file:line problems
        except DataValidationError:
            raise
        except ValueError as err:
            raise DataValidationError([f"data.imaging: {err}; change data.imaging.sites or .split"]) from None
        small = sorted(s for s, ix in split.sites.items() if len(ix) < 4)
        if small:
            raise DataValidationError(
                [
                    f"data.imaging: site(s) {', '.join(small)} hold fewer than 4 images, too few to split "
                    "train/test; use fewer sites or more images (data.imaging.per_class)"
                ]
            )
        return
    if d.source == "synthetic":
        need = min_patients(d.val_fraction, d.test_fraction)
        if d.synth.patients < need and d.synth.site_patients is None:
            raise DataValidationError(
                [
                    f"data.synth.patients: {d.synth.patients} patient(s) per site cannot fill train,"
                    f" validation and test (at least {need} needed); raise data.synth.patients"
                ]
            )
        if d.synth.site_patients is not None and min(d.synth.site_patients) < need:
            raise DataValidationError(
                [
                    f"data.synth.site_patients: a site of {min(d.synth.site_patients)} patient(s) cannot"
                    f" fill train, validation and test (at least {need} needed); raise its size"
                ]
            )
        return
    assert d.path is not None
    if not Path(d.path).exists():
        raise DataValidationError(
            [
                f"data.path: {d.path} does not exist (from {Path.cwd()}); point data.path at a"
                " manifest.jsonl, an annotation.json or a folder holding one"
            ]
        )
    problems = cohort_problems(d.path, d.val_fraction, d.test_fraction, d.deal_sites)
    if problems:
        raise DataValidationError(problems)


def run_federated(
    cfg: RunConfig,
    out: Path,
    resume: bool = False,
    progress: Callable[[int, int, RoundResult], None] | None = None,
    on_phase: Callable[[int, str], None] | None = None,
) -> RunOutcome:
    preflight(cfg)
    if cfg.train.threads is not None:
        import torch

        torch.set_num_threads(cfg.train.threads)
    runner = run_simulation if cfg.fed.engine == "simulation" else run_inprocess
    outcome = runner(cfg, out, resume=resume, progress=progress, on_phase=on_phase)
    if cfg.audit.enabled:
        write_report(out, audit_keys_dir(cfg.model_copy(update={"out": Path(out)}), site_names(cfg)))
    return outcome
