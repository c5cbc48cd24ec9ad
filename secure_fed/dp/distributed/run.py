"""The distributed-DP plan of a run (`dp.noise = "distributed"`), derived from the config alone.

The sites and the server each derive it themselves, with the same function and the same public
inputs (config, model size, site count), so no party takes another's word for the noise shares, the
ring or h: a site sizes its own share, and a server that assumed another plan would decode noise.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
from dataclasses import dataclass

from secure_fed.config import RunConfig
from secure_fed.dp.distributed.plan import DistributedPlan, plan_distributed

DEFAULT_RING_BITS = 32
# the union of the sites' patients has no exact public size, so distributed mode's δ is one public
# number for every site (dp.delta, else this); each site still checks it against its own count
DEFAULT_DELTA = 1e-5

log = logging.getLogger(__name__)
# the warnings this process has printed: every site and the server plan the same run, and in one
# process (the in-process engine) the operator must see the line once, not once per party
_WARNED: set[str] = set()


def ring_bits(cfg: RunConfig) -> int:
    """Bits of the SecAgg+ ring the shares live in (dp.ring_bits, else 32: one word per value)."""
    return cfg.dp.ring_bits or DEFAULT_RING_BITS


def honest_min(cfg: RunConfig, n_sites: int) -> int:
    """h: dp.honest_min, else every site but the tolerated colluders."""
    return cfg.dp.honest_min if cfg.dp.honest_min is not None else n_sites - cfg.dp.colluders


def check_honest_min(cfg: RunConfig, n_sites: int, neighbourhood: int) -> None:
    """ValueError (one line, naming the key and the fix) when h cannot work with this many sites.
    `neighbourhood`: the sites in one site's SecAgg+ neighbourhood, itself included (SecAgg+'s
    number, `crypto.secagg_protocol.neighbourhood_size`): all it can see survive, so the most h its
    unmask rule can ever be met with."""
    h, c = honest_min(cfg, n_sites), cfg.dp.colluders
    if not c < h <= n_sites:
        raise ValueError(
            f"dp.honest_min = {h} with dp.colluders = {c} does not fit this run's {n_sites} sites: "
            "h must exceed c and be at most the sites"
        )
    seen = neighbourhood
    if seen < h:
        # a site unmasks only with h survivors in its own view, so with a sparser graph every round
        # would abort at setup (measured: every round, from 10 sites on, at the defaults)
        raise ValueError(
            f"dp.honest_min = {h} needs each site's SecAgg+ neighbourhood to hold {h} sites, but "
            f"secagg.neighbours gives {seen} of {n_sites}: set secagg.neighbours to {h - 1} or more, "
            f"or dp.honest_min to {seen} or less"
        )


def delta(cfg: RunConfig) -> float:
    return cfg.dp.delta if cfg.dp.delta is not None else DEFAULT_DELTA


def histogram_sigma(cfg: RunConfig) -> float:
    """σ of each site's GMM histogram: `dp.gmm_fraction` of the target ε, as in site mode; the plan
    composes it with the rounds, so the ledger's ε of histogram + rounds is the target."""
    from secure_fed.dp.calibration import calibrate_gaussian

    assert cfg.dp.target_epsilon is not None  # the config refuses distributed mode without it
    return calibrate_gaussian(cfg.dp.gmm_fraction * cfg.dp.target_epsilon, delta(cfg))


def round_seed(cfg: RunConfig, round_id: int) -> bytes:
    """The round's public seed (the Hadamard signs every site and the server must share): a hash of
    the run's seed and the round, chosen by nobody and recomputed by everybody."""
    return hashlib.sha256(f"secure_fed/distributed-dp/round|{cfg.seed}|{round_id}".encode()).digest()


# A site's sum of clipped gradients is projected onto this many patients' worth of norm before it is
# encoded (public: every party sizes the ring with it). The projection is 1-Lipschitz, so it costs no
# privacy; a larger bound only makes the ring's unit coarser.
SITE_BOUND_PATIENTS = 1024


def plan_for(cfg: RunConfig, dim: int, n_sites: int) -> DistributedPlan:
    """The run's `DistributedPlan`: one DP step a round over `cfg.fed.rounds` rounds at Poisson
    rate q, calibrated so that they and the site's GMM histogram together meet the target ε, the
    ring and granularity sized for `n_sites` sites, shares sized so h − c honest survivors carry
    the whole noise."""
    assert cfg.dp.target_epsilon is not None  # the config refuses distributed mode without it
    plan = _plan(
        cfg.dp.target_epsilon,
        histogram_sigma(cfg),
        delta(cfg),
        cfg.dp.sample_rate,
        cfg.fed.rounds,
        cfg.dp.max_grad_norm,
        dim,
        honest_min(cfg, n_sites),
        cfg.dp.colluders,
        ring_bits(cfg),
        n_sites,
        cfg.dp.amplification,
    )
    warning = site_mode_warning(cfg, plan)
    if warning is not None and warning not in _WARNED:
        _WARNED.add(warning)
        log.warning("%s", warning)
    return plan


@dataclass(frozen=True)
class NoiseComparison:
    """The noise in the released sum, distributed mode against site mode at the same (ε, δ, q, steps).

    Site mode: each of m surviving sites adds N(0, (σC)²) per coordinate, so the sum carries std
    √m·σ·C. Distributed mode: each of the m adds a share of variance mu_total/(h − c) (integer units
    of γ), so the sum carries γ·√(m·mu_total/(h − c)). m cancels: the ratio is the same for any
    number of survivors, and is z/(σ·√(h − c)) with z the plan's noise multiplier (std over C)."""

    site_sigma: float  # site mode's DP-SGD noise multiplier, Opacus' accountant
    distributed_multiplier: float  # the plan's std from h − c honest shares, over C
    honest_min: int  # h
    colluders: int  # c
    ratio: float  # released noise std, distributed / site

    @property
    def distributed_loses(self) -> bool:
        return self.ratio > 1.0


def site_mode_sigma(cfg: RunConfig) -> float:
    """σ site mode would use for this run's releases: the same GMM histogram share of ε and the same
    q and steps (one a round, as distributed mode takes), at the same δ, by the project's calibration
    (dp.calibration.split_budget, the accountant `dp.accountant` names)."""
    assert cfg.dp.target_epsilon is not None  # the config refuses distributed mode without it
    return _site_sigma(
        cfg.dp.target_epsilon,
        delta(cfg),
        cfg.dp.sample_rate,
        cfg.fed.rounds,
        cfg.dp.gmm_fraction,
        cfg.dp.accountant,
    )


@functools.lru_cache(maxsize=8)
def _site_sigma(
    target_epsilon: float, delta: float, sample_rate: float, steps: int, gmm_fraction: float, accountant: str
) -> float:
    from secure_fed.dp.calibration import split_budget

    split = split_budget(
        target_epsilon,
        delta,
        sampling_rate=sample_rate,
        rounds=steps,
        steps_per_round=1,
        gmm_fraction=gmm_fraction,
        accountant=accountant,  # type: ignore[arg-type]
        # 1 % (the default) would leave σ up to that much high and flatter distributed mode
        tolerance=1e-4,
    )
    return split.dpsgd_noise_multiplier


def compare_noise(cfg: RunConfig, plan: DistributedPlan) -> NoiseComparison:
    """Released-sum noise of `plan` (this run's distributed plan) against site mode's."""
    sigma = site_mode_sigma(cfg)
    multiplier = plan.noise_std / plan.clip
    shares = plan.honest_min - plan.colluders
    return NoiseComparison(
        site_sigma=sigma,
        distributed_multiplier=multiplier,
        honest_min=plan.honest_min,
        colluders=plan.colluders,
        ratio=multiplier / (math.sqrt(shares) * sigma),
    )


def site_mode_warning(cfg: RunConfig, plan: DistributedPlan) -> str | None:
    """One line when distributed mode releases more noise than site mode would at these settings,
    else None. Site mode is the stronger guarantee (each site's update is private on its own, even
    if SecAgg+ failed); distributed mode's one gain is less noise in the sum."""
    found = compare_noise(cfg, plan)
    if not found.distributed_loses:
        return None
    where = (
        f"dp.noise = 'distributed' releases {found.ratio:.2f}x the noise std that site mode would at "
        f"dp.target_epsilon = {cfg.dp.target_epsilon:g}, dp.sample_rate = {cfg.dp.sample_rate:g} "
        f"({cfg.fed.rounds} rounds, h = {found.honest_min}, c = {found.colluders})"
    )
    if cfg.dp.amplification == "general":
        return (
            f"{where} under dp.amplification = 'general'; set dp.amplification = 'symmetric' (the "
            "proved, tighter bound: docs/THREAT_MODEL.md) or dp.noise = 'site'"
        )
    return (
        f"{where}: site mode releases less noise here and keeps each site's update private even if "
        "SecAgg+ fails; set dp.noise = 'site' (where distributed mode pays: docs/THREAT_MODEL.md, "
        "'Distributed DP')"
    )


@functools.lru_cache(maxsize=8)
def _plan(
    target_epsilon: float,
    histogram_sigma: float,
    delta: float,
    sample_rate: float,
    steps: int,
    clip: float,
    dim: int,
    honest_min: int,
    colluders: int,
    bits: int,
    max_sites: int,
    amplification: str,
) -> DistributedPlan:
    # calibration bisects an RDP curve: seconds, so one process plans a run once
    from secure_fed.dp.histogram import histogram_event

    return plan_distributed(
        target_epsilon=target_epsilon,
        delta=delta,
        sample_rate=sample_rate,
        steps=steps,
        clip=clip,
        dim=dim,
        honest_min=honest_min,
        colluders=colluders,
        bits=bits,
        max_sites=max_sites,
        site_bound=clip * SITE_BOUND_PATIENTS,
        fixed_events=(histogram_event(histogram_sigma),),
        amplification=amplification,
    )


def plan_digest(plan: DistributedPlan) -> str:
    """SHA-256 of the plan's JSON: what a site and the server compare before a sum is decoded."""
    return hashlib.sha256(json.dumps(plan.to_json(), sort_keys=True).encode()).hexdigest()
