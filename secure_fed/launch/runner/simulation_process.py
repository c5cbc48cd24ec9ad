"""The simulation process (`run_simulation`'s child): the ServerApp, Ray's driver, and the stop it signs."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from secure_fed.audits.log import AuditLog
from secure_fed.config import RunConfig
from secure_fed.data.sites import site_names
from secure_fed.launch.runner.processes import _exit_and_end_ray, _reopen_ray_site_logs
from secure_fed.launch.runner.stop import _hand_over_pending, sign_interrupt, stop_words
from secure_fed.server.trail import ServerTrail, open_server_trail


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
    from secure_fed.launch.superlink import end_with_parent

    os.setsid()
    end_with_parent()  # a runner killed outright (OOM, SIGKILL) stops the run as SIGTERM does
    from secure_fed.launch.console import quiet_frameworks

    quiet_frameworks(verbose)
    _simulation_logging(job.out / "flower", writer, verbose)
    try:
        _simulate(job, writer)
    except Exception as err:  # the runner says it in one line; the traceback goes to Flower's log
        from flwr.common.logger import FLOWER_LOGGER

        FLOWER_LOGGER.error("the simulation process failed", exc_info=err)
        from secure_fed.protocol.failures import console_reason

        writer.send(("error", console_reason(err)))


def _simulate(job: _SimulationJob, writer: Any) -> None:
    import queue

    from flwr.simulation import run_simulation_process

    from secure_fed.launch.flower_apps import serve
    from secure_fed.launch.server_app import make_server_app

    cfg, out, resume, keys_dir, run_id = job.cfg, job.out, job.resume, job.keys_dir, job.run_id
    names = site_names(cfg)
    trail = open_server_trail(cfg, out, run_id, keys_dir, resume)
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

    from secure_fed.launch.server_app import SIMULATED_NODES

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
