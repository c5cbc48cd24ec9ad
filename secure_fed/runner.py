"""Wire a run together: sites, transport, server loop. The CLI and tests call these."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from secure_fed.audits.log import AuditLog, AuditLogBusy
from secure_fed.clients.handler import handle
from secure_fed.clients.runtime import SiteRuntime
from secure_fed.config import RunConfig
from secure_fed.console import Terminated
from secure_fed.data.sites import site_names
from secure_fed.keyring import audit_keys_dir
from secure_fed.registry import initial_state
from secure_fed.run_context import site_secret_context
from secure_fed.server.orchestrator import Orchestrator, RunOutcome
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
        print(
            f"\n{'terminated' if signum == signal.SIGTERM else 'interrupted'}: stopping now; "
            f"`secure-fed run --resume {folder}` continues from the last checkpoint",
            file=sys.stderr,
            flush=True,
        )
        if trail is not None:
            orchestrator = box.get("orchestrator")
            round_id = orchestrator.interrupted_round() if orchestrator is not None else None
            with trail.log.held():
                sites = site_logs()
                _hand_over_pending(trail, [site.path for site in sites])
                sign_interrupt(signal.Signals(signum).name, round_id, [trail.log, *sites])
        # Flower's engine threads report every message cut short by the shutdown as an error.
        logging.disable(logging.CRITICAL)
        logging.shutdown()
        # the shell's code for a process ended by that signal; Ray's services are this process's
        # children: they do not outlive it
        _exit_and_end_ray(128 + signum)

    import ray

    init = ray.init

    def init_keeping_ours(*args: Any, **kwargs: Any) -> Any:
        started = init(*args, **kwargs)
        # Ray's driver takes SIGTERM at init (its handler exits mid-round after a native stack dump)
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, stop)
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
    """Flower's simulation engine (Ray), every Ray service on 127.0.0.1.

    Still Flower's deprecated `flwr.simulation.run_simulation` (its warning is kept off the default
    console by console.quiet_frameworks). Flower 1.42's supported path is `flwr run` against a local
    simulation federation, and it cannot keep what this runner guarantees (read from the installed
    source: flwr/cli/local_superlink.py, flwr/simulation/app.py, flwr/proto/federation_config):
    - it starts a detached `flower-superlink` on fixed ports (127.0.0.1:39091/39093) that outlives
      the command, with its state in ~/.flwr, and runs the apps in a `flwr-simulation` process the
      SuperLink spawns from a FAB of a project folder (an installed `secure-fed` has none);
    - Ray is started in that process from a SimulationConfig that carries only CPUs, GPUs, logging
      and num-supernodes: no `_node_ip_address` and no place for `without_ray_dashboard` (whose
      head asks the cloud metadata IP); loopback would rest only on that process inheriting
      `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` from secure_fed._env (with it Ray's
      get_node_ip_address() is 127.0.0.1, without it this machine's outward 192.0.2.2, measured);
    - the ServerApp runs in that other process: the per-round and per-phase progress callbacks, the
      run's objects (config, keys folder, run id) and the Ctrl-C handler that signs every party's
      `run_aborted` (which must stop Ray's workers, children of that process) are out of reach.
    `flwr.simulation.run_simulation._run_simulation`, the engine both call, has no warning but is
    private; calling it only to avoid the warning would hide the deprecation, not leave it."""
    from flwr.simulation import run_simulation as flwr_run_simulation

    from secure_fed.clients.app import make_client_app
    from secure_fed.server.app import make_server_app

    cfg = cfg.model_copy(update={"out": Path(out)})
    names = site_names(cfg)
    keys_dir = run_keys_dir(cfg, names)
    run_id = run_id_for(out, resume)
    trail = (
        ServerTrail(Path(out) / "audit" / "server.jsonl", run_id, keys_dir)
        if keys_dir and cfg.audit.enabled
        else None
    )
    if trail is not None and not resume:
        trail.start(cfg, keys_dir)  # type: ignore[arg-type]
    box: dict[str, Any] = {}
    server_app = make_server_app(
        cfg,
        Path(out),
        resume,
        events=trail.event if trail else None,
        progress=progress,
        copy_record=trail.copy if trail else None,
        result=box,
        on_phase=on_phase,
    )
    client_app = make_client_app(cfg, keys_dir=keys_dir, run_id=run_id)
    paths = {site: Path(out) / "audit" / f"{site}.jsonl" for site in names}

    def site_logs() -> list[AuditLog]:
        return _reopen_ray_site_logs(paths, keys_dir, run_id) if keys_dir is not None else []

    with _stop_promptly_on_interrupt(trail, Path(out), box, site_logs), without_ray_dashboard():
        flwr_run_simulation(
            server_app=server_app,
            client_app=client_app,
            num_supernodes=len(names),
            backend_config=loopback_ray_backend(client_cpus=2, client_gpus=_site_gpu_share(cfg, len(names))),
        )
    if "outcome" not in box:
        if trail is not None and box.get("aborted"):
            trail.log.close()  # it ends with the orchestrator's signed `run_aborted` record
        elif trail is not None:
            trail.log.abandon()
        raise RuntimeError(f"the simulation ended without a result: {box.get('error', 'see the log above')}")
    if trail is not None:
        trail.finish(box["final_state"])
    return box["outcome"]


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
