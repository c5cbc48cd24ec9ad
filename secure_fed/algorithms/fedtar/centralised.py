"""Centralised training on the pooled data of every site: the non-federated reference, through the
same local-training function the federated sites use."""

from __future__ import annotations

import numpy as np
import torch

from secure_fed.algorithms.fedtar.profile import fit_gmm
from secure_fed.clients.evaluation import evaluate_split, free_text_labeler
from secure_fed.clients.site import attach_profiles, load_site, patient_profiles
from secure_fed.clients.training import LocalTrainSettings, train_copies
from secure_fed.config import RunConfig
from secure_fed.data.batching import Examples
from secure_fed.data.sites import site_names
from secure_fed.data.tokenizer import load_tokenizer
from secure_fed.model.report_model import ReportModel
from secure_fed.model.setup import build_report_model


def _concat(parts: list[Examples]) -> Examples:
    offset, slots = 0, []
    for p in parts:
        slots.append(p.patient_slot + offset)
        offset += int(p.patient_slot.max()) + 1 if len(p) else 0
    return Examples(
        images=torch.cat([p.images for p in parts]),
        input_ids=torch.cat([p.input_ids for p in parts]),
        raw_profiles=np.concatenate([p.raw_profiles for p in parts]),
        patient_slot=torch.cat(slots),
        visit_index=torch.cat([p.visit_index for p in parts]),
        patient_ids=[i for p in parts for i in p.patient_ids],
        reports=[r for p in parts for r in p.reports],
        labels=[lab for p in parts for lab in p.labels],
        profiles=torch.cat([p.profiles for p in parts])
        if all(p.profiles is not None for p in parts)
        else None,
    )


def pooled_splits(cfg: RunConfig) -> tuple[Examples, Examples, Examples]:
    train, val, test = [], [], []
    for site in site_names(cfg):
        data = load_site(cfg, site)
        gmm, _ = fit_gmm(
            patient_profiles(data.train), cfg.model.gmm_components, cfg.model.gmm_reg_covar, cfg.seed, None
        )
        attach_profiles(data, gmm)
        train.append(data.train)
        val.append(data.val)
        test.append(data.test)
    return _concat(train), _concat(val), _concat(test)


def train_centralised(
    cfg: RunConfig, epochs: int, model: ReportModel | None = None
) -> tuple[ReportModel, dict]:
    """Returns the trained model and its test metrics (epochs = 0 scores the untrained adapters)."""
    model = model or build_report_model(cfg)
    train, _, test = pooled_splits(cfg)
    if epochs > 0:
        settings = LocalTrainSettings(lr=cfg.train.lr, epochs=epochs, batch_patients=cfg.train.batch_size)
        result = train_copies(model, model.trainable_state(), [train], settings, seed=cfg.seed)
        model.load_trainable_state(result.states[0])
    tokenizer = load_tokenizer(cfg.model.tokenizer_path, cfg.data.tokenizer)
    return model, evaluate_split(
        model, test, tokenizer.decode, cfg.data.max_report_tokens + 1, free_text_labeler(cfg)
    )
