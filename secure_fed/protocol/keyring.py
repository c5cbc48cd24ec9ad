"""Which key folder a run uses: the configured one, or an ephemeral one made inside the run folder.

Ephemeral keys suit simulations and demos only: in a deployment each party holds its own secret
keys and the `secure-fed keys init` kit is distributed out of band.
"""

from __future__ import annotations

from pathlib import Path

from secure_fed.config import RunConfig
from secure_fed.crypto.keys import init_keys


def audit_keys_dir(cfg: RunConfig, parties: list[str]) -> Path:
    if cfg.audit.keys_dir is not None:
        return Path(cfg.audit.keys_dir)
    if cfg.he.enabled and cfg.he.keys_dir is not None:
        return Path(cfg.he.keys_dir)
    folder = Path(cfg.out) / "keys"
    if not (folder / "fingerprints.json").exists():
        init_keys(folder, ["server", *parties])
    return folder
