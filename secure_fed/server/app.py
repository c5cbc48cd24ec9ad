"""Flower ServerApp: the same orchestrator as every other runtime, over the Grid."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from secure_fed.config import RunConfig
from secure_fed.server.orchestrator import EventSink, Orchestrator
from secure_fed.server.transports import GridTransport

log = logging.getLogger(__name__)

NODE_WAIT_SECONDS = 120.0


def expected_sites(cfg: RunConfig) -> int:
    from secure_fed.clients.site import site_names

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


def make_server_app(
    cfg: RunConfig | None = None,
    out: Path | None = None,
    resume: bool = False,
    events: EventSink | None = None,
    progress: Any = None,
    copy_record: Callable[[dict[str, Any]], None] | None = None,
    result: dict[str, Any] | None = None,
) -> ServerApp:
    """`cfg` given: started by `secure-fed run`; None: `flwr run .` (config from the run config)."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        from secure_fed.clients.app import config_from_context
        from secure_fed.runner import initial_adapter_state

        run_cfg = cfg if cfg is not None else config_from_context(context)
        target = out if out is not None else Path(run_cfg.out)
        nodes = wait_for_nodes(grid, expected_sites(run_cfg), run_cfg.fed.min_sites)
        orchestrator = Orchestrator(
            run_cfg,
            GridTransport(grid),
            nodes,
            initial_adapter_state(run_cfg),
            target,
            events=events or (lambda *a: None),
            progress=progress,
            copy_record=copy_record,
        )
        try:
            outcome = orchestrator.run(resume=resume)
        except Exception as err:
            if result is not None:
                result["error"] = repr(err)
            raise
        if result is not None:
            result["outcome"] = outcome
            result["final_state"] = orchestrator.final_state

    return app


app = make_server_app()
