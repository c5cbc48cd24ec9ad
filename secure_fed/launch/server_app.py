"""Flower ServerApp: the same orchestrator as every other runtime, over the Grid."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from secure_fed.config import RunConfig
from secure_fed.protocol.failures import console_reason
from secure_fed.protocol.stops import signed_on_stop
from secure_fed.server.orchestrator import EventSink, MachineryFailed, Orchestrator, SitesLost
from secure_fed.server.trail import ServerTrail
from secure_fed.server.transports import GridTransport

log = logging.getLogger(__name__)

NODE_WAIT_SECONDS = 120.0


def expected_sites(cfg: RunConfig) -> int:
    from secure_fed.data.sites import site_names

    return len(site_names(cfg))


def wait_for_nodes(grid: Grid, expected: int, minimum: int, timeout: float = NODE_WAIT_SECONDS) -> list[int]:
    """SuperNodes connect in their own time; wait for all, or settle for `minimum` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= expected:
            return nodes
        if time.monotonic() > deadline:
            if len(nodes) >= minimum:
                log.warning("only %d of %d sites connected; going on with them", len(nodes), expected)
                return nodes
            raise RuntimeError(f"only {len(nodes)} of {expected} sites connected within {timeout:.0f} s")
        time.sleep(0.5)


# Flower node id → partition id of the simulation this process runs (filled by the runner's hook
# on Flower's node registration): a site's name is known before the site answers hello
SIMULATED_NODES: dict[int, int] = {}


def simulated_site_of(cfg: RunConfig) -> Callable[[int], str | None]:
    from secure_fed.data.sites import site_names

    names = site_names(cfg)

    def site_of(node: int) -> str | None:
        part = SIMULATED_NODES.get(node)
        return names[part] if part is not None and 0 <= part < len(names) else None

    return site_of


def deployment_trail(cfg: RunConfig, out: Path, run_id: str) -> ServerTrail | None:
    """The server's audit log under `flwr run` (`secure-fed run` keeps its own in the runner).

    Needs `audit.keys_dir`, the server's key folder: ephemeral keys made here would not be the
    ones the sites sign with, so without it the server keeps no log (the sites still keep theirs).
    """
    if not cfg.audit.enabled:
        return None
    if cfg.audit.keys_dir is None:
        log.warning("audit.keys_dir is not set: the server keeps no audit log of this run")
        return None
    keys_dir = Path(cfg.audit.keys_dir)
    trail = ServerTrail(out / "audit" / "server.jsonl", run_id, keys_dir)
    trail.start(cfg, keys_dir)
    return trail


# How the SuperLink's refusal of a stopped run reads in the log: the operator's `flwr stop` is the
# one way a live ServerApp's run stops running other than by its own end
FLWR_STOP = "flwr stop"


@contextlib.contextmanager
def signed_stops(trail: ServerTrail | None, orchestrator: Orchestrator) -> Iterator[None]:
    """Under `flwr run` the ServerApp is its own process (flwr-serverapp). A stop reaches it as
    SIGTERM / SIGINT (a service manager, Ctrl-C, or Flower's heartbeat once `flwr stop` ended the
    run), on which Flower's handler exits with SystemExit mid-round, or as the SuperLink refusing the
    next message of a stopped run (RunNotRunningException). Neither is an Exception, so the
    orchestrator's abort never ran and the server's log stopped without a closing record: it read as
    cut short. Here the stop is signed first, `run_aborted` naming the signal (or `flwr stop`) and
    the round cut short, as `secure-fed run` does; then Flower's own handler goes on (it reports
    the task's end and exits). The sites' logs are theirs to sign, on their own nodes.

    The handler only raises: signing inside it could land between a record's write and its
    sequence number moving on (the orchestrator writes the log in this same thread)."""
    if trail is None:
        yield
        return
    from flwr.supercore.run import RunNotRunningException

    def sign(name: str) -> None:
        # the record runner.sign_interrupt writes, without importing the runner from here
        round_id = orchestrator.interrupted_round()
        try:
            if not trail.log.closed:
                trail.log.append("run_aborted", {"signal": name, "round": round_id}, round=round_id)
        finally:
            trail.log.abandon()  # no head record: a resume goes on with the chain

    try:
        with signed_on_stop(sign):
            yield
    except RunNotRunningException:
        sign(FLWR_STOP)
        raise


def make_server_app(
    cfg: RunConfig | None = None,
    out: Path | None = None,
    resume: bool = False,
    events: EventSink | None = None,
    progress: Any = None,
    copy_record: Callable[[dict[str, Any]], None] | None = None,
    result: dict[str, Any] | None = None,
    on_phase: Callable[[int, str], None] | None = None,
) -> ServerApp:
    """`cfg` given: started by `secure-fed run`; None: `flwr run .` (config from the run config)."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        from secure_fed.protocol.run_context import config_from_context, run_folder
        from secure_fed.registry import initial_state

        run_cfg = cfg if cfg is not None else config_from_context(context)
        # under `flwr run`, one folder per run: the server's out serves any number of runs
        target = out if out is not None else run_folder(run_cfg, str(context.run_id))
        expected = expected_sites(run_cfg)
        nodes = wait_for_nodes(grid, expected, run_cfg.fed.min_sites)
        # Every party of a Flower run knows its run id; the sites sign their logs with it too.
        trail = deployment_trail(run_cfg, target, str(context.run_id)) if cfg is None else None
        orchestrator = Orchestrator(
            run_cfg,
            GridTransport(
                grid,
                site_of=simulated_site_of(run_cfg),
                resume=f"`secure-fed run --resume {target}`" if cfg is not None else None,
            ),
            nodes,
            initial_state(run_cfg),
            target,
            events=trail.event if trail else (events or (lambda *a: None)),
            progress=progress,
            copy_record=trail.copy if trail else copy_record,
            on_phase=on_phase,
            expected=expected,
        )
        if result is not None:  # the simulation's stop handler signs the round in progress
            result["orchestrator"] = orchestrator
        try:
            with signed_stops(trail, orchestrator):
                outcome = orchestrator.run(resume=resume)
        except Exception as err:
            if trail is not None and orchestrator.aborted:
                trail.log.close()  # it ends with the orchestrator's signed `run_aborted` record
            elif trail is not None:
                trail.log.abandon()  # no head record: the log shows the run did not stop cleanly
            if result is not None:
                # the console's line: our words, never a framework's text (Flower's log has that)
                result["error"] = console_reason(err)
                result["aborted"] = orchestrator.aborted
                if isinstance(err, SitesLost | MachineryFailed):
                    result["lost"] = err  # resumable: the runner says how to go on
            raise
        if trail is not None:
            trail.finish(orchestrator.final_state)
        if result is not None:
            result["outcome"] = outcome
            result["final_state"] = orchestrator.final_state

    return app


app = make_server_app()
