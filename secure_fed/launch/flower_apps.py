"""The components the simulation's FAB names (secure_fed.launch.superlink): Flower loads them by attribute
in the simulation process (the ServerApp) and in each of Ray's actors (the ClientApp).

The ServerApp is the one the runner made for this run in this very process (`serve`): it reports
progress and holds the run's server log. An actor is another process: its ClientApp is built from
the run's spec file, which the run config's `spec` names, once per spec.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from flwr.serverapp import ServerApp

_SERVED: dict[str, ServerApp] = {}


def serve(app: ServerApp) -> None:
    """The ServerApp this process's simulation runs (one run per process)."""
    _SERVED["app"] = app


def __getattr__(name: str) -> Any:
    if name == "server_app":
        if "app" not in _SERVED:
            raise AttributeError(
                "secure_fed.launch.flower_apps.server_app: no run is being served in this process; "
                "start runs with `secure-fed run`"
            )
        return _SERVED["app"]
    raise AttributeError(name)


def write_spec(path: Path, cfg_json: str, keys_dir: Path | None, run_id: str) -> None:
    path.write_text(
        json.dumps({"config": json.loads(cfg_json), "keys_dir": keys_dir and str(keys_dir), "run_id": run_id})
    )


@cache
def _site_app(spec: str) -> ClientApp:
    from secure_fed.config import RunConfig
    from secure_fed.launch.client_app import make_client_app

    held = json.loads(Path(spec).read_text())
    keys = held["keys_dir"]
    return make_client_app(
        RunConfig.model_validate(held["config"]), Path(keys) if keys else None, held["run_id"]
    )


def _respond(message: Message, context: Context) -> Message:
    spec = str(context.run_config.get("spec", ""))
    if not spec:
        raise ValueError("the run config has no `spec`: this ClientApp runs under `secure-fed run` only")
    return _site_app(spec)(message, context)


def _client_app() -> ClientApp:
    from secure_fed.launch.client_app import PHASES

    app = ClientApp()
    app.train()(_respond)
    for phase in PHASES:
        app.query(phase)(_respond)
    return app


client_app = _client_app()
