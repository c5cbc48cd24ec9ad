"""FedTAR's site step over the report model, and that of every other method registered for report
data (one pooled copy over all visits: FedAvg, FedProx, SCAFFOLD, FedAdam, DRFA), whose additions
(a proximal term, control variates) come from the method's site hook (`secure_fed.registry`).

FedTAR trains one adapter copy per visit index, fits the site's patient GMM (privately under DP: one
noisy histogram, `profile.py`) for the hyper-LoRA's q_p, and releases α hypergradient scalars of its
validation patients along the server's directions (`hypergrad.py`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from secure_fed import registry
from secure_fed.algorithms.fedtar.hypergrad import per_patient_hypergradients
from secure_fed.algorithms.fedtar.profile import fit_gmm
from secure_fed.algorithms.fedtar.release import OneVectorRelease, check_alpha, release_dim
from secure_fed.config import RunConfig
from secure_fed.data.batching import Examples
from secure_fed.data.tokenizer import load_tokenizer
from secure_fed.dp.histogram import histogram_event
from secure_fed.dp.site_ledger import SiteLedger
from secure_fed.model.report_model import ReportModel
from secure_fed.model.setup import build_report_model, visit_slots
from secure_fed.model.vectors import flatten, unflatten
from secure_fed.site.evaluation import evaluate_split, free_text_labeler
from secure_fed.site.learner import LocalUpdate, SiteStart, private_weight
from secure_fed.site.private import TRAIN, SitePrivacy
from secure_fed.site.runtime import BudgetExhausted
from secure_fed.site.site import SiteData, attach_profiles, load_site, patient_profiles
from secure_fed.site.trail import SiteTrail
from secure_fed.site.training import LocalTrainSettings, PatientGradients, train_copies

if TYPE_CHECKING:
    from secure_fed.site.distributed import ClippedSum

log = logging.getLogger(__name__)

ALPHA_METHODS = {"fedtar", "fedtar-no-gmm"}  # the methods whose server asks for α hypergradients


def visit_groups(method: str, t_max: int) -> list[int] | None:
    """Visit indices of the per-timestep copies; None = one pooled copy over all visits."""
    return None if registry.method(method).pooled else list(range(1, t_max + 1))


def _gmm_release(
    site: str,
    folder: Path,
    run_id: str,
    privacy: SitePrivacy | None,
    lifetime: SiteLedger | None,
    trail: SiteTrail | None,
) -> tuple[Path | None, float | None, bool]:
    """(histogram file, σ, whether to charge) of the GMM's noisy histogram. With a lifetime ledger
    the patients pay for one histogram, ever: a later run refits from the one kept beside the ledger
    (post-processing, whatever σ this run would pick). A new draw is admitted by the lifetime budget
    first, and refused (nothing drawn) when it cannot afford it."""
    if privacy is None:
        return None, None, False
    if lifetime is None:
        return folder / "gmm-histogram.json", privacy.histogram_sigma, True
    path = lifetime.histogram_path
    if path.exists() and lifetime.released_before(run_id, "gmm_histogram"):
        return path, float(json.loads(path.read_text())["sigma"]), False
    if 0 not in privacy.ledger.rounds(site, TRAIN):  # not charged in this run before a restart
        event = histogram_event(privacy.histogram_sigma)
        eps = privacy.ledger.projected_epsilon(site, TRAIN, [event], delta=privacy.delta[TRAIN])
        value = eps.get(privacy.accountant) or eps["rdp"]
        if value is not None and value > privacy.budget:
            reason = (
                f"the GMM histogram would bring {TRAIN} patients to ε = {value:.3f} over all runs "
                f"(ledger {lifetime.path}), above this site's budget {privacy.budget:g}"
            )
            if trail is not None:
                trail.append(
                    "budget_refusal",
                    {"site": site, "population": TRAIN, "epsilon_after": value, "budget": privacy.budget,
                     "reason": reason},
                    0,
                )  # fmt: skip
            raise BudgetExhausted("budget_exhausted", f"site {site}: {reason}")
    return path, privacy.histogram_sigma, True


@dataclass
class ReportLearner:
    """The report model at one site: its split, its GMM profiles, its adapters' local rounds."""

    cfg: RunConfig
    data: SiteData
    model: ReportModel | None = None  # built in `start`, after the GMM (q_p) is fitted
    # each method's site hook, made once here: it may carry state between rounds (SCAFFOLD's control)
    _hooks: dict[str, registry.SiteHook] = field(default_factory=dict, repr=False)
    # distributed DP: the work copy and engine of the site's one step per round, built once
    _clipped_sum: ClippedSum | None = field(default=None, repr=False)

    @classmethod
    def create(cls, cfg: RunConfig, site: str, folder: Path, site_key: bytes | None = None) -> ReportLearner:
        return cls(cfg, load_site(cfg, site, site_key))

    @property
    def n_train(self) -> int:
        return self.data.n_train_patients

    @property
    def n_val(self) -> int:
        return self.data.n_val_patients

    @property
    def n_test(self) -> int:
        return len(self.data.test)

    def passes(self, method: str) -> int:
        return 1

    def releases_alpha(self, method: str) -> bool:
        # only FedTAR's temporal meta-learning releases α scalars: no other method's validation
        # patients are charged for a release that never happens
        return method in ALPHA_METHODS

    def start(self, setup: SiteStart) -> None:
        cfg, privacy = self.cfg, setup.privacy
        histogram, sigma, charge = _gmm_release(
            setup.site, setup.folder, setup.run_id, privacy, setup.lifetime, setup.trail
        )
        gmm, event = fit_gmm(
            patient_profiles(self.data.train),
            cfg.model.gmm_components,
            cfg.model.gmm_reg_covar,
            cfg.seed,
            sigma,
            noise_rng=privacy.noise_stream("gmm_histogram", 0) if privacy else None,
            # the noise cannot be redrawn: a restart (or, with a lifetime ledger, any later run)
            # refits from the histogram released before
            release_path=histogram,
        )
        if privacy is not None and event is not None and charge:
            privacy.record_gmm(event)
        attach_profiles(self.data, gmm, visit_slots(cfg))
        self.model = build_report_model(cfg)

    def _model(self) -> ReportModel:
        assert self.model is not None, "start() builds the model"
        return self.model

    def dim(self) -> int:
        return sum(p.numel() for p in self._model().parameters() if p.requires_grad)

    def local_update(
        self,
        round_id: int,
        method: str,
        global_vec: np.ndarray,
        gradients: Callable[[], PatientGradients] | None,
        options: dict[str, Any],
    ) -> LocalUpdate:
        """The report model's local round (FedTAR's per-visit-index copies, or one pooled copy):
        the upload before the server's factor, the steps taken and the mean training loss."""
        cfg, model = self.cfg, self._model()
        template = model.trainable_state()
        start = unflatten(torch.tensor(global_vec), template)
        groups = self._groups(method)
        hook = self._hook(method)
        settings = LocalTrainSettings(
            lr=cfg.train.lr,
            epochs=cfg.train.local_epochs,
            batch_patients=cfg.train.batch_size,
            prox_mu=hook.prox_mu(cfg),
            grad_correction=hook.correction(template, options),
        )
        private = gradients is not None
        result = train_copies(
            model,
            start,
            groups,
            settings,
            seed=cfg.seed * 7919 + round_id,
            gradients=gradients() if gradients is not None else None,
        )
        start_vec = flatten(start)
        deltas = [flatten(s) - start_vec for s in result.states]
        # DP: weights must be public (post-processing of DP-SGD only): every site once, or the
        # patient count its operator declares public (fed.dp_weights, fed.public_patients)
        scale = cfg.secagg.count_scale  # public: keeps n·Δ and n inside the SecAgg+ clip range
        weights = (
            [private_weight(cfg, self.data.name)] * len(deltas)
            if private
            else [n / scale for n in result.rows]
        )
        parts = [
            torch.cat([w * d, torch.tensor([w], dtype=torch.float64)])
            for w, d in zip(weights, deltas, strict=True)
        ]
        extra = hook.extra_upload(start, result.states[0], result.steps, cfg.train.lr)
        if extra is not None:
            parts.append(weights[0] * extra)
        return LocalUpdate(torch.cat(parts).numpy(), result.steps, result.mean_loss)

    def _groups(self, method: str) -> list[Examples]:
        """The training rows of each adapter copy `method` trains: one per visit index, or all."""
        visits = visit_groups(method, self.cfg.data.max_visits)
        train = self.data.train
        return [train] if visits is None else [train.at_visit(t) for t in visits]

    def _one_vector(self, method: str) -> bool:
        """FedTAR's one-vector release (`train.fedtar_release`; `release.py`), not its T copies."""
        return visit_groups(method, self.cfg.data.max_visits) is not None and (
            self.cfg.train.fedtar_release == "one-vector"
        )

    def distributed_dim(self, method: str) -> int:
        if self._one_vector(method):
            return release_dim(self.cfg, method, self.dim())
        copies = visit_groups(method, self.cfg.data.max_visits)
        return self.dim() * (1 if copies is None else len(copies))

    def distributed_options(self, method: str, options: dict[str, Any]) -> dict[str, Any]:
        """The one-vector release's public input, the round's α, from the training instruction,
        checked before anything is charged (ValueError: a malformed instruction, refused)."""
        if not self._one_vector(method):
            return {}
        if "alpha" not in options:
            raise ValueError("a one-vector FedTAR round needs the round's α in the instruction")
        return {"alpha": check_alpha(options["alpha"], self.cfg.data.max_visits, self.cfg.train.alpha_floor)}

    def distributed_update(
        self,
        round_id: int,
        method: str,
        global_vec: np.ndarray,
        privacy: SitePrivacy,
        options: dict[str, Any] | None = None,
    ) -> tuple[np.ndarray, int, float]:
        """One distributed-DP step: this site's clipped gradient sum over its Poisson-sampled
        patients, encoded with its noise share into the ring (its keystream draws the sample, the
        rounding and the noise); the server decodes only the sum over the survivors. FedTAR's step
        is one over all its per-visit-index copies at once: a patient's gradients in every copy are
        clipped together, so the step's sensitivity is C whatever visits the patient has. With
        `train.fedtar_release = "one-vector"` a patient releases one vector made of those gradients
        and the round's α (`release.py`), clipped to C as one vector: the same sensitivity."""
        from secure_fed.dp.distributed import DistributedSum, round_seed
        from secure_fed.site.distributed import ClippedSum, clipped_gradient_sum

        assert privacy.distributed is not None
        model = self._model()
        start = unflatten(torch.tensor(global_vec), model.trainable_state())
        groups = self._groups(method)
        stream = privacy.noise_stream("distributed_dp", round_id)
        if self._clipped_sum is None or not self._clipped_sum.serves(model, privacy.clip, len(groups)):
            self._clipped_sum = ClippedSum(model, privacy.clip, copies=len(groups))
        release = None
        if self._one_vector(method):
            # `options` as `distributed_options` checked it: a round without α is not run
            alpha = (options or {})["alpha"]
            release = OneVectorRelease.for_round(self.cfg, method, round_id, alpha, self.dim())
        clipped, sampled = clipped_gradient_sum(
            model, start, groups, privacy.clip, privacy.sampling_rate,
            privacy.n_patients[TRAIN], stream, work=self._clipped_sum,
            max_patients_per_pass=privacy.max_patients_per_pass, release=release,
        )  # fmt: skip
        # the sample above, then the share's rounding and Skellam noise, all from this one keystream;
        # the noise in layers, those the confirmed survivors do not need removed at the unmask
        share = DistributedSum(privacy.distributed, round_seed(self.cfg, round_id)).encode(clipped, stream)
        privacy.keep_layers(round_id, share.layer_seeds)
        log.debug("site %s round %d: %d patients sampled", self.data.name, round_id, sampled)
        return share.ring, 1, float("nan")

    def hypergradients(self, final: np.ndarray, directions: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        if len(self.data.val) == 0:
            return torch.zeros(0, directions.shape[0], dtype=torch.float64), torch.zeros(0)
        return per_patient_hypergradients(
            self._model(), torch.tensor(final), torch.tensor(directions), self.data.val
        )

    def score(self, global_vec: np.ndarray) -> dict[str, float]:
        model = self._model()
        model.load_trainable_state(unflatten(torch.as_tensor(global_vec), model.trainable_state()))
        tokenizer = load_tokenizer(self.cfg.model.tokenizer_path, self.cfg.data.tokenizer)
        return evaluate_split(
            model,
            self.data.test,
            tokenizer.decode,
            self.cfg.data.max_report_tokens + 1,
            free_text_labeler(self.cfg),
        )

    def _hook(self, method: str) -> registry.SiteHook:
        if method not in self._hooks:
            self._hooks[method] = registry.method(method).site()
        return self._hooks[method]

    def memory(self) -> dict[str, np.ndarray]:
        kept: dict[str, np.ndarray] = {}
        for hook in self._hooks.values():
            kept |= hook.memory()
        return kept

    def restore(self, memory: dict[str, np.ndarray]) -> None:
        """A Flower node's saved state, for the run's method's hook (the site's guard holds a run
        to one method); a hook picks out its own keys."""
        self._hook(self.cfg.fed.method).restore(memory)
