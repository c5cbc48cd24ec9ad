"""Wire a run together: sites, transport, server loop. The CLI and tests call these.

By job: `folder` (the run's id, keys and report), `data_check` (data refused before the run),
`stop` (a stopped run's signed ends and the words after it), `simulation` and `simulation_process`
(Flower's simulation runtime, the runner's side and the child's), `processes` (Ray's processes,
supervised and ended). The in-process run and `run_federated` are here: tests replace the site
handler and the transport they read from this module.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from secure_fed.config import RunConfig
from secure_fed.data.sites import site_names
from secure_fed.dp.site_ledger import SiteLedger
from secure_fed.launch.runner.data_check import preflight
from secure_fed.launch.runner.folder import RUN_ID_FILE, report_line, run_id_for, run_keys_dir, write_report
from secure_fed.launch.runner.processes import _reopen_ray_site_logs
from secure_fed.launch.runner.simulation import (
    SimulationFailed,
    heartbeat_lapsed,
    loopback_ray_backend,
    run_simulation,
)
from secure_fed.launch.runner.simulation_process import _naming_simulated_nodes, without_ray_dashboard
from secure_fed.launch.runner.stop import (
    _hand_over_pending,
    report_after_stop,
    sign_interrupt,
    signal_name,
    stop_words,
)
from secure_fed.protocol.keyring import audit_keys_dir
from secure_fed.protocol.run_context import site_secret_context
from secure_fed.registry import initial_state
from secure_fed.server.orchestrator import MachineryFailed, Orchestrator, RunOutcome, SitesLost
from secure_fed.server.strategies.base import RoundResult
from secure_fed.server.trail import open_server_trail
from secure_fed.server.transports import InProcessTransport
from secure_fed.site.handler import handle
from secure_fed.site.lifetime import log_lifetime_end
from secure_fed.site.runtime import SiteRuntime

__all__ = [
    "RUN_ID_FILE",
    "SimulationFailed",
    "heartbeat_lapsed",
    "lifetime_handler",
    "loopback_ray_backend",
    "make_site_handler",
    "preflight",
    "report_after_stop",
    "report_line",
    "run_federated",
    "run_id_for",
    "run_inprocess",
    "run_keys_dir",
    "run_simulation",
    "sign_interrupt",
    "signal_name",
    "stop_words",
    "without_ray_dashboard",
    "write_report",
    # private, imported by the tests of the stop and of the simulation's node names
    "_naming_simulated_nodes",
    "_reopen_ray_site_logs",
]


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
    launch/client_app.py does for a deployed node)."""
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
    trail = open_server_trail(cfg, out, run_id, keys_dir, resume)
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
