"""The server's run loop: rounds, checkpoints, resume, final evaluation, metrics.json.

Runtime-agnostic: it talks to sites only through a Transport, so the Flower ServerApp (simulation
or SuperLink) and the in-process engine run the very same loop.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from secure_fed.clients.evaluation import METRIC_NAMES
from secure_fed.config import RunConfig
from secure_fed.crypto.transport import Transport
from secure_fed.server.aggregation import AggregationSettings
from secure_fed.server.checkpoint import load_checkpoint, save_checkpoint
from secure_fed.server.strategies import RoundContext, RoundResult, make_strategy
from secure_fed.server.strategies.base import TooFewSites

log = logging.getLogger(__name__)

EventSink = Callable[[str, dict[str, Any], int | None], None]


@dataclass
class RunOutcome:
    metrics: dict[str, Any]
    stopped_early: str | None = None
    per_round: list[dict[str, Any]] = field(default_factory=list)


def _no_events(event: str, payload: dict[str, Any], round_id: int | None) -> None:
    return None


class Orchestrator:
    def __init__(
        self,
        cfg: RunConfig,
        transport: Transport,
        nodes: list[int],
        initial_state: np.ndarray,
        out: Path,
        events: EventSink = _no_events,
        progress: Callable[[int, int, RoundResult], None] | None = None,
        copy_record: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.cfg = cfg
        self.transport = transport
        self.nodes = sorted(nodes)
        self.initial_state = np.asarray(initial_state, dtype=np.float64)
        self.out = Path(out)
        self.events = events
        self.progress = progress
        self.copy_record = copy_record or (lambda record: None)
        self.site_deltas: dict[str, float] = {}
        self.aggregation = AggregationSettings.from_config(cfg)

    def hello(self) -> dict[int, str]:
        replies = self.transport.exchange("hello", {n: {} for n in self.nodes})
        sites = {n: str(r["site"]) for n, r in replies.items() if "site" in r}
        missing = [n for n in self.nodes if n not in sites]
        if missing:
            raise RuntimeError(f"nodes {missing} did not answer hello: {[replies.get(n) for n in missing]}")
        return sites

    def run(self, resume: bool = False) -> RunOutcome:
        cfg = self.cfg
        sites = self.hello()
        strategy = make_strategy(cfg.fed.method, self.initial_state.size, cfg.data.max_visits, cfg)
        checkpoint_dir = self.out / "checkpoint"
        state, first_round, per_round = self.initial_state.copy(), 1, []
        if resume:
            loaded = load_checkpoint(checkpoint_dir)
            if loaded is None:
                raise FileNotFoundError(f"--resume: no checkpoint in {checkpoint_dir}")
            done, state, strategy_state, meta = loaded
            strategy.load_state_dict(strategy_state)
            per_round = list(meta.get("per_round", []))
            first_round = done + 1
            log.info("resuming after round %d", done)
        stopped = None
        upload_bytes = upload_size(strategy.upload_dim(), len(self.nodes), self.aggregation)
        for r in range(first_round, cfg.fed.rounds + 1):
            ctx = RoundContext(
                round=r,
                transport=self.transport,
                nodes=self.nodes,
                sites=sites,
                cfg=cfg,
                aggregation=self.aggregation,
                log_event=lambda event, payload, r=r: self.events(event, payload, r),
                copy_site_record=self.copy_record,
                site_deltas=self.site_deltas,
            )
            started = time.perf_counter()
            try:
                result = strategy.run_round(ctx, state)
            except TooFewSites as err:
                stopped = str(err)
                log.warning("%s", err)
                self.events("run_stopped", {"reason": stopped}, r)
                break
            state = result.global_state
            row = {
                "round": r,
                "val_loss": result.val_loss,
                "train_loss": result.train_loss,
                "alpha": result.alpha,
                "participants": [sites[n] for n in result.participants],
                "declined": result.declined,
                "dropped": [sites[n] for n in result.dropped],
                "epsilon": result.epsilon,
                "quantisation_bound": result.quantisation_bound,
                "seconds": round(time.perf_counter() - started, 3),
            }
            per_round.append(row)
            if result.alpha is not None:
                self.events("alpha", {"alpha": result.alpha}, r)
            save_checkpoint(checkpoint_dir, r, state, strategy.state_dict(), {"per_round": per_round})
            if self.progress is not None:
                self.progress(r, cfg.fed.rounds, result)
        test = self.evaluate(state, stopped)
        self.transport.exchange("finish", {n: _end(stopped) for n in self.nodes})
        final_alpha = getattr(strategy, "alpha", None)
        metrics: dict[str, Any] = {
            "method": cfg.fed.method,
            "seed": cfg.seed,
            "rounds": len(per_round),
            "test": test,
            "alpha": [float(a) for a in final_alpha()] if callable(final_alpha) else None,
            "per_round": per_round,
            "upload_bytes_per_site_per_round": upload_bytes,
            "secure_aggregation": self.aggregation.mode,
            "he": self.aggregation.he is not None,
            "stopped_early": stopped,
        }
        if cfg.dp.enabled:
            metrics["privacy"] = privacy_summary(per_round, self.site_deltas)
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "metrics.json").write_text(json.dumps(metrics, indent=1, default=_json_default))
        np.save(self.out / "global_adapters.npy", state)
        self.final_state = state
        return RunOutcome(metrics=metrics, stopped_early=stopped, per_round=per_round)

    def evaluate(self, state: np.ndarray, stopped: str | None = None) -> dict[str, float]:
        """Each site scores its own test split once, for the final model; only corpus-level figures
        come back, each with a power-of-two weight (sites do not release exact test-set sizes)."""
        request = {"global": state, "split": "test", **_end(stopped)}
        replies = self.transport.exchange("evaluate", {n: dict(request) for n in self.nodes})
        return pool_scores(list(replies.values()))


def _end(stopped: str | None) -> dict[str, Any]:
    """A site ends training (scores its test split, closes its log) before the last round only
    when told why; it then acts on no further training."""
    return {"stopped_early": stopped} if stopped else {}


def pool_scores(replies: list[dict[str, Any]]) -> dict[str, float]:
    """Sites' corpus-level scores averaged with the weights they released."""
    rows = [r for r in replies if r.get("status") == "ok" and r.get("weight", 0) > 0]
    out: dict[str, float] = {}
    for name in METRIC_NAMES:
        pairs = [(float(r[name]), int(r["weight"])) for r in rows if not np.isnan(float(r[name]))]
        out[name] = sum(v * n for v, n in pairs) / sum(n for _, n in pairs) if pairs else float("nan")
    return out


def upload_size(dim: int, n_sites: int, aggregation: AggregationSettings) -> int:
    """Bytes one site uploads for the update: float64 values, or SecAgg+ ring words (+ its count)."""
    if aggregation.secagg is None:
        return dim * 8
    from secure_fed.crypto.quantize import ring_dtype
    from secure_fed.crypto.secagg_protocol import round_params

    params = round_params(n_sites, dim, aggregation.secagg)
    return ring_dtype(params.modulus_bits).itemsize * (dim + 1)


def privacy_summary(per_round: list[dict[str, Any]], deltas: dict[str, float]) -> dict[str, Any]:
    """metrics.json's privacy block: each site's cumulative ε after its last admitted round."""
    latest: dict[str, dict[str, float]] = {}
    for row in per_round:
        latest.update(row.get("epsilon") or {})
    return {
        "delta": max(deltas.values()) if deltas else None,
        "delta_per_site": deltas,
        "epsilon": latest,
        "per_round": [{"round": row["round"], "epsilon": row.get("epsilon") or {}} for row in per_round],
    }


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(type(value).__name__)
