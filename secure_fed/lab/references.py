"""The reference points a sweep sets the federated methods against, each scored exactly as a run's
final evaluation (every site's test split, pooled with the weights a site releases): ``base`` (the
pretrained base, adapters untrained), ``local`` (each site alone), ``central`` (the pooled train
splits: non-private, or DP-SGD on the pooled patients at a finite ε) and ``<method>-ft`` (each site
fine-tunes a federated cell's final model)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from secure_fed.config import RunConfig
from secure_fed.lab.cells import (
    BASE,
    CENTRAL,
    LOCAL,
    seed_config,
)
from secure_fed.site.evaluation import METRIC_NAMES

Scores = tuple[dict[str, float], dict[str, dict[str, float]]]


def evaluate_reference(
    cfg: RunConfig, method: str, out: Path, progress: Callable[[int, int], None] | None = None
) -> Scores:
    """``base``, ``local`` or ``central``, scored as a run's final evaluation; also per site.
    `progress` hears ``central``'s optimiser steps and ``local``'s sites as each is trained."""
    from secure_fed.data.sites import site_names
    from secure_fed.lab.centralised import pooled_splits, train_averaged
    from secure_fed.model.setup import build_report_model
    from secure_fed.site.training import LocalTrainSettings, train_copies

    epochs = cfg.fed.rounds * cfg.train.local_epochs  # the passes over its data each site gets in FL
    settings = LocalTrainSettings(lr=cfg.train.lr, epochs=epochs, batch_patients=cfg.train.batch_size)
    model = build_report_model(cfg)
    shared = start = model.trainable_state()
    if method == CENTRAL:
        pooled, _, _ = pooled_splits(cfg)
        shared, _ = train_averaged(cfg, model, [pooled], settings, progress=progress)
    trained = [0]
    sites = len(site_names(cfg))

    def state_for(train: Any) -> Any:
        if method == LOCAL:
            state = train_copies(model, start, [train], settings, seed=cfg.seed).states[0]
            trained[0] += 1
            if progress is not None:
                progress(trained[0], sites)
            return state
        return shared

    return _score_sites(cfg, out, state_for, f"{method} reference: no federated training")


def evaluate_private_central(
    cfg: RunConfig, out: Path, progress: Callable[[int, int], None] | None = None
) -> tuple[dict[str, float], dict[str, Any], dict[str, Any]]:
    """``central`` at a finite ε: DP-SGD on the pooled patients (the ceiling of private training at
    that ε), scored as ``central`` is, each site's test profiles from the GMM the training used.
    `progress` hears its optimiser steps."""
    from secure_fed.lab.centralised import train_private_central
    from secure_fed.model.setup import build_report_model

    trained = train_private_central(cfg, build_report_model(cfg), progress=progress)
    # scoring releases nothing: the sites' runtimes plan no private run (both keys at once: a
    # noise-free reference's switch is refused without dp.enabled)
    off = cfg.dp.model_copy(update={"enabled": False, "noise_free_reference": False})
    plain = cfg.model_copy(deep=True, update={"dp": off})
    test, per_site = _score_sites(
        plain, out, lambda _train: trained.state, "private central reference", gmms=trained.gmms
    )
    return test, per_site, trained.privacy


def evaluate_fine_tuned(cfg: RunConfig, federated: Path, out: Path) -> Scores:
    """Each site fine-tunes the final global model of the ``federated`` cell (``train.fine_tune_epochs``,
    else one round's local epochs, on its own train split, non-private: the result stays at the
    site) and scores it."""
    import torch

    from secure_fed.model.setup import build_report_model
    from secure_fed.model.vectors import unflatten
    from secure_fed.server.checkpoint import load_checkpoint
    from secure_fed.site.training import LocalTrainSettings, train_copies

    if not (federated / "cell.json").exists():
        # a running or interrupted run's checkpoint is a model of some round, not its final one
        raise FileNotFoundError(f"{federated}/cell.json: its federated cell has not finished; run it first")
    loaded = load_checkpoint(federated / "checkpoint")
    if loaded is None:
        raise FileNotFoundError(f"{federated}/checkpoint: no final model to fine-tune; run its cell first")
    epochs = cfg.train.fine_tune_epochs or cfg.train.local_epochs
    settings = LocalTrainSettings(lr=cfg.train.lr, epochs=epochs, batch_patients=cfg.train.batch_size)
    model = build_report_model(cfg)
    # the model the federated cell released (its iterate average with train.average), not its last iterate
    start = unflatten(torch.as_tensor(loaded.released), model.trainable_state())

    def state_for(train: Any) -> Any:
        return train_copies(model, start, [train], settings, seed=cfg.seed).states[0]

    return _score_sites(cfg, out, state_for, "fine-tuned reference: scored at the site")


def _score_sites(
    cfg: RunConfig,
    out: Path,
    state_for: Callable[[Any], Any],
    note: str,
    gmms: dict[str, Any] | None = None,
) -> Scores:
    """Every site scores ``state_for(its train split)`` on its test split, exactly as a run's final
    evaluation; ``gmms``: each site's patient profiles from these GMMs (the ones a model trained
    with), not from the site's own fit."""
    from secure_fed.data.sites import site_names
    from secure_fed.model.setup import visit_slots
    from secure_fed.model.vectors import flatten
    from secure_fed.server.orchestrator import pool_scores
    from secure_fed.site.handler import handle
    from secure_fed.site.runtime import SiteRuntime
    from secure_fed.site.site import attach_profiles

    cfg = cfg.model_copy(deep=True, update={"out": out})
    cfg.audit.enabled = False
    replies: dict[str, dict[str, Any]] = {}
    for site in site_names(cfg):
        runtime = SiteRuntime.create(cfg, site, trains=False)
        # The reference's model was trained (or, for base, deliberately not) outside this runtime's
        # rounds; without this its guard refuses to score ("evaluate_untrained", a deployed site's
        # defence against a server) and every reference cell scored NaN.
        runtime.guard.trained_round(cfg.fed.rounds)
        runtime.guard.save()  # handle() reads the guard from the site's folder
        if gmms is not None:
            attach_profiles(runtime.learner.data, gmms[site], visit_slots(cfg))
        vector = flatten(state_for(runtime.learner.data.train)).numpy()
        replies[site] = handle(runtime, "evaluate", {"global": vector, "stopped_early": note}, {})[0]
    per_site = {s: {k: float(r[k]) for k in METRIC_NAMES if k in r} for s, r in replies.items()}
    return pool_scores(list(replies.values())), per_site


def evaluate_base(base: RunConfig, seeds: Sequence[int], out: Path) -> list[dict[str, Any]]:
    """The pretrained base with untrained adapters, scored exactly as a run's final evaluation."""
    runs = []
    for seed in seeds:
        cfg = seed_config(base, BASE, None, seed)
        test, per_site = evaluate_reference(cfg, BASE, out / f"base-seed{seed}")
        runs.append({"method": BASE, "epsilon": None, "seed": seed, "test": test, "per_site": per_site})
    return runs
