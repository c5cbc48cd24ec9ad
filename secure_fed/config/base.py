"""What every section of the tree shares: strict parsing, and the one model cache."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict


class _Strict(BaseModel):
    # allow_inf_nan=False: `target_epsilon = inf` or `budget_epsilon = inf` in a policy file would switch
    # calibration or the budget guard off while the run still reads as private
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


def cache_base() -> Path:
    """One absolute place for the model cache: $SECURE_FED_CACHE, else ~/.cache/secure_fed.

    Read when a config is built, so every process of a run (Ray workers, SuperNodes started
    elsewhere) gets the same absolute path from the saved config, whatever its working directory.
    """
    import os

    env = os.environ.get("SECURE_FED_CACHE")
    return Path(env).expanduser().absolute() if env else Path.home() / ".cache" / "secure_fed"
