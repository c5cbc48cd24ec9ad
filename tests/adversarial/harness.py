"""A scripted malicious server for attack tests: real sites, hand-made messages.

Each `Site` is a real `SiteRuntime` (data, model, GMM, ledger, signed audit log) answering through
the same `handle` every runtime uses; the test plays the server and may send anything at all.
`honest_train` builds the training request our orchestrator would send, so an attack starts from a
legitimate round and then departs from it. Later attacks are new tests, not new plumbing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from secure_fed.clients.handler import handle
from secure_fed.clients.runtime import SiteRuntime
from secure_fed.config import RunConfig
from secure_fed.data.sites import site_names
from secure_fed.keyring import audit_keys_dir
from secure_fed.registry import initial_state
from secure_fed.runner import run_id_for


@dataclass
class Site:
    runtime: SiteRuntime
    state: dict[str, Any] = field(default_factory=dict)

    def send(self, phase: str, request: dict[str, Any]) -> dict[str, Any]:
        reply, self.state = handle(self.runtime, phase, request, self.state)
        return reply

    def log(self) -> list[dict[str, Any]]:
        """The site's own signed audit log, as written so far."""
        path = Path(self.runtime.cfg.out) / "audit" / f"{self.runtime.site}.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def events(self, name: str) -> list[dict[str, Any]]:
        return [r for r in self.log() if r["event"] == name]


class MaliciousServer:
    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        names = site_names(cfg)
        keys_dir = audit_keys_dir(cfg, names)
        run_id = run_id_for(Path(cfg.out))
        self.sites = [Site(SiteRuntime.create(cfg, n, keys_dir=keys_dir, run_id=run_id)) for n in names]
        for node, site in enumerate(self.sites):
            site.runtime.node_id = node  # as the in-process runner numbers them
        self.global_state = initial_state(cfg)

    @property
    def victim(self) -> Site:
        return self.sites[0]

    def honest_train(self, round_id: int, method: str | None = None, **extra: Any) -> dict[str, Any]:
        return {
            "round": round_id,
            "method": method or self.cfg.fed.method,
            "global": self.global_state.copy(),
            "dp": self.cfg.dp.enabled,
            **extra,
        }

    def directions(self, scale: float = 1e-3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """A `final` state and T directions of the shape FedTAR's residual chain produces."""
        rng = np.random.default_rng(seed)
        t_max = self.cfg.data.max_visits
        directions = scale * rng.standard_normal((t_max, self.global_state.size))
        return self.global_state + directions.sum(0) / t_max, directions
