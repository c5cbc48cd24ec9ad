"""What a site runs for FM2 and every other method registered for imaging data (FedAvg, FedProx,
FedRep, FedBN): the model, which of its parameters the federation shares, one round of local
training, the final scoring. A baseline's additions (a proximal term, the parameters it keeps
local, stages trained in turn) come from its site hook (`secure_fed.registry`).

The site runtime (`secure_fed.site.runtime`) keeps everything that makes a site safe — the
guard, the budget, the released values, the audit trail — and asks a learner only for an upload
and for scores. What a learner uploads is the shared parameters' change, weighted, flattened:
`shared_names` is the one place that decides what may leave a site; the rest (FM2's class-wise
MoE, FedRep's head, FedBN's normalisation layers) never appears in any message.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from secure_fed import registry
from secure_fed.algorithms.fm2.data import CAPTION_BUCKETS, ImagingSite, load_imaging_site
from secure_fed.algorithms.fm2.model import FM2Model, Observer, dmoe_upload, expert_counts, observer_top_k
from secure_fed.algorithms.fm2.site import (
    StageResult,
    StepSettings,
    add_pull,
    run_steps,
    train_stage1,
    train_stage2,
    training_only,
)
from secure_fed.config import RunConfig
from secure_fed.data.multimodal import CLASSES, MODALITIES
from secure_fed.dp.private_files import atomic_write_bytes
from secure_fed.site.learner import LocalUpdate, SiteStart, private_weight
from secure_fed.site.private import SitePrivacy
from secure_fed.site.training import PatientGradients


class ImageClassifier(nn.Module):
    """The baselines' model: FM2's Observer with one linear head."""

    def __init__(self, classes: int, dim: int) -> None:
        super().__init__()
        self.observer = Observer(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.observer(x))


def build_imaging_model(cfg: RunConfig) -> nn.Module:
    """The same initial weights at every site and the server: seeded from the run's public seed."""
    torch.manual_seed(cfg.seed)
    f = cfg.fm2
    if cfg.fed.method == "fm2":
        return FM2Model(
            len(CLASSES),
            len(MODALITIES),
            dim=f.dim,
            hidden=f.hidden,
            class_experts=f.class_experts,
            gamma_d=f.gamma_d,
            gamma_c=f.gamma_c,
            caption_vocab=CAPTION_BUCKETS if f.cel_weight > 0 else 0,
        )
    return ImageClassifier(len(CLASSES), f.dim)


def shared_names(model: nn.Module, method: str) -> list[str]:
    """The parameters a site uploads (their change, through the secure sum), in model order."""
    names = [n for n, _ in model.named_parameters()]
    if isinstance(model, FM2Model):  # the model itself says what of it may be shared
        return [n for n in names if n in model.shared_state()]
    return registry.method(method).site().shared(model, names)  # FedRep's body, FedBN's all but norms


def initial_imaging_state(cfg: RunConfig) -> np.ndarray:
    model = build_imaging_model(cfg)
    params = dict(model.named_parameters())
    shared = [params[n] for n in shared_names(model, cfg.fed.method)]
    return parameters_to_vector(shared).detach().double().numpy()


@dataclass
class ImagingLearner:
    cfg: RunConfig
    data: ImagingSite
    model: nn.Module
    names: list[str]
    local_path: Path | None = None  # the site's private copy of what it never shares

    @classmethod
    def create(cls, cfg: RunConfig, site: str, folder: Path | None = None) -> ImagingLearner:
        model = build_imaging_model(cfg)
        data = load_imaging_site(cfg, site)
        missing = data.train.missing_patient_ids
        if cfg.dp.enabled and missing:
            # DP's unit is the patient: without ids, several images of one patient would each be a
            # unit of their own and the stated ε would be per image
            raise ValueError(
                f"data.imaging: {missing} of {site}'s training images have no patient_id; DP's unit "
                "is the patient, so give every record its patient_id (or turn dp.enabled off)"
            )
        learner = cls(cfg, data, model, shared_names(model, cfg.fed.method))
        if folder is not None:
            learner.local_path = folder / "local-parameters.pt"
            if learner.local_path.exists():  # a restarted site keeps its personal layers
                state = torch.load(learner.local_path, weights_only=True)
                model.load_state_dict(state, strict=False)
        return learner

    @property
    def n_train(self) -> int:
        """Training patients: the privacy unit's population (DP's n, δ and sampling)."""
        return self.data.train.n_patients

    @property
    def n_test(self) -> int:
        return len(self.data.test)

    n_val = 0  # no validation population: nothing is released about one

    def passes(self, method: str) -> int:
        """Local stages per round, each of `train.local_epochs` epochs: DP-SGD steps = passes ×
        epochs × steps per epoch. FM2 trains the Observer, then the MoEs; a hook's stages (FedRep:
        the head, then the body) one pass each."""
        if isinstance(self.model, FM2Model):
            return 2
        return len(registry.method(method).site().stages(self.model) or [self.model])

    def releases_alpha(self, method: str) -> bool:
        return False

    def start(self, setup: SiteStart) -> None:
        pass  # model and data are ready at create; no release of its own before training

    def distributed_dim(self, method: str) -> int:
        raise NotImplementedError("dp.noise = 'distributed' runs only FedAvg and FedTAR on report data")

    def distributed_options(self, method: str, options: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError("dp.noise = 'distributed' runs only FedAvg and FedTAR on report data")

    def distributed_update(
        self,
        round_id: int,
        method: str,
        global_vec: np.ndarray,
        privacy: SitePrivacy,
        options: dict[str, Any] | None = None,
    ) -> tuple[np.ndarray, int, float]:
        raise NotImplementedError("dp.noise = 'distributed' runs only FedAvg and FedTAR on report data")

    def hypergradients(self, final: np.ndarray, directions: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError("the imaging methods release no α scalars")

    def memory(self) -> dict[str, np.ndarray]:
        return {}  # local parameters are kept in the site's private folder instead

    def restore(self, memory: dict[str, np.ndarray]) -> None:
        pass

    def dim(self) -> int:
        params = dict(self.model.named_parameters())
        return sum(params[n].numel() for n in self.names)

    def load_global(self, vec: np.ndarray) -> None:
        params = dict(self.model.named_parameters())
        shared = [params[n] for n in self.names]
        with torch.no_grad():
            vector_to_parameters(torch.as_tensor(vec).to(shared[0].dtype), shared)

    def local_update(
        self,
        round_id: int,
        method: str,
        global_vec: np.ndarray,
        gradients: Callable[[], PatientGradients] | None,
        options: dict[str, Any] | None = None,
    ) -> LocalUpdate:
        """One round at this site from the global shared parameters; `gradients` makes each stage's
        gradient rule (DP-SGD), None = plain minibatches."""
        cfg, train = self.cfg, self.data.train
        self.load_global(global_vec)
        start = {n: p.detach().clone() for n, p in self.model.named_parameters()}
        settings = StepSettings(
            cfg.fm2.lr, cfg.train.local_epochs, cfg.train.batch_size, cfg.seed * 7919 + round_id
        )
        grads: Callable[[], PatientGradients | None] = gradients or (lambda: None)
        # under DP a step samples patients and takes all their images (clipped jointly)
        patients = train.patient if gradients is not None else None
        hook = registry.method(method).site()
        stages = None if isinstance(self.model, FM2Model) else hook.stages(self.model)
        if isinstance(self.model, FM2Model):
            result = self._fm2_round(settings, start, grads, patients)
        elif stages is not None:
            result = self._staged_round(stages, settings, grads, patients)
        else:
            mu = hook.prox_mu(cfg)
            params = dict(self.model.named_parameters())
            result = run_steps(
                self.model,
                lambda forward, idx: F.cross_entropy(
                    forward(train.x[idx]), train.labels[idx], reduction="none"
                ),
                len(train),
                settings,
                grads(),
                extra_grad=(lambda: add_pull(params, start, mu / 2)) if mu else None,
                patients=patients,
            )
        self._save_local()
        return LocalUpdate(self._upload(start, gradients is not None), result.steps, result.mean_loss)

    def _fm2_round(
        self,
        settings: StepSettings,
        start: dict[str, torch.Tensor],
        grads: Callable[[], PatientGradients | None],
        patients: torch.Tensor | None = None,
    ) -> StageResult:
        model, train, f = self.model, self.data.train, self.cfg.fm2
        assert isinstance(model, FM2Model)
        captions = (train.caption_tokens, train.caption_lengths)
        first = train_stage1(
            model, train.x, train.labels, settings, grads(), captions, f.cel_weight, patients=patients
        )
        x, modality, labels = train.x, train.modality, train.labels
        if f.top_k is not None:  # the Observer picks, per class, the images it is surest of
            with torch.no_grad():
                chosen = torch.tensor(observer_top_k(model.stage1(x), labels, f.top_k), dtype=torch.long)
            x, modality, labels = x[chosen], modality[chosen], labels[chosen]
            # refused under DP (config), so `patients` is None here
            patients = None if patients is None else patients[chosen]
        reference = {n.removeprefix("dmoe."): v for n, v in start.items() if n.startswith("dmoe.")}
        second = train_stage2(
            model, x, modality, labels, reference, f.hma_lambda, settings, grads(), patients=patients
        )
        return StageResult(
            mean_loss=(first.mean_loss + second.mean_loss) / 2, steps=first.steps + second.steps
        )

    def _staged_round(
        self,
        stages: list[nn.Module],
        settings: StepSettings,
        grads: Callable[[], PatientGradients | None],
        patients: torch.Tensor | None = None,
    ) -> StageResult:
        """The hook's parts trained in turn, the rest held (FedRep: the head first, then the body)."""
        model, train = self.model, self.data.train

        def row_loss(forward: nn.Module, idx: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(forward(train.x[idx]), train.labels[idx], reduction="none")

        total_steps, losses = 0, []
        for part in stages:
            with training_only(model, [part]):
                result = run_steps(model, row_loss, len(train), settings, grads(), patients=patients)
            total_steps += result.steps
            losses.append(result.mean_loss)
        return StageResult(mean_loss=float(np.mean(losses)), steps=total_steps)

    def _upload(self, start: dict[str, torch.Tensor], private: bool) -> np.ndarray:
        """Σ-ready: the shared parameters' change times a weight, then the weight. Under DP the
        weight is public (1 per site, or the patient count its operator declares with fed.dp_weights =
        "public_size"; the image count would be a non-private release); FM2's domain
        experts are weighted per expert, by the images of that modality, or under DP by 1 for every
        modality: whether a site holds any image of a modality is not public (one patient's image
        can be its only one), so the weights depend on no patient; an expert a site has no images
        for contributes its DP noise alone."""
        scale = self.cfg.secagg.count_scale  # keeps weighted changes inside the SecAgg+ clip range
        params = dict(self.model.named_parameters())
        delta = {n: params[n].detach().to(torch.float64) - start[n].to(torch.float64) for n in self.names}
        w = private_weight(self.cfg, self.data.name) if private else float(len(self.data.train)) / scale
        pooled = [n for n in self.names if not n.startswith("dmoe.")]
        parts = [torch.cat([delta[n].flatten() for n in pooled]) * w, torch.tensor([w], dtype=torch.float64)]
        model = self.model
        if isinstance(model, FM2Model):
            counts = expert_counts(self.data.train.modality, len(MODALITIES))
            weights = (torch.ones_like(counts, dtype=torch.float64) if private else counts) / scale
            parts.append(
                dmoe_upload(
                    model.dmoe,
                    {n.removeprefix("dmoe."): delta[n] for n in self.names if n.startswith("dmoe.")},
                    weights,
                )
            )
        return torch.cat(parts).numpy()

    def _save_local(self) -> None:
        if self.local_path is None:
            return
        shared = set(self.names)
        local = {n: v for n, v in self.model.state_dict().items() if n not in shared}
        buffer = io.BytesIO()
        torch.save(local, buffer)
        atomic_write_bytes(self.local_path, buffer.getvalue())

    @torch.no_grad()
    def score(self, global_vec: np.ndarray) -> dict[str, float]:
        """Accuracy and macro-F1 on the site's test images: the global shared parameters with this
        site's own local ones (its M_c, its head under FedRep, its norms under FedBN)."""
        self.load_global(global_vec)
        test = self.data.test
        self.model.eval()
        try:
            if isinstance(self.model, FM2Model):
                logits = self.model(test.x, test.modality)
            else:
                logits = self.model(test.x)
        finally:
            self.model.train()
        return classification_scores(test.labels, logits.argmax(-1), len(CLASSES))


def classification_scores(labels: torch.Tensor, predicted: torch.Tensor, classes: int) -> dict[str, float]:
    """Accuracy, and macro-F1 over the classes present in `labels` (an absent class has no F1)."""
    if len(labels) == 0:
        return {"accuracy": float("nan"), "macro-F1": float("nan")}
    f1s = []
    for c in labels.unique().tolist():
        tp = int(((predicted == c) & (labels == c)).sum())
        fp = int(((predicted == c) & (labels != c)).sum())
        fn = int(((predicted != c) & (labels == c)).sum())
        f1s.append(2 * tp / max(2 * tp + fp + fn, 1))
    return {"accuracy": float((predicted == labels).double().mean()), "macro-F1": float(np.mean(f1s))}
