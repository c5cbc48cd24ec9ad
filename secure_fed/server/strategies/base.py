"""What every strategy shares: the training broadcast and the secure sum of the uploads."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from secure_fed.config import RunConfig
from secure_fed.crypto.secagg_protocol import SecAggAbort, embed_setup, embedded_setup
from secure_fed.crypto.secagg_server import Advertised, SetupPlan, advertised_keys, plan_setup
from secure_fed.crypto.transport import Transport
from secure_fed.crypto.vectors import (
    PLAIN_SUM_REFUSED,
    embed_plain_sum,
    embedded_plain_sum,
    plain_sum_request,
)
from secure_fed.protocol.failures import declined_reason, one_line
from secure_fed.server.aggregation import AggregationSettings, secure_sum


@dataclass
class RoundContext:
    round: int
    transport: Transport
    nodes: list[int]
    sites: dict[int, str]
    cfg: RunConfig
    aggregation: AggregationSettings
    log_event: Callable[[str, dict[str, Any]], None] = lambda event, payload: None
    copy_site_record: Callable[[dict[str, Any]], None] = lambda record: None
    site_deltas: dict[str, float] = field(default_factory=dict)
    # the SecAgg+ setup that went out with this round's training message, for the secure sum
    secagg_advertised: Advertised | None = None
    # a plain round's vectors that came back with the training replies (dim, replies by node),
    # for the plain sum: one message phase, not the broadcast and then a query for the vectors
    plain_carried: tuple[int, dict[int, dict[str, Any]]] | None = None
    # the sites that declined this round's training, with their reasons: a round that then cannot
    # be summed is skipped, and the operator is told who declined and why
    declined: dict[str, str] = field(default_factory=dict)


@dataclass
class RoundResult:
    global_state: np.ndarray
    participants: list[int]
    declined: dict[str, str]
    alpha: list[float] | None = None
    val_loss: float | None = None
    train_loss: float | None = None
    epsilon: dict[str, dict[str, float]] = field(default_factory=dict)
    dropped: list[int] = field(default_factory=list)
    quantisation_bound: float = 0.0
    # the sites that delivered every phase of the round, where a phase after the sum can lose some
    # (FedTAR's α); None: the sum's survivors did
    delivered: list[int] | None = None
    alpha_kept: bool = False  # the round's α sum could not be done: α kept its value


class TooFewSites(RuntimeError):
    """Fewer sites than `fed.min_sites` took part; the run ends cleanly."""


class Strategy(ABC):
    name: str
    pooled: bool = True

    def __init__(self, dim: int, cfg: RunConfig) -> None:
        self.dim = dim
        self.cfg = cfg

    def upload_dim(self) -> int:
        """Length of one site's upload: Σ n Δ, then n (per copy)."""
        return self.dim + 1

    def train_options(self, round_id: int) -> dict[str, Any]:
        return {}

    @abstractmethod
    def run_round(self, ctx: RoundContext, global_state: np.ndarray) -> RoundResult: ...

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None

    @staticmethod
    def result(
        new_state: np.ndarray, summed: Any, declined: dict[str, str], info: dict[str, Any], **extra: Any
    ) -> RoundResult:
        """The round's outcome from what every strategy has: the sum's survivors, the refusals."""
        return RoundResult(
            global_state=new_state,
            participants=summed.survivors,
            declined=declined,
            train_loss=info.get("train_loss"),
            epsilon=info.get("epsilon", {}),
            dropped=summed.dropped,
            quantisation_bound=summed.quantisation_bound,
            **extra,
        )

    # -- shared phases ---------------------------------------------------------------------
    def train_phase(
        self, ctx: RoundContext, global_state: np.ndarray
    ) -> tuple[list[int], dict[str, str], dict]:
        request = {
            "round": ctx.round,
            "method": self.name,
            "global": global_state.astype(np.float64),
            "dp": ctx.cfg.dp.enabled,
            **self.train_options(ctx.round),
        }
        plan = self._secagg_plan(ctx)
        setups = {n: embed_setup(plan.requests[n]) if plan else {} for n in ctx.nodes}
        if ctx.aggregation.secagg is None:  # a plain sum: each site's vector comes back with its training
            request.update(embed_plain_sum(plain_sum_request(ctx.round, self.upload_dim())))
        replies = ctx.transport.exchange("train", {n: {**request, **setups[n]} for n in ctx.nodes})
        participants, declined, eps = [], {}, {}
        said: dict[str, str] = {}  # the sites' own words: the console's, never signed
        floors: dict[int, int] = {}  # distributed DP: each site's declared public patient count
        plans: dict[int, str] = {}  # distributed DP: the digest of the plan each site encoded with
        for node in ctx.nodes:
            reply = replies.get(node)
            site = ctx.sites[node]
            if reply is None:
                declined[site] = said[site] = declined_reason(None)
            elif reply.get("status") != "ok":
                declined[site] = declined_reason(reply)
                said[site] = one_line(str(reply.get("reason", reply.get("error", "declined"))))
                if reply.get("status") == "declined":
                    ctx.log_event(
                        "budget_refusal",
                        {
                            "site": site,
                            "population": reply.get("population"),
                            "reason": declined[site],
                            "epsilon_after": reply.get("would_be_epsilon"),
                            # whose accountant epsilon_after is, as the site said
                            "accountant": reply.get("accountant"),
                            "budget": reply.get("budget"),
                        },
                    )
            else:
                participants.append(node)
                if "public_patients" in reply:
                    floors[node] = int(reply["public_patients"])
                if "distributed_plan" in reply:
                    plans[node] = str(reply["distributed_plan"])
                for record in reply.get("audit_records", []):
                    ctx.copy_site_record(json.loads(record))
                if "epsilon_rdp" in reply:
                    prv = float(reply["epsilon_prv"])
                    eps[site] = {"rdp": float(reply["epsilon_rdp"]), "prv": None if np.isnan(prv) else prv}
                    if isinstance(reply.get("epsilon_population"), str):
                        eps[site]["population"] = reply["epsilon_population"]
                    ctx.site_deltas[site] = float(reply["delta"])
        ctx.declined = dict(declined)
        if ctx.aggregation.secagg is None:
            # a site that answered without an embedded vector and without refusing one (a site
            # that predates it) is asked by the plain-sum query, as before
            vectors = {n: embedded_plain_sum(replies[n]) for n in participants}
            carried = {
                n: vector or {}
                for n, vector in vectors.items()
                if vector is not None or PLAIN_SUM_REFUSED in replies[n]
            }
            ctx.plain_carried = (self.upload_dim(), carried)
        if plan is not None:
            answers = {n: embedded_setup(replies[n]) or {} for n in participants}
            ctx.secagg_advertised = Advertised(plan, advertised_keys(plan, answers))
        if len(participants) < ctx.cfg.fed.min_sites:
            raise TooFewSites(
                f"round {ctx.round}: only {len(participants)} site(s) took part, fewer than fed.min_sites = "
                f"{ctx.cfg.fed.min_sites}" + "".join(f"\n  {s}: {why}" for s, why in said.items())
            )
        train_losses = [float(replies[n].get("train_loss", float("nan"))) for n in participants]
        return (
            participants,
            declined,
            {
                "epsilon": eps,
                "train_loss": float(np.nanmean(train_losses)) if not all(np.isnan(train_losses)) else None,
                # per node (NaN where the site keeps it, as a SecAgg+ site does): DRFA ascends on them
                "train_losses": dict(zip(participants, train_losses, strict=True)),
                "population_floors": floors,
                "distributed_plans": plans,
            },
        )

    def _secagg_plan(self, ctx: RoundContext) -> SetupPlan | None:
        """The SecAgg+ setup to send with the training message (None: plain sums, or too few
        sites for SecAgg+ — the secure sum then says so itself)."""
        if ctx.aggregation.secagg is None:
            return None
        try:
            return plan_setup(ctx.nodes, self.upload_dim(), ctx.aggregation.secagg, ctx.round)
        except SecAggAbort:
            return None

    def sum_uploads(self, ctx: RoundContext, participants: list[int], dim: int) -> tuple[np.ndarray, Any]:
        advertised, ctx.secagg_advertised = ctx.secagg_advertised, None
        carried_for, ctx.plain_carried = ctx.plain_carried, None
        # vectors carried for another length are not this sum's: its sites are asked
        carried = carried_for[1] if carried_for is not None and carried_for[0] == dim else None
        summed = secure_sum(ctx.transport, participants, dim, ctx.aggregation, ctx.round, advertised, carried)
        ctx.log_event(
            "secagg_round",
            {
                "round": ctx.round,
                "mode": ctx.aggregation.mode,
                "participants": [ctx.sites[n] for n in participants],
                "survivors": [ctx.sites[n] for n in summed.survivors],
                "dropped": [ctx.sites[n] for n in summed.dropped],
                "quantisation_bound": summed.quantisation_bound,
            },
        )
        return summed.total, summed


def weighted_mean(total: np.ndarray, dim: int, start: np.ndarray) -> np.ndarray:
    """Σ n Δ / Σ n applied to the start state (Σ n = 0 keeps the start)."""
    count = total[dim]
    return start + (total[:dim] / count if count > 0 else 0.0)
