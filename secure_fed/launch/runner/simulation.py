"""The runner's side of a simulation: the run's own SuperLink, the simulation process it starts, and
what comes back from it."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from secure_fed.config import RunConfig
from secure_fed.data.sites import site_names
from secure_fed.launch.runner.folder import run_id_for, run_keys_dir
from secure_fed.launch.runner.processes import _exit_and_end_ray
from secure_fed.launch.runner.simulation_process import _simulation_process, _SimulationJob
from secure_fed.launch.runner.stop import report_after_stop
from secure_fed.server.orchestrator import RunOutcome
from secure_fed.server.strategies.base import RoundResult


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


def _site_gpu_share(cfg: RunConfig, sites: int) -> float:
    from secure_fed.model.device import resolve_device

    return 1.0 / max(sites, 1) if resolve_device(cfg.train.device).type == "cuda" else 0.0


def run_simulation(
    cfg: RunConfig,
    out: Path,
    resume: bool = False,
    progress: Callable[[int, int, RoundResult], None] | None = None,
    on_phase: Callable[[int, str], None] | None = None,
) -> RunOutcome:
    """Flower's simulation runtime (Ray) on Flower's supported path: the run goes to a SuperLink of
    its own on 127.0.0.1 (secure_fed.launch.superlink), and a simulation process this one starts takes it
    with `flwr.simulation.run_simulation_process`.

    That process is a child, not this one, because run_simulation_process ends its process
    (flwr_exit: sys.exit, and os._exit five seconds later from a thread of its own). The child runs
    the ServerApp and Ray's driver, holds the server's log and signs every party's stop; this process
    shows the child's progress and log lines (sent over a pipe), forwards a SIGINT/SIGTERM to it and
    keeps the SuperLink for the run's length. The child has a session of its own: a terminal's Ctrl-C
    reaches it once, through here, never twice."""
    import multiprocessing
    import signal
    import tempfile
    import threading

    from secure_fed.launch.flower_apps import write_spec
    from secure_fed.launch.superlink import local_superlink, submit

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
                _end_after_stop(cfg, Path(out), home, child.exitcode, stop)
    return _outcome(cfg, out, received, child.exitcode)


def _end_after_stop(cfg: RunConfig, out: Path, home: str, exitcode: int | None, stop: dict[str, int]) -> None:
    """The child printed the stop and signed every log: the report says how far the run got, and
    this process ends, Ray's processes with it (the SuperLink ends with us)."""
    import shutil

    try:
        written = report_after_stop(cfg, out)
        if written:
            print(written, file=sys.stderr, flush=True)
    except BaseException:  # noqa: BLE001 (a second Ctrl-C: Ray's processes must still end)
        pass
    logging.shutdown()
    shutil.rmtree(home, ignore_errors=True)  # the task secret and spec go as on a normal end
    _exit_and_end_ray(exitcode if (exitcode or 0) > 128 else 128 + stop["signal"])


def _outcome(cfg: RunConfig, out: Path, received: dict[str, Any], exitcode: int | None) -> RunOutcome:
    """The run's result as the simulation process sent it, or why there is none."""
    logs = Path(out) / "flower"
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
        why = received.get("error") or f"the simulation process ended with exit code {exitcode}"
        raise SimulationFailed(
            f"the simulation ended without a result ({why}); see {logs / 'simulation.log'}"
        )
    return received["outcome"]


def heartbeat_lapsed(logs: Path) -> bool:
    """Whether Flower's logs of the run say its SuperLink dropped the task for a missed heartbeat."""
    from secure_fed.launch.superlink import LAPSED

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
