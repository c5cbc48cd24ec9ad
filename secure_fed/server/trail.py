"""The server's audit log: run configuration, key fingerprints, secure-aggregation rounds, refusals,
α, the released model's hash, and verbatim copies of the sites' signed privacy records."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from secure_fed.audits.keys import load_private_key, load_public_keys
from secure_fed.audits.log import AuditLog
from secure_fed.config import RunConfig


class ServerTrail:
    def __init__(self, path: Path, run_id: str, keys_dir: Path) -> None:
        self.log = AuditLog(path, "server", run_id, load_private_key(keys_dir, "server"))
        self.public_keys = load_public_keys(keys_dir)

    def start(self, cfg: RunConfig, keys_dir: Path) -> None:
        self.log.append("run_config", json.loads(cfg.model_dump_json()))
        fingerprints = keys_dir / "fingerprints.json"
        if fingerprints.exists():
            self.log.append("key_fingerprints", json.loads(fingerprints.read_text()))

    def event(self, event: str, payload: dict[str, Any], round_id: int | None) -> None:
        self.log.append(event, payload, round=round_id)

    def copy(self, record: dict[str, Any]) -> None:
        self.log.copy_record(record, self.public_keys.get(record.get("party", "")))

    def finish(self, state: np.ndarray) -> None:
        digest = hashlib.sha256(np.ascontiguousarray(state, dtype=np.float64).tobytes()).hexdigest()
        self.log.append("model_hash", {"sha256": digest, "what": "global adapter vector (float64)"})
        self.log.close()


def open_server_trail(
    cfg: RunConfig, out: Path, run_id: str, keys_dir: Path | None, resume: bool
) -> ServerTrail | None:
    """The server's signed log for a run in `out`, or None where the run keeps none (no keys or
    auditing off); a fresh run's log opens with its configuration, a resumed one goes on from it."""
    if keys_dir is None or not cfg.audit.enabled:
        return None
    trail = ServerTrail(Path(out) / "audit" / "server.jsonl", run_id, keys_dir)
    if not resume:
        trail.start(cfg, keys_dir)
    return trail
