"""What every party of a Flower run reads from its run context: the configuration and its folder.

Kept apart from the client and server apps, so that neither imports the other.
"""

from __future__ import annotations

import logging
import tomllib
from pathlib import Path
from typing import Any

from flwr.app import Context

from secure_fed.config import RunConfig, load_config

log = logging.getLogger(__name__)

# [fed] key of a config file ← the `flwr run --run-config` key that fills it when the file is silent
_RUN_CONFIG_KEYS = (("method", "method"), ("rounds", "num-server-rounds"))
# pyproject.toml's [tool.flwr.app.config]: Flower fills every run config with these, so a value equal
# to its default was not the operator's to explain (tests/server/test_run_config.py keeps them equal)
APP_DEFAULTS: dict[str, Any] = {"method": "fedtar", "num-server-rounds": 3}


def _file_fed_table(path: str) -> dict[str, Any]:
    if not path:
        return {}
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return {}  # load_config below names the file and the problem
    fed = data.get("fed", {})
    return fed if isinstance(fed, dict) else {}


def config_from_context(context: Context) -> RunConfig:
    """The server's configuration: its file, where the file sets `[fed] method` / `rounds`; the run
    config (`method`, `num-server-rounds`, whose defaults live in pyproject.toml) only where it
    does not. A run-config value the operator set (not the app's default) that differs from the
    file is named in the log, never silently taken."""
    run = dict(context.run_config)
    path = str(run.get("config-file") or "")
    fed = _file_fed_table(path)
    overrides: dict[str, Any] = {}
    for key, run_key in _RUN_CONFIG_KEYS:
        value = run.get(run_key)
        if key not in fed:
            overrides[f"fed.{key}"] = value
        elif value is not None and value != fed[key] and value != APP_DEFAULTS.get(run_key):
            log.warning(
                "%s sets [fed] %s = %r; the run config's %s = %r is not used",
                path,
                key,
                fed[key],
                run_key,
                value,
            )
    return load_config(Path(path) if path else None, overrides)


def run_folder(cfg: RunConfig, run_id: str) -> Path:
    """A deployed party's folder for one run (<out>/runs/<run id>): its audit log, guard, released
    values. A site joins any number of runs with one policy file; what outlives a run (the
    patient-id key, the persistent privacy ledger) stays in <out>."""
    return Path(cfg.out) / "runs" / run_id


def site_secret_context(cfg: RunConfig) -> object | None:
    """The CKKS secret context a site decrypts its share with (None without HE)."""
    if not cfg.he.enabled:
        return None
    from secure_fed.crypto import keys

    assert cfg.he.keys_dir is not None
    fingerprints = keys.load_fingerprints(cfg.he.keys_dir)
    return keys.load_he_context(
        keys.secret_context_path(cfg.he.keys_dir), expect_secret=True, fingerprints=fingerprints
    )
