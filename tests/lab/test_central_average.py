"""train.average for the pooled `central`: the released model is the average of its optimiser steps'
iterates (post-processing), and the private central's ledger charges exactly what it charges
without averaging."""

from __future__ import annotations

import numpy as np
import torch

from secure_fed.lab.centralised import pooled_splits, train_averaged, train_private_central
from secure_fed.model.setup import build_report_model
from secure_fed.model.vectors import flatten
from secure_fed.site.training import LocalTrainSettings, train_copies


def test_central_releases_the_mean_of_its_last_iterates(make_config, one_torch_thread) -> None:
    cfg = make_config(model__pretrain_steps=0, fed__rounds=1, train__local_epochs=2)
    pooled, _, _ = pooled_splits(cfg)
    settings = LocalTrainSettings(lr=cfg.train.lr, epochs=2, batch_patients=cfg.train.batch_size)
    model = build_report_model(cfg)
    iterates: list[np.ndarray] = []
    plain = train_copies(
        model, model.trainable_state(), [pooled], settings, seed=cfg.seed,
        after_step=lambda step, states: iterates.append(flatten(states[0]).numpy()),
    )  # fmt: skip
    assert len(iterates) == plain.steps >= 4
    np.testing.assert_array_equal(iterates[-1], flatten(plain.states[0]).numpy())
    tail = cfg.model_copy(
        update={"train": cfg.train.model_copy(update={"average": "tail", "tail_fraction": 0.5})}
    )
    state, steps = train_averaged(tail, build_report_model(tail), [pooled], settings)
    last = iterates[len(iterates) - -(-len(iterates) // 2) :]  # the last ⌈half⌉ of the steps
    assert steps == plain.steps
    np.testing.assert_allclose(flatten(state).numpy(), np.mean(last, axis=0), atol=1e-6)
    none, _ = train_averaged(cfg, build_report_model(cfg), [pooled], settings)
    assert all(torch.equal(none[k], plain.states[0][k]) for k in none)  # the default: the last iterate


def test_averaging_private_central_charges_nothing_more(make_config, one_torch_thread) -> None:
    private = {"model__pretrain_steps": 0, "fed__rounds": 1, "train__local_epochs": 1,
               "dp__enabled": True, "dp__target_epsilon": 8.0, "dp__sample_rate": 0.5}  # fmt: skip
    plain = train_private_central(
        make_config("a", **private), build_report_model(make_config("a", **private))
    )
    averaged_cfg = make_config("b", **private, train__average="ema", train__ema_decay=0.5)
    averaged = train_private_central(averaged_cfg, build_report_model(averaged_cfg))
    assert averaged.privacy["epsilon"] == plain.privacy["epsilon"]
    for key in ("noise_multiplier", "steps", "delta", "sample_rate"):
        assert averaged.privacy[key] == plain.privacy[key], key
