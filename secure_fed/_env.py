"""Process-wide settings that keep a hardened node from phoning home.

Applied on import of the package, so every entry point (CLI, Flower apps, tests, benchmarks)
gets them before Flower, Ray or transformers read their environment.
"""

from __future__ import annotations

import os
import sys

# Forced: a hospital client must not send telemetry even if the host environment asks for it.
_FORCED = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
    # Ray otherwise binds its services to the machine's outward address on Linux.
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
}
# Defaults: a user may point at a model hub on purpose.
_DEFAULTS = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    # Ray's coming default, taken now (Ray warns until it is set): an actor asking for no GPU keeps
    # the devices its process sees instead of having them hidden. Ours ask for a GPU share whenever
    # the run's device is CUDA (Ray still pins those), and otherwise train on the CPU by config.
    "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
}


def node_environment() -> dict[str, str]:
    """The hardening as this process applies it, for a command that runs without importing us (a
    SuperNode started from a service file): the forced values, and the defaults unless overridden."""
    harden_environment()
    return {key: os.environ[key] for key in (*_FORCED, *_DEFAULTS)}


def harden_environment() -> None:
    os.environ.update(_FORCED)
    for key, value in _DEFAULTS.items():
        os.environ.setdefault(key, value)
    # Flower and Ray read these once at import: if either was imported before us, fix the copies.
    telemetry = sys.modules.get("flwr.supercore.telemetry")
    if telemetry is not None:
        telemetry.FLWR_TELEMETRY_ENABLED = "0"  # type: ignore[attr-defined]
    ray_constants = sys.modules.get("ray._private.ray_constants")
    if ray_constants is not None:
        ray_constants.ENABLE_RAY_CLUSTER = False  # type: ignore[attr-defined]
