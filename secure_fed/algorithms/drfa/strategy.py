"""DRFA (Deng et al. 2020), distributionally robust averaging: the server keeps weights λ on the
simplex over sites, sites pre-scale their updates by their λ_k, and λ ascends on the sites' losses.

The loss of each site is an individual (non-aggregated) release: DRFA is a non-private baseline.
Sites accept a weight only as their entry of one factor vector every site is shown alike, each
entry at least `fed.factor_floor` and averaging one (site/factors.py): a λ of zero for all but
one site would make the secure sum that site's update. So the factors sent are λ mixed with the
uniform weights, floor + (1 − floor)·n·λ, which keeps DRFA's ordering of the sites.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from secure_fed.config import RunConfig
from secure_fed.server.strategies.base import RoundContext, RoundResult, Strategy, weighted_mean


def project_simplex(v: np.ndarray) -> np.ndarray:
    u = np.sort(v)[::-1]
    css = np.cumsum(u)
    rho = np.nonzero(u * np.arange(1, len(v) + 1) > (css - 1))[0][-1]
    theta = (css[rho] - 1) / (rho + 1.0)
    return np.maximum(v - theta, 0.0)


class DRFA(Strategy):
    name = "drfa"

    def __init__(self, dim: int, cfg: RunConfig) -> None:
        super().__init__(dim, cfg)
        self.lam: dict[str, float] = {}
        self._sites: list[str] = []  # this round's sites, in node order

    def train_options(self, round_id: int) -> dict[str, Any]:
        return {"factor_sites": self._sites, "factors": self.factors(self._sites)}

    def run_round(self, ctx: RoundContext, global_state: np.ndarray) -> RoundResult:
        # the shared training phase: one message phase (the plain sum or the SecAgg+ setup rides on
        # it) and the same refusal, privacy and audit handling as every other strategy
        self._sites = [ctx.sites[n] for n in ctx.nodes]
        for s in self._sites:
            self.lam.setdefault(s, 1.0 / len(self._sites))
        participants, declined, info = self.train_phase(ctx, global_state)
        total, summed = self.sum_uploads(ctx, participants, self.upload_dim())
        new_state = weighted_mean(total, self.dim, global_state)
        # Ascend on the losses of the sites that reported one; project over every site so λ stays
        # a distribution even when some sites sat the round out.
        ascent = {
            ctx.sites[n]: self.cfg.fed.drfa_lr * float(np.nan_to_num(info["train_losses"][n]))
            for n in participants
        }
        lam = project_simplex(np.array([self.lam[s] + ascent.get(s, 0.0) for s in self._sites]))
        self.lam.update({s: float(v) for s, v in zip(self._sites, lam, strict=True)})
        return self.result(new_state, summed, declined, info)

    def factors(self, sites: list[str]) -> list[float]:
        """What each site's contribution is scaled by: λ rescaled over this round's sites, mixed
        with the uniform weights so that every factor is at least the sites' floor."""
        floor = self.cfg.fed.factor_floor
        lam = np.array([self.lam[s] for s in sites])
        lam = lam / lam.sum() if lam.sum() > 0 else np.full(len(sites), 1.0 / len(sites))
        return [float(v) for v in floor + (1.0 - floor) * len(sites) * lam]

    def state_dict(self) -> dict[str, Any]:
        return {"lambda_sites": list(self.lam), "lambda_values": np.array(list(self.lam.values()))}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.lam = dict(zip(state["lambda_sites"], np.asarray(state["lambda_values"]).tolist(), strict=True))
