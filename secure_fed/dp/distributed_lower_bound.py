"""The one-run empirical lower bound (Steinke, Nasr, Jagielski 2023) of distributed DP's released sum.

What is measured: rounds of the distributed mechanism (`secure_fed.dp.distributed`), each a sum
over `sites` sites of `encode_share(S_k)`, where S_k is site k's sum of its Poisson-sampled
patients' gradients clipped to C. The canaries are patients: white-box gradient canaries
(`secure_fed.dp.canaries.GradientCanaries`, norm 4·C along a random direction, so clipping must
cut each to C), each included with probability ½ and then held by one of `canary_sites` honest
sites, which Poisson-samples it at rate q every round beside its other patients.

Adversary view, and why: the server's unmasked ring sum (SecAgg+ returns exactly the residue sum
of the shares: tests/crypto/test_secagg_rounds.py) with the c colluding sites' shares removed, as
the threat model's server + c sites can do; with sites = h that view carries exactly the
h − c honest shares the accounting counts on (mu_total), the strongest view the stated ε must
hold against. The view is decoded (`decode_sum`) and projected on each canary's direction in units
of C; a canary's score is the per-round likelihood ratio of "sampled with probability q" against
"absent" under Gaussian noise of the *stated* std γ√mu_total (the canary holder's belief: a mechanism
that adds less noise than stated is what the measurement must catch), summed over rounds. The guesses
are "in" for the top r scores (under Poisson sampling an unsampled canary cannot be told from an
excluded one, so "out" guesses would cap the measurement below its ceiling), and ε̂ is the one-run bound.

The stated ε is the accountant's ε of the rounds (`distributed_epsilon`: the Poisson-sampled
Skellam sum's RDP with the rounding's sensitivity), which ε̂ must not exceed. `mechanism` lets a
test run other shares than the stated plan's (e.g. no noise) and see the measurement catch it.

The sites' other patients are fixed random gradients (a DP guarantee holds for every dataset);
their sampling and the sites' rounding and noise come from the sites' own generators, never the
canary holder's. Pure numpy and the dp layer: nothing of clients, crypto, the server or Flower.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from secure_fed.dp.accountants import RDP
from secure_fed.dp.canaries import (
    DEFAULT_SUPPORT,
    BoundOutcome,
    GradientCanaries,
    evaluate,
    likelihood_scores,
)
from secure_fed.dp.clipped_sum import clip_rows
from secure_fed.dp.distributed import DistributedPlan, decode_sum, distributed_epsilon, encode_share
from secure_fed.dp.keystream import STREAM_KEY_BYTES, NoiseStream
from secure_fed.dp.lower_bound import DEFAULT_CONFIDENCE, verdict

CANARY = "white-box gradient canary held by a site as a patient: norm 4C (clipped to C), random direction"
VIEW = "the decoded ring sum of every round, with the c colluding sites' shares removed"
SCORE = "per-round likelihood ratio of a Poisson-sampled canary under the stated noise, summed over rounds"


@dataclass(frozen=True, eq=False)
class DistributedLowerBound:
    outcome: BoundOutcome
    stated_epsilon: float  # the accountant's ε of the measured rounds at the outcome's δ
    rounds: int
    sites: int
    colluders: int
    canary_sites: int
    sampling_rate: float
    noise_multiplier: float  # the stated noise std of the released sum in units of C
    # the canary holder's evidence: never logged (the counts in `outcome` are what anyone can check)
    scores: np.ndarray
    included: np.ndarray

    @property
    def verdict(self) -> str:
        return verdict(self.outcome.epsilon_hat, self.outcome.epsilon_hat_max, self.stated_epsilon)

    def payload(self) -> dict[str, Any]:
        """An `empirical_audit` record's fields, as the site-mode measurement logs them."""
        return {
            "mechanism": "distributed_skellam_sum",
            **self.outcome.to_json(),
            "stated_epsilon": self.stated_epsilon,
            "verdict": self.verdict,
            "accountant": RDP.name,
            "rounds": self.rounds,
            "steps": self.rounds,
            "sites": self.sites,
            "colluders": self.colluders,
            "canary_sites": self.canary_sites,
            "noise_multiplier": self.noise_multiplier,
            "sampling_rate": self.sampling_rate,
            "canary": CANARY,
            "adversary_view": VIEW,
            "score": SCORE,
        }


def _bound_round_seed(round_id: int) -> bytes:
    return hashlib.sha256(f"secure_fed/distributed-dp/audit-round|{round_id}".encode()).digest()


def _os_stream(_site: int) -> NoiseStream:
    return NoiseStream(os.urandom(STREAM_KEY_BYTES))


def bound_distributed(
    plan: DistributedPlan,
    sampling_rate: float,
    rounds: int,
    canaries: int,
    guesses: int,
    delta: float,
    canary_rng: np.random.Generator,
    *,
    sites: int | None = None,
    canary_sites: int = 1,
    others: int = 16,
    support: int = DEFAULT_SUPPORT,
    confidence: float = DEFAULT_CONFIDENCE,
    mechanism: DistributedPlan | None = None,
    site_stream: Callable[[int], NoiseStream] = _os_stream,
) -> DistributedLowerBound:
    """Run `rounds` rounds of the distributed mechanism with `canaries` patient canaries and bound ε.

    sites: parties to the sum (default h = plan.honest_min), the first plan.colluders of them
    colluding with the server; canaries sit at the next `canary_sites` (honest) sites, `others`
    further patients at every site. mechanism: the plan the sites encode with (default `plan`).
    site_stream(k): site k's secret keystream (default: a fresh OS key, as a real release).
    """
    run = plan if mechanism is None else mechanism
    if run.dim != plan.dim or run.gamma != plan.gamma or run.bits != plan.bits:
        raise ValueError("the mechanism must encode in the stated plan's ring (dim, gamma, bits)")
    n_sites = plan.honest_min if sites is None else sites
    c = plan.colluders
    if not 1 <= canary_sites <= n_sites - c:
        raise ValueError(
            f"canary_sites must lie in [1, {n_sites - c}] (the honest sites), got {canary_sites}"
        )
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    clip = plan.clip
    drawn = GradientCanaries.draw(canaries, [plan.dim], clip, canary_rng, support=support)
    # canary j is a patient of honest site c + (j mod canary_sites)
    holder = c + np.arange(canaries) % canary_sites
    patients = [
        canary_rng.normal(size=(others, plan.dim)) * (clip / math.sqrt(plan.dim)) for _ in range(n_sites)
    ]
    streams = [site_stream(k) for k in range(n_sites)]
    mask = np.uint64((1 << plan.bits) - 1)
    projections = []
    for round_id in range(1, rounds + 1):
        seed = _bound_round_seed(round_id)
        view = np.zeros(plan.padded_dim, dtype=np.uint64)
        for k, rng in enumerate(streams):
            # the site's Poisson sample over its patients and the canaries it holds, from its own keystream
            own = patients[k][rng.random(others) < sampling_rate]
            mine = np.flatnonzero(drawn.included & (holder == k))
            chosen = mine[rng.random(len(mine)) < sampling_rate]
            rows = np.vstack([own, drawn.blocks(chosen)[0].double().numpy()]) if len(chosen) else own
            clipped_sum = clip_rows(rows, clip).sum(axis=0) if len(rows) else np.zeros(plan.dim)
            share = encode_share(clipped_sum, run, seed, rng)
            if k >= c:  # a colluder's share is known to the server: removed from what it learns
                view += share
        view &= mask
        released = decode_sum(view, run, seed)
        # ⟨released, u_j⟩ for every canary, in units of one clipped canary (C)
        projections.append((released[drawn.coords] * drawn.values).sum(axis=1) / clip)
    stated_noise = plan.noise_std / clip
    scores = likelihood_scores(np.stack(projections), sampling_rate, stated_noise)
    outcome = evaluate(scores, drawn.included, guesses, delta, confidence, guess_out=False)
    return DistributedLowerBound(
        outcome=outcome,
        stated_epsilon=distributed_epsilon(plan, sampling_rate, rounds, delta),
        rounds=rounds,
        sites=n_sites,
        colluders=c,
        canary_sites=canary_sites,
        sampling_rate=sampling_rate,
        noise_multiplier=stated_noise,
        scores=scores,
        included=drawn.included,
    )
