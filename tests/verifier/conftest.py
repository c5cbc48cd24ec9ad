"""A realistic three-party run's audit logs (2 sites + server), built once per session.

The logged ε values are what the sites would log: Opacus' RDP accountant over every privacy event of
the (site, population) so far. The verifier re-derives them with dp_accounting independently.
"""

from __future__ import annotations

import functools
import hashlib
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from opacus.accountants.analysis import rdp as opacus_rdp

from secure_fed.audits.keys import write_key_pair
from secure_fed.audits.log import AuditLog

ORDERS = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))
DELTA = 1e-5
RUN_ID = "run-2024-test"
SITES = ("site-0", "site-1")
BUDGETS = {"site-0": 10.0, "site-1": 8.0}
Q, SIGMA, STEPS, ROUNDS = 0.25, 1.1, 8, 3
GMM_SIGMA, ALPHA_SIGMA = 5.0, 2.0


@functools.lru_cache(maxsize=64)
def _opacus_rdp(q: float, sigma: float, steps: int) -> np.ndarray:
    return np.asarray(opacus_rdp.compute_rdp(q=q, noise_multiplier=sigma, steps=steps, orders=ORDERS))


def opacus_epsilon(events: list[tuple[float, float, int]], delta: float = DELTA) -> float:
    """ε of composing (q, σ, steps) events with Opacus' RDP analysis (q = 1: plain Gaussian)."""
    total = np.zeros(len(ORDERS))
    for q, sigma, steps in events:
        total = total + _opacus_rdp(q, sigma, steps)
    epsilon, _ = opacus_rdp.get_privacy_spent(orders=ORDERS, rdp=total, delta=delta)
    return float(epsilon)


def mechanism_json(q: float, sigma: float, steps: int) -> dict[str, Any]:
    if q == 1.0:
        return {"type": "gaussian", "noise_multiplier": sigma, "count": steps}
    return {"type": "poisson_sampled_gaussian", "sampling_rate": q, "noise_multiplier": sigma, "count": steps}


class SiteLedger:
    """What a site's dp ledger would do: compose per population with Opacus, log each release."""

    def __init__(self, log: AuditLog, site: str) -> None:
        self.log, self.site = log, site
        self.history: dict[str, list[tuple[float, float, int]]] = {"train": [], "validation": []}

    def epsilon_after(self, population: str, event: tuple[float, float, int]) -> float:
        return opacus_epsilon([*self.history[population], event])

    def release(
        self, population: str, mechanism: str, event: tuple[float, float, int], round: int, **extra: Any
    ) -> dict[str, Any]:
        self.history[population].append(event)
        payload = {
            "site": self.site,
            "population": population,
            "mechanism": mechanism,
            "event": mechanism_json(*event),
            "delta": DELTA,
            "epsilon": {"rdp": opacus_epsilon(self.history[population]), "prv": None},
            "budget": BUDGETS[self.site],
            **extra,
        }
        return self.log.append("privacy", payload, round=round)


@dataclass
class Run:
    root: Path
    keys_dir: Path
    keys: dict[str, Ed25519PrivateKey]
    paths: dict[str, Path]
    privacy_count: dict[str, int] = field(default_factory=dict)

    @property
    def all_paths(self) -> list[Path]:
        return [self.paths[party] for party in (*SITES, "server")]


def instruction(
    phase: str, round: int | None, outcome: str = "acted", code: str | None = None
) -> dict[str, Any]:
    """The `instruction` payload a site logs for one server message (digest of stand-in parameters)."""
    digest = hashlib.sha256(f"{phase}:{round}".encode()).hexdigest()
    return {"phase": phase, "round": round, "digest": digest, "outcome": outcome, "code": code}


def _open_logs(root: Path) -> tuple[Path, dict[str, Ed25519PrivateKey], dict[str, Path], dict[str, AuditLog]]:
    keys = {party: Ed25519PrivateKey.generate() for party in (*SITES, "server")}
    keys_dir = root / "keys"
    for party, key in keys.items():
        write_key_pair(keys_dir, party, key)
    audit = root / "audit"
    paths = {party: audit / f"{party}.jsonl" for party in keys}
    logs = {party: AuditLog(paths[party], party, RUN_ID, keys[party]) for party in keys}
    return keys_dir, keys, paths, logs


def build_run(root: Path) -> Run:
    keys_dir, keys, paths, logs = _open_logs(root)
    server = logs["server"]
    server.append("run_config", {"method": "fedtar", "rounds": ROUNDS, "dp": {"enabled": True}})
    server.append(
        "key_fingerprints", {"signing": {party: f"{index:064x}" for index, party in enumerate(keys)}}
    )
    ledgers = {site: SiteLedger(logs[site], site) for site in SITES}
    for site in SITES:
        logs[site].append("policy", {"budget": BUDGETS[site], "delta": DELTA, "max_rounds": ROUNDS})
        logs[site].append("instruction", instruction("hello", None))
        record = ledgers[site].release(
            "train", "gmm_histogram", (1.0, GMM_SIGMA, 1), round=0, population_size=40
        )
        server.copy_record(record, keys[site].public_key())
    for round_ in range(1, ROUNDS + 1):
        participants, dropped = [], []
        for site in SITES:
            logs[site].append("instruction", instruction("train", round_), round=round_)
            dp_sgd = (Q, SIGMA, STEPS)
            if ledgers[site].epsilon_after("train", dp_sgd) > BUDGETS[site]:
                refusal = logs[site].append(
                    "budget_refusal",
                    {
                        "site": site,
                        "population": "train",
                        "epsilon_after": ledgers[site].epsilon_after("train", dp_sgd),
                        "budget": BUDGETS[site],
                        "reason": "the round would exceed the site's privacy budget",
                    },
                    round=round_,
                )
                server.copy_record(refusal, keys[site].public_key())
                dropped.append(site)
                continue
            participants.append(site)
            for record in (
                ledgers[site].release(
                    "train", "dp_sgd", dp_sgd, round=round_, clip_norm=1.0, population_size=40, steps=STEPS
                ),
                ledgers[site].release("validation", "alpha_scalars", (1.0, ALPHA_SIGMA, 1), round=round_),
            ):
                server.copy_record(record, keys[site].public_key())
        server.append("secagg_round", {"participants": participants, "dropped": dropped}, round=round_)
        server.append("alpha", {"alpha": [0.5, 0.3, 0.2]}, round=round_)
    for site in SITES:  # each scores its test split once, then ends its run
        logs[site].append("instruction", instruction("evaluate", None))
        logs[site].append("run_end", {"stopped_early": None})
    server.append("model_hash", {"sha256": "ab" * 32})
    for log in logs.values():
        log.close()
    counts = {site: sum(len(v) for v in ledgers[site].history.values()) for site in SITES}
    return Run(root, keys_dir, keys, paths, counts)


PLAIN_ROUNDS = 2
# site-0 turns down three server messages; the report must count them by code.
REFUSED = [("hypergrad", 1, "policy"), ("hypergrad", 2, "policy"), ("evaluate", None, "evaluate_repeated")]


def build_plain_run(root: Path) -> Run:
    """The same two sites and server without DP: plain sums, plain α scalars, no privacy records."""
    keys_dir, keys, paths, logs = _open_logs(root)
    server = logs["server"]
    server.append(
        "run_config",
        {
            "fed": {"method": "fedtar", "rounds": PLAIN_ROUNDS},
            "dp": {"enabled": False},
            "secagg": {"enabled": None},
            "he": {"enabled": False},
        },
    )
    for site in SITES:
        logs[site].append("population_sizes", {"train": 40, "validation": 10, "test": 10})
        logs[site].append("instruction", instruction("hello", None))
    for round_ in range(1, PLAIN_ROUNDS + 1):
        for site in SITES:
            logs[site].append("instruction", instruction("train", round_), round=round_)
            logs[site].append("instruction", instruction("plain_sum", None))
        server.append(
            "secagg_round",
            {
                "round": round_,
                "mode": "plain",
                "participants": list(SITES),
                "survivors": list(SITES),
                "dropped": [],
            },
            round=round_,
        )
        for site in SITES:
            refused = [code for phase, r, code in REFUSED if site == "site-0" and r == round_]
            outcome = ("refused", refused[0]) if refused else ("acted", None)
            logs[site].append("instruction", instruction("hypergrad", round_, *outcome), round=round_)
        server.append("alpha", {"alpha": [0.5, 0.3, 0.2]}, round=round_)
    for site in SITES:
        logs[site].append("instruction", instruction("evaluate", None))
    logs["site-0"].append("instruction", instruction("evaluate", None, "refused", "evaluate_repeated"))
    server.append("model_hash", {"sha256": "cd" * 32})
    for site in SITES:
        logs[site].append("run_end", {"stopped_early": None})
    for log in logs.values():
        log.close()
    return Run(root, keys_dir, keys, paths, {site: 0 for site in SITES})


@pytest.fixture(scope="session")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return build_run(tmp_path_factory.mktemp("pristine"))


@pytest.fixture(scope="session")
def pristine_plain(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return build_plain_run(tmp_path_factory.mktemp("pristine_plain"))


def copy_run(original: Run, root: Path) -> Run:
    """A private copy of `original` under `root`, free to tamper with."""
    shutil.copytree(original.root, root)
    return Run(
        root,
        root / "keys",
        original.keys,
        {party: root / "audit" / path.name for party, path in original.paths.items()},
        original.privacy_count,
    )


@pytest.fixture
def run(pristine: Run, tmp_path: Path) -> Run:
    """A private copy of the pristine run, free to tamper with."""
    return copy_run(pristine, tmp_path / "run")


@pytest.fixture
def plain_run(pristine_plain: Run, tmp_path: Path) -> Run:
    return copy_run(pristine_plain, tmp_path / "plain_run")
