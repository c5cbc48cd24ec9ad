"""A site's own audit log: every privacy release with its parameters and the ε after it."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from secure_fed.audits.keys import load_private_key
from secure_fed.audits.log import AuditLog
from secure_fed.dp.events import Event


class SiteTrail:
    def __init__(self, path: Path, site: str, run_id: str, keys_dir: Path) -> None:
        self.log = AuditLog(path, site, run_id, load_private_key(keys_dir, site))
        self.site = site
        self.pending: list[dict[str, Any]] = []

    def privacy(
        self,
        round_id: int,
        population: str,
        mechanism: str,
        event: Event,
        delta: float,
        epsilon: dict[str, float | None],
        budget: float | None,
        extra: dict[str, Any],
    ) -> None:
        payload = {
            "site": self.site,
            "population": population,
            "mechanism": mechanism,
            "event": event.to_json(),
            "delta": delta,
            "epsilon": epsilon,
            "budget": budget,
            **extra,
        }
        self.pending.append(self.log.append("privacy", payload, round=round_id))

    def append(self, event: str, payload: dict[str, Any], round_id: int | None = None) -> None:
        self.log.append(event, payload, round=round_id)

    def take_pending(self) -> list[str]:
        """Signed records not yet handed to the server, as JSON (the server copies them verbatim)."""
        out, self.pending = [json.dumps(r) for r in self.pending], []
        return out

    def close(self) -> None:
        self.log.close()


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]
