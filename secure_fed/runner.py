"""Wire a run together: sites, transport, server loop. The CLI and tests call these."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from secure_fed.clients.handler import handle
from secure_fed.clients.hypergrad import flatten
from secure_fed.clients.runtime import SiteRuntime
from secure_fed.clients.site import site_names
from secure_fed.config import RunConfig
from secure_fed.keyring import audit_keys_dir
from secure_fed.model.setup import build_report_model
from secure_fed.server.orchestrator import Orchestrator, RunOutcome
from secure_fed.server.strategies.base import RoundResult
from secure_fed.server.trail import ServerTrail
from secure_fed.server.transports import InProcessTransport

log = logging.getLogger(__name__)


def initial_adapter_state(cfg: RunConfig) -> np.ndarray:
    return flatten(build_report_model(cfg).trainable_state()).numpy()


def site_secret_context(cfg: RunConfig) -> object | None:
    if not cfg.he.enabled:
        return None
    from secure_fed.crypto import keys

    assert cfg.he.keys_dir is not None
    fingerprints = keys.load_fingerprints(cfg.he.keys_dir)
    return keys.load_he_context(
        keys.secret_context_path(cfg.he.keys_dir), expect_secret=True, fingerprints=fingerprints
    )


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
) -> RunOutcome:
    """All parties in this process (tests, sweeps); same protocol and payloads as over Flower."""
    cfg = cfg.model_copy(update={"out": Path(out)})
    secret = site_secret_context(cfg)
    names = site_names(cfg)
    keys_dir = run_keys_dir(cfg, names)
    run_id = run_id_for(out)
    handlers = {
        node: make_site_handler(SiteRuntime.create(cfg, site, keys_dir=keys_dir, run_id=run_id), secret)
        for node, site in enumerate(names)
    }
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
        initial_adapter_state(cfg),
        out,
        events=trail.event if trail else (lambda *a: None),
        progress=progress,
        copy_record=trail.copy if trail else None,
    )
    try:
        outcome = orchestrator.run(resume=resume)
    except BaseException:
        if trail is not None:
            trail.log.abandon()  # no head record: the log shows the run did not stop cleanly
        raise
    if trail is not None:
        trail.finish(orchestrator.final_state)
    return outcome


def run_keys_dir(cfg: RunConfig, names: list[str]) -> Path | None:
    """Signing keys are needed for the audit log and for SecAgg+ / CKKS (sites sign their keys)."""
    return audit_keys_dir(cfg, names) if cfg.audit.enabled or cfg.secagg_on or cfg.he.enabled else None


def run_id_for(out: Path) -> str:
    """Every party of a run, and a resumed run, share one id."""
    import hashlib

    return hashlib.sha256(str(Path(out).resolve()).encode()).hexdigest()[:12]


def write_report(out: Path, keys_dir: Path | None) -> Path | None:
    """The compliance report over every party's log of the run."""
    from secure_fed.audits.keys import load_public_keys
    from secure_fed.audits.report import write_report as render

    logs = sorted((Path(out) / "audit").glob("*.jsonl"))
    if not logs or keys_dir is None:
        return None
    html, _, _ = render(logs, Path(out) / "report.html", public_keys=load_public_keys(keys_dir))
    return Path(html)


def loopback_ray_backend(client_cpus: float) -> dict[str, Any]:
    """Flower simulation backend config: every Ray service on 127.0.0.1, no dashboard, 2 CPUs."""
    return {
        "init_args": {
            "_node_ip_address": "127.0.0.1",
            "include_dashboard": False,
            "num_cpus": 2,
            "log_to_driver": False,
            "logging_level": logging.ERROR,
        },
        "client_resources": {"num_cpus": client_cpus, "num_gpus": 0.0},
    }


def run_simulation(
    cfg: RunConfig,
    out: Path,
    resume: bool = False,
    progress: Callable[[int, int, RoundResult], None] | None = None,
) -> RunOutcome:
    """Flower's simulation engine (Ray), every Ray service on 127.0.0.1."""
    from flwr.simulation import run_simulation as flwr_run_simulation

    from secure_fed.clients.app import make_client_app
    from secure_fed.server.app import make_server_app

    cfg = cfg.model_copy(update={"out": Path(out)})
    names = site_names(cfg)
    keys_dir = run_keys_dir(cfg, names)
    run_id = run_id_for(out)
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
    )
    client_app = make_client_app(cfg, keys_dir=keys_dir, run_id=run_id)
    flwr_run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=len(names),
        backend_config=loopback_ray_backend(client_cpus=2),
    )
    if "outcome" not in box:
        if trail is not None:
            trail.log.abandon()
        raise RuntimeError(f"the simulation ended without a result: {box.get('error', 'see the log above')}")
    if trail is not None:
        trail.finish(box["final_state"])
    return box["outcome"]


def run_federated(
    cfg: RunConfig,
    out: Path,
    resume: bool = False,
    progress: Callable[[int, int, RoundResult], None] | None = None,
) -> RunOutcome:
    if cfg.train.threads is not None:
        import torch

        torch.set_num_threads(cfg.train.threads)
    runner = run_simulation if cfg.fed.engine == "simulation" else run_inprocess
    outcome = runner(cfg, out, resume=resume, progress=progress)
    if cfg.audit.enabled:
        write_report(out, audit_keys_dir(cfg.model_copy(update={"out": Path(out)}), site_names(cfg)))
    return outcome
