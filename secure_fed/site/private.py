"""A site's privacy plan and bookkeeping: calibration before round 1, the ledger, the budget guard,
and the DP releases it makes (DP-SGD gradients, GMM histogram, α scalars).

Privacy unit: the patient. Train and validation patients are disjoint populations (parallel
composition): DP-SGD and the GMM histogram spend the train population's budget, the α scalars the
validation population's. Every release draws its randomness (noise, Poisson sampling) from its own
AES-256-CTR keystream, keyed by HKDF over the site's secret noise key and fresh OS randomness
(`secure_fed.dp.keystream`): never from a seed the server knows or could search, and not
reproducible later even from the site's own secret. A restarted site therefore reuses what it
released (the noisy GMM histogram in its private folder) instead of drawing again.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from secure_fed.config import RunConfig
from secure_fed.dp.budget import Admission, BudgetGuard
from secure_fed.dp.calibration import (
    calibrate_gaussian,
    calibrate_gaussian_for,
    check_delta,
    default_delta,
    split_budget,
)
from secure_fed.dp.clipped_sum import clip_and_noise_sum, clip_rows, clipped_sum_event
from secure_fed.dp.dpsgd import PatientDPSGD, poisson_sample
from secure_fed.dp.events import Event, Gaussian, PoissonSampledGaussian
from secure_fed.dp.keystream import NOISE_KEY_BYTES, NoiseStream
from secure_fed.dp.ledger import PrivacyLedger
from secure_fed.site.coarsen import size_bucket

TRAIN, VALIDATION = "train", "validation"


def steps_per_epoch(sampling_rate: float) -> int:
    """Poisson sampling at rate q takes 1/q steps to see each patient once in expectation."""
    return max(1, math.ceil(1.0 / sampling_rate))


class DPGradients:
    """Patient-level DP-SGD for `train_copies`: Poisson-sampled patients, joint clipping over copies."""

    def __init__(
        self,
        sampling_rate: float,
        clip: float,
        sigma: float,
        n_patients: int,
        steps: int,
        noise: NoiseStream,
        max_patients_per_pass: int | None = None,
    ) -> None:
        self.q, self.clip, self.sigma = sampling_rate, clip, sigma
        self.n_patients, self.steps, self.noise = n_patients, steps, noise
        self.max_patients_per_pass = max_patients_per_pass
        self.engine: PatientDPSGD | None = None
        self.clipped: list[float] = []

    def steps_per_epoch(self, n_patients: int) -> int:
        return steps_per_epoch(self.q)

    def sample(self, n_patients: int) -> torch.Tensor:
        return poisson_sample(n_patients, self.q, self.noise)

    def wrap(self, copies: list[torch.nn.Module]) -> list[torch.nn.Module]:
        self.engine = PatientDPSGD(copies, self.clip, self.sigma, self.q * self.n_patients, self.noise)
        return self.engine.forward_modules

    def backward(
        self,
        copies: list[torch.nn.Module],
        losses: list[torch.Tensor],
        patient_index: list[torch.Tensor],
        last_pass: bool = True,
    ) -> None:
        assert self.engine is not None
        live = [loss.sum() for loss in losses if loss.numel()]
        if live:
            sum(live).backward()
        index = [i if i.numel() else None for i in patient_index]
        if not last_pass:
            self.engine.accumulate(index, self.n_patients)
            return
        stats = self.engine.privatize(index, self.n_patients)
        self.clipped.append(stats.clipped_fraction)


@dataclass
class SitePrivacy:
    site: str
    sampling_rate: float
    clip: float
    sigma: float
    steps: int
    histogram_sigma: float
    alpha_clip: float
    alpha_sigma: float
    delta: dict[str, float]
    budget: float
    n_patients: dict[str, int]
    noise_key: bytes
    ledger: PrivacyLedger = field(default_factory=PrivacyLedger)
    accountant: str = "rdp"
    releases_alpha: bool = True  # the validation population pays only where α scalars are released
    last_round: int = 0
    trail: Any = None  # SiteTrail: the site's signed audit log
    refused_population: str | None = None
    refused_accountant: str | None = None  # whose ε the refusal's would-be ε is: "rdp" or "prv"
    ledger_path: Path | None = None
    # OS randomness mixed into every release key; injectable only so tests can pin values
    entropy: Callable[[int], bytes] = os.urandom
    # dp.noise = "distributed": the run's DistributedPlan (set once the model's size is known); a
    # round is then one step whose noise the sites add between them
    distributed: Any = None
    # memory only: a step's sample runs in forward/backward passes of at most this many patients
    max_patients_per_pass: int | None = None
    # dp.noise_free_reference: σ = 0 everywhere, nothing charged or logged, ε = ∞ (not private)
    noise_free: bool = False
    # dp.noise = "distributed" with he.enabled: the α scalars' noise is shared among the participants
    # of their CKKS sum (`alpha_share`), sized once the participants are verified; else (HE off, or
    # site mode) each site's α release carries the whole σ_α·C_α itself
    alpha_shared: bool = False
    colluders: int = 0  # c: sites that may collude with the server and take their shares out
    _streams: dict[tuple[str, int], NoiseStream] = field(default_factory=dict, init=False, repr=False)
    # distributed DP: the seeds of the removable noise layers of each round's share, from its
    # encoding until the runtime takes them (`take_layers`) to keep with the release
    _layers: dict[int, list[bytes]] = field(default_factory=dict, init=False, repr=False)

    @classmethod
    def plan(
        cls,
        cfg: RunConfig,
        site: str,
        n_train: int,
        n_val: int,
        noise_key: bytes | None = None,
        passes: int = 1,
        alpha: bool = True,
    ) -> SitePrivacy:
        """`passes`: local stages per round, each of `train.local_epochs` epochs of DP-SGD (FM2 has
        two). `alpha`: whether the method releases α scalars from the validation patients."""
        dp = cfg.dp
        delta = {}
        distributed = dp.noise == "distributed"
        if not distributed:
            from secure_fed.site.coarsen import check_private_weight

            check_private_weight(cfg, site)  # before anything is released, not at round 1's sum
        for pop, n in ((TRAIN, n_train), (VALIDATION, max(n_val, 1))):
            d = dp.delta if dp.delta is not None else default_delta(n)
            if distributed and pop == TRAIN:
                # one δ for the union of every site's patients, the same at each site and the server
                from secure_fed.dp.distributed.run import delta as union_delta

                d = union_delta(cfg)
            check_delta(d, n)
            delta[pop] = d
        steps = passes * cfg.train.local_epochs * steps_per_epoch(dp.sample_rate)
        target = dp.target_epsilon
        if dp.noise_free_reference:
            # the recipe's sampling, steps and clipping with no noise: no σ to calibrate
            sigma = hist_sigma = 0.0
        elif distributed:
            assert target is not None  # the config refuses distributed mode without a target
            # one DP step a round; σ is set from the plan (the released sum's noise over C)
            steps, sigma = 1, float("nan")
            from secure_fed.dp.distributed.run import histogram_sigma

            hist_sigma = histogram_sigma(cfg)  # the plan composes it with the rounds
        elif dp.noise_multiplier is not None:
            sigma = dp.noise_multiplier
            hist_sigma = calibrate_gaussian(dp.gmm_fraction * target, delta[TRAIN]) if target else sigma
        else:
            assert target is not None
            split = split_budget(
                target,
                delta[TRAIN],
                sampling_rate=dp.sample_rate,
                rounds=cfg.fed.rounds,
                steps_per_round=steps,
                gmm_fraction=dp.gmm_fraction,
                accountant=dp.accountant,
            )
            sigma = split.dpsgd_noise_multiplier
            hist_sigma = split.gmm_noise_multiplier or sigma
        alpha_sigma = (
            0.0
            if dp.noise_free_reference
            else dp.alpha_noise_multiplier
            or calibrate_gaussian_for(target or 1.0, delta[VALIDATION], cfg.fed.rounds, dp.accountant)
        )
        if noise_key is None:
            raise ValueError("DP noise needs the site's secret noise key")
        if len(noise_key) != NOISE_KEY_BYTES:
            raise ValueError(f"the site's noise key must be {NOISE_KEY_BYTES} bytes, got {len(noise_key)}")
        key = noise_key
        return cls(
            site=site,
            sampling_rate=dp.sample_rate,
            clip=dp.max_grad_norm,
            sigma=sigma,
            steps=steps,
            histogram_sigma=hist_sigma,
            alpha_clip=dp.alpha_clip,
            alpha_sigma=alpha_sigma,
            delta=delta,
            budget=dp.budget_epsilon or target or float("inf"),
            n_patients={TRAIN: n_train, VALIDATION: n_val},
            noise_key=key,
            accountant=dp.accountant,
            releases_alpha=alpha,
            max_patients_per_pass=dp.max_patients_per_pass,
            noise_free=dp.noise_free_reference,
            # only a sum the server cannot see into may carry shares: in the clear (HE off) every
            # site's scalars are seen alone, so each carries the whole noise
            alpha_shared=distributed and cfg.he.enabled and not dp.noise_free_reference,
            colluders=dp.colluders,
        )

    # -- releases ---------------------------------------------------------------------------
    def keep_layers(self, round_id: int, seeds: list[bytes]) -> None:
        """The removable layers' seeds of round `round_id`'s share (dp.distributed.DistributedSum.encode)."""
        self._layers[round_id] = list(seeds)

    def take_layers(self, round_id: int) -> list[bytes]:
        """The seeds kept for `round_id`, once; none (nothing the site could ever remove: its whole
        share stays in the sum) where the share was encoded without layers."""
        return self._layers.pop(round_id, [])

    def noise_stream(self, purpose: str, round_id: int) -> NoiseStream:
        """A new keystream for one release (fresh key every call: a retry draws new noise, so
        whatever must not be released twice has to be kept by the caller)."""
        stream = NoiseStream.for_release(self.noise_key, purpose, round_id, self.entropy)
        self._streams[(purpose, round_id)] = stream
        return stream

    def _log(self, round_id: int, population: str, mechanism: str, event: Event) -> None:
        if self.ledger_path is not None:
            tmp = self.ledger_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.ledger.to_json()))
            tmp.replace(self.ledger_path)
        if self.trail is None:
            return
        eps = self.ledger.epsilon(self.site, population, delta=self.delta[population])
        extra: dict[str, Any] = {"population_bucket": size_bucket(self.n_patients[population])}
        if mechanism == "dp_sgd":
            extra.update(clip_norm=self.clip, steps=self.steps)
        if mechanism == "dp_sgd" and self.distributed is not None:
            plan = self.distributed
            extra.update(
                noise="distributed",
                honest_min=plan.honest_min,
                colluders=plan.colluders,
                plan=plan.to_json(),
            )
        elif mechanism == "alpha_scalars":
            extra.update(clip_norm=self.alpha_clip)
            if self.alpha_shared:
                # the same event (σ_α over the whole sum); what carries it is m − c honest shares
                extra.update(noise="shares", colluders=self.colluders)
        budget = self.budget if math.isfinite(self.budget) else None  # JSON has no infinity
        self.trail.privacy(round_id, population, mechanism, event, self.delta[population], eps, budget, extra)

    def load_ledger(self, path: Path) -> None:
        """Resume: the ledger on disk already holds every release made before a crash."""
        self.ledger_path = path
        if path.exists():
            self.ledger = PrivacyLedger.from_json(json.loads(path.read_text()))

    def already_released(self, round_id: int) -> bool:
        return (
            round_id in self.ledger.rounds(self.site, TRAIN)
            if TRAIN in self.ledger.populations(self.site)
            else False
        )

    def record_gmm(self, event: Gaussian) -> None:
        """Charge the GMM histogram once. After a restart the site must have refitted from the noisy
        histogram it kept (its stream then drew nothing); a fresh draw for a histogram already
        charged would be a second, uncharged release, and is refused."""
        charged = 0 in (
            self.ledger.rounds(self.site, TRAIN) if TRAIN in self.ledger.populations(self.site) else []
        )
        stream = self._streams.get(("gmm_histogram", 0))
        redrawn = stream is not None and stream.bytes_drawn > 0
        if charged and redrawn:
            raise RuntimeError(
                f"site {self.site}: the GMM histogram was released and charged before a restart, but "
                "its noisy histogram was not reused, so new noise was drawn: a second release the "
                "ledger cannot charge. Keep it with fit_gmm(..., release_path=<site folder>/"
                "gmm-histogram.json), or start a new run folder."
            )
        if charged or self.noise_free:
            # refitted from the kept histogram (the same release, charged once), or un-noised: a
            # finite ε of an un-noised release would be false, so none is logged
            return
        self.ledger.record(self.site, TRAIN, 0, "gmm_histogram", event)
        self._log(0, TRAIN, "gmm_histogram", event)

    def set_distributed(self, plan: Any) -> None:
        """The run's distributed plan: each round charges its event; σ reads as the released
        sum's noise std over C (what site mode's σ means for its sum)."""
        self.distributed = plan
        self.sigma = float(plan.noise_std / self.clip)

    def round_events(self) -> dict[str, list[tuple[str, Event]]]:
        events: dict[str, list[tuple[str, Event]]] = {
            TRAIN: [
                # DP-SGD still (one step a round), its noise the Skellam sum the sites' shares add up to
                ("dp_sgd", self.distributed.event(self.sampling_rate, 1))
                if self.distributed is not None
                else ("dp_sgd", PoissonSampledGaussian(self.sampling_rate, self.sigma, self.steps))
            ]
        }
        if self.releases_alpha:
            # the same event either way: σ_α·C_α on the sum, the site's own release or carried by
            # the m − c honest shares of its CKKS sum (alpha_shared)
            events[VALIDATION] = [("alpha_scalars", clipped_sum_event(self.alpha_sigma))]
        return events

    def admit_round(self, round_id: int) -> Admission:
        """Admit both populations' releases of this round, or neither."""
        if self.noise_free:
            # no budget can hold an un-noised release, and no ε is logged that could read as one
            self.last_round = round_id
            return Admission(True, math.inf, "noise-free reference: un-noised releases, ε = ∞")
        guard = BudgetGuard(self.ledger, self.budget, accountant=self.accountant)
        planned = self.round_events()
        for pop, events in planned.items():
            eps = self.ledger.projected_epsilon(self.site, pop, [e for _, e in events], delta=self.delta[pop])
            value, used = guard.accountant.pick(eps)
            if value is not None and value > self.budget:
                self.refused_population = pop
                self.refused_accountant = used.name
                return Admission(
                    False,
                    float(value),
                    f"round {round_id} would bring {pop} patients to ε = {value:.3f} "
                    f"(δ = {self.delta[pop]:.1e}) above this site's budget {self.budget:g}",
                )
        worst = 0.0
        for pop, events in planned.items():
            admission = guard.admit(self.site, pop, events, self.delta[pop], round=round_id)
            if not admission.ok:  # cannot happen after the projection above; kept as a hard stop
                return admission
            worst = max(worst, admission.would_be_epsilon)
            for mechanism, event in events:
                self._log(round_id, pop, mechanism, event)
        self.last_round = round_id
        return Admission(True, worst, "")

    def gradients(self, round_id: int) -> DPGradients:
        return DPGradients(
            self.sampling_rate,
            self.clip,
            self.sigma,
            self.n_patients[TRAIN],
            self.steps,
            self.noise_stream("dpsgd", round_id),
            self.max_patients_per_pass,
        )

    def release_alpha_scalars(self, per_patient: np.ndarray, round_id: int) -> np.ndarray:
        """The site's own Gaussian release: the whole σ_α·C_α (site mode, or a sum in the clear)."""
        if self.alpha_shared:
            raise RuntimeError("the α scalars' noise is shared in their CKKS sum: use alpha_share")
        return clip_and_noise_sum(
            per_patient, self.alpha_clip, self.alpha_sigma, self.noise_stream("alpha", round_id)
        )

    def clipped_alpha_sum(self, per_patient: np.ndarray) -> np.ndarray:
        """Σ_p clip(v_p), un-noised: kept in the site's memory until its share is drawn, never sent."""
        return clip_rows(per_patient, self.alpha_clip).sum(axis=0)

    def alpha_share_std(self, participants: int) -> float:
        """σ_α·C_α/√(m − c): the shares of any m − c honest participants of m carry σ_α·C_α, the
        noise `clipped_sum_event(σ_α)` charges. Refused (ValueError) where m ≤ c: no honest share."""
        m, c = participants, self.colluders
        if isinstance(m, bool) or not isinstance(m, int) or m <= c:
            raise ValueError(
                f"an α sum over {m!r} participants with dp.colluders = {c} leaves no honest share to carry "
                "the noise; this site sends no share"
            )
        return self.alpha_sigma * self.alpha_clip / math.sqrt(m - c)

    def alpha_share(self, clipped_sum: np.ndarray, participants: int, noise: NoiseStream) -> np.ndarray:
        """The clipped sum plus this site's share of the α noise for a sum over `participants`."""
        std = self.alpha_share_std(participants)
        clipped_sum = np.asarray(clipped_sum, dtype=np.float64)
        return clipped_sum + noise.normal(0.0, std, size=clipped_sum.shape)

    # -- reporting --------------------------------------------------------------------------
    def epsilon(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for pop in (TRAIN, VALIDATION):
            if self.ledger.events(self.site, pop) if pop in self.ledger.populations(self.site) else []:
                out[pop] = self.ledger.epsilon(self.site, pop, delta=self.delta[pop])
        return out

    def after_round_summary(self) -> dict[str, Any]:
        if self.noise_free:
            # no epsilon_* keys: the server then records no ε for this site, rather than a 0
            return {"noise_free_reference": True, "noise_multiplier": 0.0}
        eps = self.epsilon()
        rdp = {pop: v["rdp"] for pop, v in eps.items() if v.get("rdp") is not None}
        prv = [v.get("prv") for v in eps.values()]
        return {
            "epsilon_rdp": max(rdp.values(), default=0.0),
            # one accountant over every population that released: a PRV figure for one population
            # (the validation patients' α scalars) is not the site's PRV ε while another (the
            # Skellam-noised training step) has none
            "epsilon_prv": max(prv) if prv and None not in prv else float("nan"),  # type: ignore[type-var]
            # whose ε the headline is: the population with the largest RDP ε
            "epsilon_population": max(rdp, key=lambda pop: rdp[pop]) if rdp else TRAIN,
            "delta": max(self.delta.values()),
            "noise_multiplier": self.sigma,
        }
