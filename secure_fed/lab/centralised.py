"""Centralised training on the pooled data of every site: the non-federated reference, through the
same local-training function the federated sites use."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from secure_fed.algorithms.fedtar.profile import fit_gmm
from secure_fed.algorithms.fedtar.profile_gmm import PatientGMM
from secure_fed.config import RunConfig
from secure_fed.data.batching import Examples
from secure_fed.data.sites import site_names
from secure_fed.data.tokenizer import load_tokenizer
from secure_fed.dp.calibration import calibrate_gaussian, check_delta, default_delta, split_budget
from secure_fed.dp.events import PoissonSampledGaussian
from secure_fed.dp.keystream import NOISE_KEY_BYTES, NoiseStream
from secure_fed.dp.ledger import PrivacyLedger
from secure_fed.model.report_model import ReportModel
from secure_fed.model.setup import build_report_model, visit_slots
from secure_fed.site.evaluation import evaluate_split, free_text_labeler
from secure_fed.site.private import DPGradients, steps_per_epoch
from secure_fed.site.site import attach_profiles, load_site, patient_profiles
from secure_fed.site.training import LocalTrainSettings, State, train_copies


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


def pooled_splits(
    cfg: RunConfig, fit: Callable[[str, np.ndarray], PatientGMM] | None = None
) -> tuple[Examples, Examples, Examples]:
    """Every site's splits pooled; ``fit(site, train profiles)`` fits a site's GMM (default: the
    non-private fit)."""
    train, val, test = [], [], []
    for site in site_names(cfg):
        data = load_site(cfg, site)
        if fit is None:
            gmm, _ = fit_gmm(
                patient_profiles(data.train),
                cfg.model.gmm_components,
                cfg.model.gmm_reg_covar,
                cfg.seed,
                None,
            )
        else:
            gmm = fit(site, patient_profiles(data.train))
        attach_profiles(data, gmm, visit_slots(cfg))
        train.append(data.train)
        val.append(data.val)
        test.append(data.test)
    return _concat(train), _concat(val), _concat(test)


def train_averaged(
    cfg: RunConfig,
    model: ReportModel,
    groups: list[Examples],
    settings: LocalTrainSettings,
    gradients: DPGradients | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[State, int]:
    """`train_copies` on the pooled patients, the state it releases (the last iterate, or with
    `train.average` the average over its optimiser steps: post-processing of DP-SGD's released
    steps, charged nothing) and the steps taken."""
    from secure_fed.model.vectors import flatten, unflatten
    from secure_fed.server.averaging import IterateAverage

    n_patients = 1 + max((int(g.patient_slot.max()) for g in groups if len(g)), default=-1)
    per_epoch = (gradients.steps_per_epoch(n_patients) if gradients is not None
                 else max(1, -(-n_patients // settings.batch_patients)))  # fmt: skip
    average = IterateAverage.from_config(cfg, max(1, settings.epochs * per_epoch))

    def after_step(step: int, states: list[State]) -> None:
        assert average is not None
        average.update(flatten(states[0]).numpy(), step)

    result = train_copies(
        model, model.trainable_state(), groups, settings, seed=cfg.seed, gradients=gradients,
        progress=progress, after_step=after_step if average is not None else None,
    )  # fmt: skip
    last = result.states[0]
    if average is None:
        return last, result.steps
    released = average.released(flatten(last).numpy())
    return unflatten(torch.from_numpy(released), last), result.steps


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


POOLED = "pooled"  # the ledger's name for the pooled population of every site's train patients


@dataclass
class PrivateCentral:
    """What DP-SGD on the pooled patients trained and what it spent."""

    state: State
    gmms: dict[str, PatientGMM]
    privacy: dict[str, Any]


def train_private_central(
    cfg: RunConfig, model: ReportModel, progress: Callable[[int, int], None] | None = None
) -> PrivateCentral:
    """DP-SGD on the pooled train patients of every site at the run's target ε: the ceiling of
    private training at that ε (no federation, no secure sum: one trusted curator).

    The privacy unit is the patient, as at a site: Poisson sampling at ``dp.sample_rate`` over the
    pooled patients, ``rounds × local_epochs`` epochs of steps, clipping at ``dp.max_grad_norm``.
    With the hyper-LoRA each site's GMM is fitted from its noisy histogram (a patient is in one
    site's histogram: one Gaussian per patient), priced with DP-SGD by the same split as a site's
    plan; without it the profiles reach no layer and no histogram is released. ε is the ledger's
    price of exactly the events that ran, not the target. With ``dp.noise_free_reference`` the same
    sampling, steps and clipping run with no noise: not private, and no ε is reported."""
    dp = cfg.dp
    if not dp.enabled:
        raise ValueError("train_private_central needs dp.enabled")
    key = os.urandom(NOISE_KEY_BYTES)  # a curator's secret: noise no seed can regenerate
    n_train = 0
    for site in site_names(cfg):
        n_train += len({int(s) for s in load_site(cfg, site).train.patient_slot})
    delta = dp.delta if dp.delta is not None else default_delta(n_train)
    check_delta(delta, n_train)
    epochs = cfg.fed.rounds * cfg.train.local_epochs
    steps = epochs * steps_per_epoch(dp.sample_rate)
    histogram = cfg.hyper_lora_on
    noise_free = dp.noise_free_reference
    if noise_free:
        sigma = hist_sigma = 0.0  # the recipe's sampling, steps and clipping, un-noised: ε = ∞
    elif dp.noise_multiplier is not None:
        sigma = dp.noise_multiplier
        hist_sigma = (
            calibrate_gaussian(dp.gmm_fraction * dp.target_epsilon, delta) if dp.target_epsilon else sigma
        )
    else:
        assert dp.target_epsilon is not None
        split = split_budget(
            dp.target_epsilon,
            delta,
            sampling_rate=dp.sample_rate,
            rounds=1,
            steps_per_round=steps,
            gmm_fraction=dp.gmm_fraction if histogram else None,
            accountant=dp.accountant,
        )
        sigma = split.dpsgd_noise_multiplier
        hist_sigma = split.gmm_noise_multiplier or sigma
    ledger = PrivacyLedger()
    gmms: dict[str, PatientGMM] = {}

    def fit(site: str, profiles: np.ndarray) -> PatientGMM:
        if not histogram:
            gmm, _ = fit_gmm(profiles, cfg.model.gmm_components, cfg.model.gmm_reg_covar, cfg.seed, None)
        else:
            stream = NoiseStream.for_release(key, f"gmm_histogram/{site}", 0)
            gmm, event = fit_gmm(
                profiles, cfg.model.gmm_components, cfg.model.gmm_reg_covar, cfg.seed, hist_sigma, stream
            )
            if not noise_free and site == next(iter(site_names(cfg))):  # parallel composition: charged once
                assert event is not None
                ledger.record(POOLED, "train", 0, "gmm_histogram", event)
        gmms[site] = gmm
        return gmm

    train, _, _ = pooled_splits(cfg, fit)
    n_pooled = int(train.patient_slot.max()) + 1 if len(train) else 0
    gradients = DPGradients(
        dp.sample_rate,
        dp.max_grad_norm,
        sigma,
        n_pooled,
        steps,
        NoiseStream.for_release(key, "dpsgd", 1),
        dp.max_patients_per_pass,
    )
    settings = LocalTrainSettings(lr=cfg.train.lr, epochs=epochs, batch_patients=cfg.train.batch_size)
    state, steps = train_averaged(cfg, model, [train], settings, gradients, progress)
    if noise_free:
        # no ε: a number, even infinity, in this field would be read as a privacy level spent
        epsilon: dict[str, Any] | None = None
    else:
        ledger.record(POOLED, "train", 1, "dp_sgd", PoissonSampledGaussian(dp.sample_rate, sigma, steps))
        eps = ledger.epsilon(POOLED, "train", delta=delta)
        epsilon = {POOLED: {"rdp": eps["rdp"], "prv": eps.get("prv")}}
    privacy = {
        "epsilon": epsilon,
        "accountant": dp.accountant,
        "noise_free_reference": noise_free,
        "delta": delta,
        "noise_multiplier": sigma,
        "histogram_noise_multiplier": hist_sigma if histogram else None,
        "sample_rate": dp.sample_rate,
        "expected_batch": dp.sample_rate * n_pooled,
        "steps": steps,
        "clip": dp.max_grad_norm,
        "patients": n_pooled,
        "clipped_fraction": float(np.mean(gradients.clipped)) if gradients.clipped else None,
    }
    return PrivateCentral(state, gmms, privacy)
