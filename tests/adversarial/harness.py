"""A scripted malicious server for attack tests: real sites, hand-made messages.

Each `Site` is a real `SiteRuntime` (data, model, GMM, ledger, signed audit log) answering through
the same `handle` every runtime uses; the test plays the server and may send anything at all.
`honest_train` builds the training request our orchestrator would send, so an attack starts from a
legitimate round and then departs from it. Later attacks are new tests, not new plumbing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from secure_fed.config import RunConfig
from secure_fed.data.sites import site_names
from secure_fed.launch.runner import run_id_for
from secure_fed.protocol.keyring import audit_keys_dir
from secure_fed.registry import initial_state, strategy_factory
from secure_fed.site.handler import handle
from secure_fed.site.runtime import SiteRuntime


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

    def debug(self) -> list[dict[str, Any]]:
        """The site's unsigned debug log: the words of its refusals and errors, never signed."""
        path = self.runtime.debug_log_path
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


class MaliciousServer:
    """`told`: what the server told some sites that it told the others differently (a site's
    configuration as that site then holds it, e.g. another round count from its `hello`)."""

    def __init__(self, cfg: RunConfig, told: Mapping[str, RunConfig] | None = None) -> None:
        self.cfg = cfg
        names = site_names(cfg)
        self.keys_dir = audit_keys_dir(cfg, names)
        run_id = run_id_for(Path(cfg.out))
        told = told or {}
        self.sites = [
            Site(SiteRuntime.create(told.get(n, cfg), n, keys_dir=self.keys_dir, run_id=run_id))
            for n in names
        ]
        for node, site in enumerate(self.sites):
            site.runtime.node_id = node  # as the in-process runner numbers them
        self.global_state = initial_state(cfg)

    @property
    def victim(self) -> Site:
        return self.sites[0]

    def restart(self, node: int, cfg: RunConfig) -> Site:
        """The node's site in a fresh process holding `cfg` (under Flower's deployment runtime each
        message runs in a new process, whose site config comes from what the server said so far):
        the same site, run, folder and keys; its protocol state kept, as the SuperNode keeps
        `context.state`. The old process's log is let go without a head record, as its exit does."""
        old = self.sites[node]
        if old.runtime.trail is not None:
            old.runtime.trail.log.abandon()
        runtime = SiteRuntime.create(cfg, old.runtime.site, keys_dir=self.keys_dir, run_id=old.runtime.run_id)
        runtime.node_id = node
        self.sites[node] = Site(runtime, old.state)
        return self.sites[node]

    def honest_train(self, round_id: int, method: str | None = None, **extra: Any) -> dict[str, Any]:
        method = method or self.cfg.fed.method
        return {
            "round": round_id,
            "method": method,
            "global": self.global_state.copy(),
            "dp": self.cfg.dp.enabled,
            **self._options(method, round_id),
            **extra,
        }

    def _options(self, method: str, round_id: int) -> dict[str, Any]:
        """What our server's strategy for `method` adds to a training request at its start
        (distributed FedTAR's one-vector release: the round's α)."""
        factory = strategy_factory(method)
        if factory is None or not method.startswith("fedtar"):  # others' options are their tests'
            return {}
        strategy = factory(self.global_state.size, self.cfg.data.max_visits, self.cfg)
        return strategy.train_options(round_id)

    def log_paths(self) -> list[Path]:
        return [Path(site.runtime.cfg.out) / "audit" / f"{site.runtime.site}.jsonl" for site in self.sites]

    def directions(self, scale: float = 1e-3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """A `final` state and T directions of the shape FedTAR's residual chain produces."""
        rng = np.random.default_rng(seed)
        t_max = self.cfg.data.max_visits
        directions = scale * rng.standard_normal((t_max, self.global_state.size))
        return self.global_state + directions.sum(0) / t_max, directions


@dataclass
class SecureRound:
    """A round of the server's SecAgg+ as far as the masked uploads: the transcript of what the
    server holds, and each site's refusal (phase: reason) where it refused."""

    transcript: Any
    refused: dict[int, str]

    def masked(self) -> list[int]:
        return sorted(self.transcript.masked)


def secure_round_until_masked(server: MaliciousServer, round_id: int) -> SecureRound:
    """Training with the SecAgg+ setup inside it, share distribution and the masked uploads, as our
    server runs them for the configured method (the upload's length from the victim's runtime)."""
    from secure_fed.crypto.secagg_protocol import MASKED, SHARES, embed_setup, embedded_setup
    from secure_fed.crypto.secagg_server import plan_setup
    from secure_fed.server.aggregation import AggregationSettings
    from tests.adversarial.harness_secagg import Transcript, inbox, keys_request, masked_request

    settings = AggregationSettings.from_config(server.cfg).secagg
    assert settings is not None
    nodes = list(range(len(server.sites)))
    refused: dict[int, str] = {}
    keys = {}
    dim = None
    for node, site in enumerate(server.sites):
        if dim is None:
            dim = site.runtime.learner.distributed_dim(server.cfg.fed.method)
            from secure_fed.dp.distributed import padded_size

            dim = padded_size(dim)
            plan = plan_setup(nodes, dim, settings, round_id)
        reply = site.send("train", server.honest_train(round_id, **embed_setup(plan.requests[node])))
        assert reply["status"] == "ok", reply
        if "secagg_refused" in reply:
            refused[node] = f"setup: {reply['secagg_refused']}"
        else:
            keys[node] = embedded_setup(reply)
    shares = {}
    for n in keys:
        reply = server.sites[n].send(
            SHARES, keys_request(round_id, [p for p in plan.graph[n] if p in keys], keys)
        )
        if "share_ct" in reply:
            shares[n] = reply
        else:
            refused[n] = f"shares: {reply.get('error')}"
    masked = {}
    for n in shares:
        reply = server.sites[n].send(MASKED, masked_request(round_id, inbox(shares, n)))
        if "masked" in reply:
            masked[n] = reply["masked"]
        else:
            refused[n] = f"masked: {reply.get('error')}"
    transcript = Transcript(
        plan=plan,
        keys=keys,
        shares=shares,
        partners={n: [u for u, _ in inbox(shares, n)] for n in masked},
        masked=masked,
    )
    return SecureRound(transcript, refused)
