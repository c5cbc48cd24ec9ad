"""Privacy–utility sweeps: methods × seeds × ε on the same data, summarised as mean ± std.

Seeds are paired: seed s fixes the cohort (``data.synth.seed``), its split and the run's seed for
every method, so per-seed differences between two methods are paired and their confidence interval
is much tighter than the two methods' spreads. Every (method, ε, seed) cell is written to its own
folder as soon as it finishes (``cell.json``); a sweep started again on the same folder skips the
finished cells, so a long sweep can run in the background and resume after an interruption.

Reference points besides the federated methods: ``base`` (the pretrained base, adapters untrained),
``local`` (each site trains alone on its own train split for ``rounds × local_epochs`` epochs and is
scored on its own test split) and ``central`` (the pooled train splits of every site, the same
number of epochs: the ceiling; at a finite ε it is DP-SGD on the pooled patients, the ceiling of
private training at that ε). All three are scored exactly as a run's final evaluation:
each site's test split, pooled with the weights a site releases.

``<method>-clip`` (``central``, ``fedavg``, ``fedtar``) is the noise-free reference: the private
recipe's Poisson sampling, steps and per-patient clipping with no noise (``dp.noise_free_reference``),
not private, so it runs at ε = ∞ only and reports no ε; beside ``<method>`` at ε = ∞ and at a finite
ε it says how much of the loss is clipping and sampling and how much is noise.

``<baseline>-plain`` (fedavg, fedprox, scaffold, fedadam, drfa) is the baseline as the FedTAR paper
runs it: a plain adapter (``model.hyper_lora = false``), without the patient hyper-LoRA our
baselines share with FedTAR. ``<fedtar>-convex`` (fedtar and its ablations) reads FedTAR's temporal
step as the full convex combination of the snapshots (``train.fedtar_chain = "convex"``).

``<method>-ft`` is the personalised-FL reference (local adaptation of the federated model: each site
fine-tunes the final global model of ``<method>``'s cell of the same seed and ε on its own train
split, for ``train.fine_tune_epochs`` epochs, else one round's local epochs, and scores the result
on its test split). The fine-tuned
adapters never leave the site, so the cell's ε is its federated cell's.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import html
import json
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from secure_fed.clients.evaluation import METRIC_NAMES
from secure_fed.config import RunConfig
from secure_fed.lab.cells import (
    BASE,
    CENTRAL,
    CONVEX,
    CONVEX_VARIANTS,
    FEDERATED,
    FINE_TUNE,
    FINE_TUNED,
    LOCAL,
    METHODS,
    NOISE_FREE,
    NOISE_FREE_METHODS,
    PLAIN,
    PLAIN_BASELINES,
    REFERENCES,
    VARIANTS,
    _order,
    kept_groups,
    labelled,
    spent_per_site,
    t975,
)
from secure_fed.lab.share_kept import (
    share_of_central_per_site_table,
    share_of_central_table,
    share_per_site_table,
    share_table,
)
from secure_fed.runner import run_inprocess

# The columns tables show by default (every metric stays in results.json).
TABLE_METRICS: tuple[str, ...] = (
    "CIDEr",
    "CE-F1",
    "CE-F1-micro",
    "temporal_consistency",
    "BLEU-4",
    "ROUGE-L",
)
PAIRED_METRICS: tuple[str, ...] = ("CIDEr", "CE-F1", "CE-F1-micro")


def run_label(method: str, epsilon: float | None) -> str:
    return method if epsilon is None else f"{method} ε={epsilon:g}"


def cell_folder(out: Path, method: str, epsilon: float | None, seed: int) -> Path:
    return out / f"{method}-eps{epsilon if epsilon is not None else 'inf'}-seed{seed}"


def seed_config(base: RunConfig, method: str, epsilon: float | None, seed: int) -> RunConfig:
    """The cell's config: the same cohort, split and seed for every method (paired seeds).

    With ``data.split_seed`` set the data is held: every seed trains on the config's cohort and
    split, so the spread over seeds is the training's alone.
    """
    cfg = base.model_copy(deep=True, update={"seed": seed})
    name = method.removesuffix(FINE_TUNE).removesuffix(NOISE_FREE)
    if name in PLAIN_BASELINES:
        name = name.removesuffix(PLAIN)
        cfg.model.hyper_lora = False
    elif name in CONVEX_VARIANTS:
        name = name.removesuffix(CONVEX)
        cfg.train.fedtar_chain = "convex"
    if name in FEDERATED:
        cfg.fed.method = name  # type: ignore[assignment]
    if base.data.split_seed is None:
        cfg.data.synth.seed = seed
    if method in NOISE_FREE_METHODS:
        if epsilon is not None:
            raise ValueError(f"{method} adds no noise: it runs at ε = ∞ only, not at ε = {epsilon:g}")
        # validated whole: the switch is refused beside a target, which must go in the same step
        data = cfg.model_dump()
        data["dp"] |= {
            "enabled": True,
            "noise_free_reference": True,
            "target_epsilon": None,
            "noise_multiplier": None,
            "budget_epsilon": None,
            "ledger_dir": None,  # charged nowhere, as the non-private cells
        }
        return RunConfig.model_validate(data)
    if epsilon is not None:
        cfg.dp.target_epsilon = epsilon  # before enabling: the validator needs it
        cfg.dp.enabled = True
    return cfg


def _check_folder(base: RunConfig, out: Path) -> None:
    """A folder holds one benchmark: resuming with another config would mix incomparable cells."""
    saved = out / "sweep-config.json"
    mine = base.model_dump(mode="json", exclude={"out"})
    if saved.exists():
        theirs = _as_today(json.loads(saved.read_text()))
        if theirs != mine:
            raise ValueError(
                f"{out} holds a sweep of another configuration ({saved}); "
                "pass another --out to start a new one"
            )
    else:
        saved.write_text(json.dumps(mine, indent=1))


def base_model_digest(cfg: RunConfig) -> str:
    """This machine's base model for the sweep's config (pretrained and cached on first use, as
    the first cell would): its weights' digest."""
    from secure_fed.model.setup import build_report_model

    return build_report_model(cfg).base_digest


def _check_base_model(out: Path, digest: str) -> str:
    """A folder's cells share one base model. Machines of the same kind pretrain different bases
    from the same recipe, and a cell's figures depend on its base: a folder carried to, or its
    cells restored on, a machine whose base differs would mix incomparable figures."""
    saved = out / "sweep-base-model.json"
    if saved.exists():
        theirs = json.loads(saved.read_text())["base_model"]
        if theirs != digest:
            raise ValueError(
                f"{out} holds cells of base model {theirs} ({saved}) and this machine's base is {digest} "
                "(bases pretrained on different machines differ, and so do their figures); "
                "pass another --out to run these cells on this machine's base"
            )
    else:
        saved.write_text(json.dumps({"base_model": digest}))
    return digest


def _as_today(saved: dict[str, Any]) -> dict[str, Any] | None:
    """A saved config read by today's schema: a setting added since, at its default, is the same
    benchmark (a folder begun before an upgrade resumes); one that no longer validates is not."""
    try:
        return RunConfig.model_validate(saved).model_dump(mode="json", exclude={"out"})
    except ValidationError:
        return None


def sweep(
    base: RunConfig,
    methods: Sequence[str],
    seeds: Sequence[int],
    epsilons: Sequence[float | None],
    out: Path,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Every (method, ε, seed) cell in its own folder, finished cells skipped; then the summary,
    the paired differences, the privacy–utility plot and the HTML page, over every cell in ``out``."""
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(METHODS)}")
    # a fine-tuned cell starts from its federated cell's final model: that cell runs first
    methods = list(dict.fromkeys(m2 for m in methods for m2 in (m.removesuffix(FINE_TUNE), m)))
    if base.train.threads is not None:
        import torch

        torch.set_num_threads(base.train.threads)
    out.mkdir(parents=True, exist_ok=True)
    _check_folder(base, out)
    base_model = _check_base_model(out, base_model_digest(base))
    started = time.monotonic()
    for epsilon in epsilons:
        for method in methods:
            if (method in (BASE, LOCAL) or method in NOISE_FREE_METHODS) and epsilon is not None:
                continue  # non-private references: they run once, at ε = ∞ (central has a private cell)
            for seed in seeds:
                folder = cell_folder(out, method, epsilon, seed)
                done = folder / "cell.json"
                if done.exists():
                    log(f"{run_label(method, epsilon)} seed {seed}: done already ({done})")
                    if (folder / "audit").is_dir() and not (folder / "report.html").exists():
                        write_cell_report(seed_config(base, method, epsilon, seed), folder)
                    continue
                if method in FINE_TUNED:
                    federated = cell_folder(out, method.removesuffix(FINE_TUNE), epsilon, seed)
                    if not (federated / "cell.json").exists():
                        # another sweep on this folder is running it (or it failed here): its
                        # checkpoint is a model of some round, not the final one this cell tunes
                        log(
                            f"{run_label(method, epsilon)} seed {seed}: its federated cell ({federated}) "
                            "has not finished; left for a later run of this sweep"
                        )
                        continue
                with _cell_held(folder) as ours:
                    if not ours:
                        log(
                            f"{run_label(method, epsilon)} seed {seed}: another sweep is running it "
                            f"({folder}); left to that sweep"
                        )
                        continue
                    set_aside = _set_aside_unfinished(folder)
                    if set_aside is not None:
                        label = run_label(method, epsilon)
                        log(f"{label} seed {seed}: an unfinished attempt kept as {set_aside}")
                    log(f"{run_label(method, epsilon)} seed {seed} → {folder}")
                    t0 = time.monotonic()
                    cell = run_cell(base, method, epsilon, seed, folder, say=log)
                    cell["wall_s"] = round(time.monotonic() - t0, 1)
                    cell["base_model"] = base_model
                    _write_cell(done, cell)
                    log(_finished(run_label(method, epsilon), seed, cell))
    return write_outputs(out, time.monotonic() - started)


def _finished(label: str, seed: int, cell: dict[str, Any]) -> str:
    """The line a long sweep prints as each cell ends (its minutes, headline scores, ε spent): what
    a researcher reads back from a night's sweep log."""
    test = cell.get("test") or {}
    said = [f"{m} {test[m]:.3f}" for m in ("CIDEr", "CE-F1") if isinstance(test.get(m), int | float)]
    spent = _max_epsilon(cell.get("privacy"))
    if spent is not None:
        said.append(f"ε spent {spent:.3f}")
    return f"{label} seed {seed}: done in {cell['wall_s'] / 60:.1f} min" + (
        f": {', '.join(said)}" if said else ""
    )


def cell_lock(folder: Path) -> Path:
    """The lock a sweep holds while it runs the cell in ``folder``: beside the folder, not in it (an
    interrupted folder is renamed; its lock must not go with it)."""
    return folder.with_name(f".{folder.name}.lock")


@contextlib.contextmanager
def _cell_held(folder: Path) -> Iterator[bool]:
    """Whether this sweep holds the cell: False while another process runs it. Without this a second
    sweep on the folder took a running cell for an interrupted one and renamed it away, signed logs
    and all, under the process writing them. The kernel drops the lock when its holder dies, so a
    killed sweep's cell is free again at once."""
    path = cell_lock(folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        yield True


def _set_aside_unfinished(folder: Path) -> Path | None:
    """An interrupted cell's folder is renamed, not reused: its signed logs belong to the attempt
    that wrote them (a closed log never reopens, and a new attempt appended to an unclosed one would
    read as one run started twice), and they stay for an auditor beside the fresh attempt."""
    if not folder.is_dir() or not any(folder.iterdir()):
        return None
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = folder.with_name(f"{folder.name}.interrupted-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = folder.with_name(f"{folder.name}.interrupted-{stamp}-{n}")
    folder.rename(target)
    return target


def run_cell(
    base: RunConfig,
    method: str,
    epsilon: float | None,
    seed: int,
    folder: Path,
    say: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """One cell, scored; `say` hears its progress (see `CellProgress`): a federated cell's rounds,
    `central`'s optimiser steps (private or not) and `local`'s sites."""
    cfg = seed_config(base, method, epsilon, seed)
    cell: dict[str, Any] = {"method": method, "epsilon": epsilon, "seed": seed}
    label = f"{run_label(method, epsilon)} seed {seed}"

    def progress(unit: str, estimate: bool = True) -> CellProgress | None:
        return CellProgress(label, say, unit=unit, estimate=estimate) if say is not None else None

    if (method == CENTRAL and epsilon is not None) or method == CENTRAL + NOISE_FREE:
        test, per_site, privacy = evaluate_private_central(cfg, folder, progress=progress("step"))
        return cell | {"test": test, "per_site": per_site, "alpha": None, "privacy": privacy}
    if method in REFERENCES:
        # local's sites differ in size: it counts them but promises no time left
        shown = {CENTRAL: progress("step"), LOCAL: progress("site", estimate=False)}.get(method)
        test, per_site = evaluate_reference(cfg, method, folder, progress=shown)
        return cell | {"test": test, "per_site": per_site, "alpha": None, "privacy": None}
    if method in FINE_TUNED:
        federated = cell_folder(folder.parent, cfg.fed.method, epsilon, seed)
        test, per_site = evaluate_fine_tuned(cfg, federated, folder)
        privacy = json.loads((federated / "cell.json").read_text()).get("privacy")
        return cell | {"test": test, "per_site": per_site, "alpha": None, "privacy": privacy}
    metrics = run_inprocess(cfg, folder, progress=progress("round")).metrics
    write_cell_report(cfg, folder)
    return cell | {
        "test": metrics["test"],
        "per_site": metrics.get("test_per_site"),
        "alpha": metrics.get("alpha"),
        "privacy": metrics.get("privacy"),
    }


class CellProgress:
    """A cell's training on the sweep's console, about ten lines a cell, in its own `unit` (a
    federated cell's rounds, `central`'s optimiser steps, `local`'s sites): a hospital-scale cell
    trains for 10–30 minutes, and its start line alone cannot tell a slow cell from a stuck one.
    The estimate of what is left counts training only (the final scoring follows) and assumes the
    units take alike; `estimate=False` where they do not."""

    def __init__(
        self,
        label: str,
        say: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
        unit: str = "round",
        estimate: bool = True,
    ):
        self.label, self.say, self.clock, self.unit, self.estimate = label, say, clock, unit, estimate
        self.started = clock()

    def __call__(self, done: int, total: int, _result: Any = None) -> None:
        every = max(1, total // 10)
        if done % every and done != total:
            return
        minutes = (self.clock() - self.started) / 60
        line = f"{self.label}: {self.unit} {done}/{total} after {minutes:.1f} min"
        if done < total:
            if self.estimate:
                line += f", about {minutes * (total - done) / done:.1f} min of {self.unit}s left"
        else:
            line += ", scoring"
        self.say(line)


def write_cell_report(cfg: RunConfig, folder: Path) -> Path | None:
    """The cell's compliance report (report.html, .json, .csv) from its audit logs, as `secure-fed
    audit report` writes it for a run; None where the cell wrote no audit log."""
    from secure_fed.audits.keys import KeyFileError, load_public_keys
    from secure_fed.audits.report import write_report

    logs = sorted((folder / "audit").glob("*.jsonl"))
    if not logs:
        return None
    # the folder the run signed with (keyring.audit_keys_dir's choice), never a new one made here
    keys = (
        cfg.audit.keys_dir
        if cfg.audit.keys_dir is not None
        else cfg.he.keys_dir
        if cfg.he.enabled and cfg.he.keys_dir is not None
        else folder / "keys"
    )
    try:
        public = load_public_keys(Path(keys))
    except KeyFileError:
        public = None  # the report then says the signatures were not checked: never a lost cell
    return write_report(logs, folder / "report.html", public)[0]


Scores = tuple[dict[str, float], dict[str, dict[str, float]]]


def evaluate_reference(
    cfg: RunConfig, method: str, out: Path, progress: Callable[[int, int], None] | None = None
) -> Scores:
    """``base``, ``local`` or ``central``, scored as a run's final evaluation; also per site.
    `progress` hears ``central``'s optimiser steps and ``local``'s sites as each is trained."""
    from secure_fed.clients.training import LocalTrainSettings, train_copies
    from secure_fed.data.sites import site_names
    from secure_fed.lab.centralised import pooled_splits, train_averaged
    from secure_fed.model.setup import build_report_model

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

    from secure_fed.clients.training import LocalTrainSettings, train_copies
    from secure_fed.model.setup import build_report_model
    from secure_fed.model.vectors import unflatten
    from secure_fed.server.checkpoint import load_checkpoint

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
    from secure_fed.clients.handler import handle
    from secure_fed.clients.runtime import SiteRuntime
    from secure_fed.clients.site import attach_profiles
    from secure_fed.data.sites import site_names
    from secure_fed.model.setup import visit_slots
    from secure_fed.model.vectors import flatten
    from secure_fed.server.orchestrator import pool_scores

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


# -- summaries ------------------------------------------------------------------------------------
def load_cells(out: Path) -> list[dict[str, Any]]:
    cells = [json.loads(p.read_text()) for p in sorted(out.glob("*/cell.json"))]
    order = {m: i for i, m in enumerate(METHODS)}
    return sorted(
        cells,
        key=lambda c: (
            order.get(c["method"], 99),
            -(c["epsilon"] if c["epsilon"] is not None else math.inf),
            c["seed"],
        ),
    )


def _max_epsilon(privacy: dict[str, Any] | None) -> float | None:
    """The largest per-patient ε any site reports spent."""
    values = spent_per_site(privacy)
    return max(values) if values else None


def _mean_std(values: list[float]) -> tuple[float, float | None]:
    arr = np.array([v for v in values if not math.isnan(v)])
    if not len(arr):
        return (math.nan, None)
    return (float(arr.mean()), float(arr.std(ddof=1)) if len(arr) > 1 else None)


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (method, ε): n, mean and sample std (None for n = 1) of every metric, ε spent."""
    groups: dict[tuple[str, float | None], list[dict[str, Any]]] = {}
    for run in runs:
        groups.setdefault((run["method"], run["epsilon"]), []).append(run)
    rows = []
    for (method, epsilon), group in groups.items():
        row: dict[str, Any] = {"method": method, "epsilon": epsilon, "n": len(group)}
        for name in METRIC_NAMES:
            # a cell from before a metric existed has no value for it: NaN, left out of mean and std
            row[name] = _mean_std([float(r["test"].get(name, math.nan)) for r in group])
        spent = [e for e in (_max_epsilon(r.get("privacy")) for r in group) if e is not None]
        row["epsilon_spent"] = max(spent) if spent else None
        walls = [r["wall_s"] for r in group if "wall_s" in r]
        row["wall_s"] = float(np.mean(walls)) if walls else None
        rows.append(row)
    return rows


def paired_differences(
    runs: list[dict[str, Any]], against: str, metrics: Sequence[str] = PAIRED_METRICS
) -> list[dict[str, Any]]:
    """For every other (method, ε) cell group, private ones included: mean per-seed difference
    (method − non-private ``against``) and its 95 % t interval over the seeds both have (None
    where fewer than 2). Seeds pair across ε too: seed s fixes the cohort and split."""
    by = _tests_by_cell(runs)
    reference = by.get((against, None))
    if reference is None:
        return []
    rows = []
    for (method, epsilon), tests in sorted(by.items(), key=lambda item: _order(*item[0])):
        if (method, epsilon) == (against, None):
            continue
        row = {"method": method, "epsilon": epsilon, "label": labelled(method, epsilon), "against": against}
        rows.append(row | _differences(tests, reference, metrics))
    return rows


def paired_between(
    runs: list[dict[str, Any]],
    reference: list[dict[str, Any]],
    names: tuple[str, str],
    metrics: Sequence[str] = PAIRED_METRICS,
    against_method: str | None = None,
) -> list[dict[str, Any]]:
    """Each (method, ε) of ``runs`` minus the same (method, ε) of ``reference``, two sweeps of one
    cohort run two ways (distributed DP against site mode): mean per-seed difference and its 95 %
    t interval over the seeds both have. ``names`` are the two ways, for the table's labels.
    ``against_method``: minus that method of ``reference`` at the same ε instead (every method of a
    distributed-DP sweep against the private pooled `central`, the ceiling at that ε)."""
    theirs = _tests_by_cell(reference)
    rows = []
    for (method, epsilon), tests in sorted(_tests_by_cell(runs).items(), key=lambda item: _order(*item[0])):
        other = theirs.get((against_method or method, epsilon))
        if other is None:
            continue
        if against_method is None:
            label = f"{labelled(method, epsilon)}: {names[0]} − {names[1]}"
            heading = f"{names[0]} − {names[1]}, same method and ε"
        else:
            label = f"{labelled(method, epsilon)} ({names[0]}) − {against_method} ({names[1]})"
            heading = f"{names[0]} − {against_method} ({names[1]}), same ε"
        row = {
            "method": method,
            "epsilon": epsilon,
            "label": label,
            "against": names[1],
            "heading": heading,
        }
        rows.append(row | _differences(tests, other, metrics))
    return rows


# The FedTAR paper's Table 1 columns, in its order
PAPER_METRICS: tuple[str, ...] = ("BLEU-1", "BLEU-4", "ROUGE-L", "CIDEr", "CE-F1")
# FedTAR against FedAvg both ways the baseline can be run (ours with the hyper-LoRA, the paper's
# plain), and the convex reading of FedTAR's step against ours
PAPER_PAIRS: tuple[tuple[str, str], ...] = (
    ("fedtar", "fedavg"),
    ("fedtar", "fedavg-plain"),
    ("fedtar-convex", "fedavg"),
    ("fedtar-convex", "fedavg-plain"),
)


def paper_table(
    runs: list[dict[str, Any]], private: float = 8.0, metrics: Sequence[str] = PAPER_METRICS
) -> str:
    """The FedTAR paper's Table 1 as this sweep gives it: one row per method, each metric's mean
    with its 95 % t interval over the seeds without DP and at ε = ``private``; "—" where a method
    has no cell at that ε (a method without a DP variant)."""
    by = _tests_by_cell(runs)
    methods = sorted({m for m, _ in by}, key=lambda m: _order(m, None))
    if not methods:
        return ""

    def shown(tests: dict[int, dict[str, float]] | None, metric: str) -> str:
        if not tests:
            return "—"
        mean, ci = _mean_ci([t.get(metric, math.nan) for t in tests.values()])
        if math.isnan(mean):
            return "—"
        return f"{mean:.3f}" + ("" if ci is None else f" [{ci[0]:.3f}, {ci[1]:.3f}]")

    eps = f"{private:g}"
    cols = [f"{m} ε=∞" for m in metrics] + [f"{m} ε={eps}" for m in metrics]
    head = f"| method | seeds (ε=∞ / ε={eps}) | " + " | ".join(cols) + " |\n"
    head += "|" + " --- |" * (2 + len(cols)) + "\n"
    lines = []
    for method in methods:
        plain, dp = by.get((method, None)), by.get((method, private))
        seeds = f"{len(plain) if plain else '—'} / {len(dp) if dp else '—'}"
        cells = [shown(plain, m) for m in metrics] + [shown(dp, m) for m in metrics]
        lines.append(f"| {method} | {seeds} | " + " | ".join(cells) + " |")
    return head + "\n".join(lines) + "\n"


def paper_differences(
    runs: list[dict[str, Any]],
    pairs: Sequence[tuple[str, str]] = PAPER_PAIRS,
    metrics: Sequence[str] = PAPER_METRICS,
) -> list[dict[str, Any]]:
    """``paired_methods`` for each pair the sweep ran (FedTAR − FedAvg, each way), one heading."""
    rows = []
    for method, against in pairs:
        for row in paired_methods(runs, method, against, metrics):
            rows.append(row | {"heading": "method − against, same ε"})
    return rows


def paired_methods(
    runs: list[dict[str, Any]], method: str, against: str, metrics: Sequence[str] = PAIRED_METRICS
) -> list[dict[str, Any]]:
    """``method`` minus ``against`` at the same ε, for every ε both ran (FedTAR against FedAvg,
    private and not): mean per-seed difference and its 95 % t interval over the seeds both have."""
    by = _tests_by_cell(runs)
    rows = []
    for (name, epsilon), tests in sorted(by.items(), key=lambda item: _order(*item[0])):
        other = by.get((against, epsilon))
        if name != method or other is None:
            continue
        row = {
            "method": method,
            "epsilon": epsilon,
            "label": f"{method} − {against}, ε={'∞' if epsilon is None else f'{epsilon:g}'}",
            "against": against,
            "heading": f"{method} − {against}, same ε",
        }
        rows.append(row | _differences(tests, other, metrics))
    return rows


def _tests_by_cell(runs: list[dict[str, Any]]) -> dict[tuple[str, float | None], dict[int, dict[str, float]]]:
    """(method, ε) → seed → that cell's test scores."""
    by: dict[tuple[str, float | None], dict[int, dict[str, float]]] = {}
    for run in runs:
        by.setdefault((run["method"], run["epsilon"]), {})[run["seed"]] = run["test"]
    return by


def _differences(
    tests: dict[int, dict[str, float]], reference: dict[int, dict[str, float]], metrics: Sequence[str]
) -> dict[str, Any]:
    """n, and per metric the mean per-seed difference with its 95 % t interval, over shared seeds."""
    seeds = sorted(set(tests) & set(reference))
    out: dict[str, Any] = {"n": len(seeds)}
    for name in metrics:
        out[name] = _mean_ci([tests[s].get(name, math.nan) - reference[s].get(name, math.nan) for s in seeds])
    return out


def _mean_ci(values: list[float]) -> tuple[float, tuple[float, float] | None]:
    """Mean and its 95 % t interval (None for one value), NaN left out."""
    d = np.array(values, dtype=np.float64)
    d = d[~np.isnan(d)]
    if len(d) == 0:
        return (math.nan, None)
    if len(d) == 1:
        return (float(d[0]), None)
    half = t975(len(d) - 1) * float(d.std(ddof=1)) / math.sqrt(len(d))
    return (float(d.mean()), (float(d.mean()) - half, float(d.mean()) + half))


def _cell(mean: float, std: float | None) -> str:
    if math.isnan(mean):
        return "—"
    return f"{mean:.3f}" if std is None else f"{mean:.3f} ± {std:.3f}"


def _difference_cell(mean: float, ci: tuple[float, float] | None) -> str:
    if math.isnan(mean):
        return "—"
    return f"{mean:+.3f}" + ("" if ci is None else f" [{ci[0]:+.3f}, {ci[1]:+.3f}]")


def markdown_table(rows: list[dict[str, Any]], metrics: Sequence[str] = METRIC_NAMES) -> str:
    """Mean ± sample std; n = 1 shows the value alone (a std of one run does not exist)."""
    head = "| method | ε | ε spent | n | " + " | ".join(metrics) + " |\n"
    head += "|" + " --- |" * (4 + len(metrics)) + "\n"
    lines = []
    for row in rows:
        eps = "∞" if row["epsilon"] is None else f"{row['epsilon']:g}"
        spent = row.get("epsilon_spent")
        spent_s = "—" if spent is None else f"{spent:.3f}"
        cells = [_cell(*row[name]) for name in metrics]
        lines.append(f"| {row['method']} | {eps} | {spent_s} | {row['n']} | " + " | ".join(cells) + " |")
    return head + "\n".join(lines) + "\n"


def interval_table(runs: list[dict[str, Any]], metrics: Sequence[str] = PAIRED_METRICS) -> str:
    """Mean and its 95 % t interval over the seeds per (method, ε): for setting a mean against a
    cell group it cannot be paired with (another sweep whose cells are not at hand)."""

    def shown(mean: float, ci: tuple[float, float] | None) -> str:
        if math.isnan(mean):
            return "—"
        return f"{mean:.3f}" + ("" if ci is None else f" [{ci[0]:.3f}, {ci[1]:.3f}]")

    head = "| method | ε | n | " + " | ".join(f"{m} [95 % CI]" for m in metrics) + " |\n"
    head += "|" + " --- |" * (3 + len(metrics)) + "\n"
    lines = []
    for row in intervals(runs, metrics):
        eps = "∞" if row["epsilon"] is None else f"{row['epsilon']:g}"
        cells = [shown(*row[m]) for m in metrics]
        lines.append(f"| {row['method']} | {eps} | {row['n']} | " + " | ".join(cells) + " |")
    return head + "\n".join(lines) + "\n"


def intervals(runs: list[dict[str, Any]], metrics: Sequence[str] = PAIRED_METRICS) -> list[dict[str, Any]]:
    """Per (method, ε) in table order: n and, per metric, the mean over seeds with its 95 % t
    interval (None for one seed)."""
    rows = []
    for (method, epsilon), tests in sorted(_tests_by_cell(runs).items(), key=lambda item: _order(*item[0])):
        row: dict[str, Any] = {"method": method, "epsilon": epsilon, "n": len(tests)}
        for m in metrics:
            row[m] = _mean_ci([t.get(m, math.nan) for t in tests.values()])
        rows.append(row)
    return rows


def paired_table(rows: list[dict[str, Any]], metrics: Sequence[str] = PAIRED_METRICS) -> str:
    if not rows:
        return ""
    heading = rows[0].get("heading", f"method (ε) − {rows[0]['against']} ε=∞")
    head = f"| {heading} | n | " + " | ".join(f"Δ {m} [95 % CI]" for m in metrics) + " |\n"
    head += "|" + " --- |" * (2 + len(metrics)) + "\n"
    lines = []
    for row in rows:
        cells = [_difference_cell(*row[m]) for m in metrics]
        label = row.get("label", row["method"])
        lines.append(f"| {label} | {row['n']} | " + " | ".join(cells) + " |")
    return head + "\n".join(lines) + "\n"


def per_site_table(runs: list[dict[str, Any]], metric: str = "CIDEr") -> str:
    """Mean (± std) of ``metric`` per site, for every (method, ε) whose cells report sites, each
    row labelled with its ε (∞: non-private)."""
    per: dict[str, dict[str, list[float]]] = {}
    for run in sorted(runs, key=lambda r: _order(r["method"], r["epsilon"])):
        if run.get("per_site"):
            label = labelled(run["method"], run["epsilon"])
            for site, scores in run["per_site"].items():
                if metric in scores:
                    per.setdefault(label, {}).setdefault(site, []).append(float(scores[metric]))
    if not per:
        return ""
    sites = sorted({s for m in per.values() for s in m})
    head = f"| method ({metric}) | " + " | ".join(sites) + " |\n" + "|" + " --- |" * (1 + len(sites)) + "\n"
    lines = [
        f"| {method} | " + " | ".join(_cell(*_mean_std(by.get(s, []))) for s in sites) + " |"
        for method, by in per.items()
    ]
    return head + "\n".join(lines) + "\n"


def per_site_vs(runs: list[dict[str, Any]], against: str, metric: str = "CIDEr") -> str:
    """Per site, each (method, ε) minus the non-private ``against`` cell (``local``: the site
    training alone), paired by seed: the mean difference and its 95 % t interval over the seeds
    both have. The question a site asks before it joins: does federating beat what it has alone."""
    per: dict[tuple[str, float | None], dict[int, dict[str, float]]] = {}
    for run in runs:
        if run.get("per_site"):
            scores = {site: float(v[metric]) for site, v in run["per_site"].items() if metric in v}
            per.setdefault((run["method"], run["epsilon"]), {})[run["seed"]] = scores
    reference = per.get((against, None))
    if not reference:
        return ""
    sites = sorted({site for by_seed in per.values() for scores in by_seed.values() for site in scores})
    head = f"| method (Δ {metric} vs {against}) | n | " + " | ".join(sites) + " |\n"
    head += "|" + " --- |" * (2 + len(sites)) + "\n"
    lines = []
    for (method, epsilon), by_seed in sorted(per.items(), key=lambda item: _order(*item[0])):
        if (method, epsilon) == (against, None):
            continue
        seeds = sorted(set(by_seed) & set(reference))
        cells = [
            _difference_cell(
                *_mean_ci([by_seed[s].get(site, math.nan) - reference[s].get(site, math.nan) for s in seeds])
            )
            for site in sites
        ]
        lines.append(f"| {labelled(method, epsilon)} | {len(seeds)} | " + " | ".join(cells) + " |")
    return head + "\n".join(lines) + "\n"


def wall_table(runs: list[dict[str, Any]]) -> str:
    """Wall time of a cell, in minutes, per (method, ε): what the grid costs on the machine that
    ran it (a cell's own time; cells that ran side by side shared the machine)."""
    per: dict[str, list[float]] = {}
    for run in sorted(runs, key=lambda r: _order(r["method"], r["epsilon"])):
        if run.get("wall_s"):
            per.setdefault(labelled(run["method"], run["epsilon"]), []).append(run["wall_s"] / 60)
    if not per:
        return ""
    head = "| method | cells | min per cell | longest |\n| --- | --- | --- | --- |\n"
    lines = [
        f"| {label} | {len(walls)} | {_cell(*_mean_std(walls))} | {max(walls):.1f} |"
        for label, walls in per.items()
    ]
    return head + "\n".join(lines) + "\n"


def privacy_utility(runs: list[dict[str, Any]], metric: str = "CIDEr") -> list[dict[str, Any]]:
    """Share of the non-private gain over ``base`` kept at each ε, per federated method, its
    site-fine-tuned variant (``fedavg-ft``: the private federated model, then each site's own
    epochs on its own patients, a model that never leaves the site) and ``central`` (at a finite ε
    the pooled private ceiling: what any private method could keep).

    Paired: each share is taken over the seeds that base, the method without DP and the method at
    that ε all have (a partial grid's means over different seeds would compare different cohorts);
    ``n`` says how many."""
    out = []
    for method, epsilon, common in kept_groups(runs):
        keys = {(BASE, None), (method, None), (method, epsilon)}
        paired = [r for r in runs if r["seed"] in common and (r["method"], r["epsilon"]) in keys]
        rows = {(r["method"], r["epsilon"]): r for r in summarise(paired)}
        base, plain, row = rows[(BASE, None)], rows[(method, None)], rows[(method, epsilon)]
        gain = plain[metric][0] - base[metric][0]
        out.append(
            {
                "method": method,
                "epsilon": epsilon,
                "epsilon_spent": row["epsilon_spent"],
                "n": len(common),
                metric: row[metric],
                "kept": (row[metric][0] - base[metric][0]) / gain if gain > 0 else math.nan,
            }
        )
    return out


def plot_privacy_utility(rows: list[dict[str, Any]], path: Path, metric: str = "CIDEr") -> bool:
    """PNG of the metric against ε (∞ drawn at the right, base as a line); a sweep without private
    cells gets the metric per method at ε = ∞ instead. False only when no cell has the metric."""
    private = [r for r in rows if r["method"] in (*FEDERATED, *VARIANTS) and r["epsilon"] is not None]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not private:
        plain = [r for r in rows if r["epsilon"] is None and not math.isnan(r[metric][0])]
        if not plain:
            return False
        fig, ax = plt.subplots(figsize=(6, 4))
        xs = list(range(len(plain)))
        ax.errorbar(
            xs, [r[metric][0] for r in plain], yerr=[r[metric][1] or 0.0 for r in plain], fmt="o", capsize=3
        )
        ax.set_xticks(xs, [r["method"] for r in plain], rotation=30, ha="right")
        ax.set_title("no private cells in this sweep: every method at ε = ∞", fontsize=9)
        ax.set_ylabel(f"{metric} (mean ± std over seeds)")
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)
        return True

    finite = sorted({r["epsilon"] for r in private})
    inf_x = max(finite) * 2.5
    fig, ax = plt.subplots(figsize=(6, 4))
    for method in sorted({r["method"] for r in private}):
        pts = sorted(
            ((r["epsilon"] if r["epsilon"] is not None else inf_x), r[metric])
            for r in rows
            if r["method"] == method
        )
        xs = [p[0] for p in pts]
        ys = [p[1][0] for p in pts]
        es = [p[1][1] or 0.0 for p in pts]
        ax.errorbar(xs, ys, yerr=es, marker="o", capsize=3, label=method)
    for ref, style in ((BASE, ":"), (CENTRAL, "--")):
        row = next((r for r in rows if r["method"] == ref), None)
        if row is not None:
            ax.axhline(row[metric][0], linestyle=style, color="grey", label=ref)
    ax.set_xscale("log")
    ax.set_xticks([*finite, inf_x], [f"{e:g}" for e in finite] + ["∞"])
    ax.set_xlabel("ε per patient (target; δ fixed)")
    ax.set_ylabel(f"{metric} (mean ± std over seeds)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def _md_to_html(table: str) -> str:
    rows = [ln.strip("|").split(" | ") for ln in table.strip().splitlines() if ln and "---" not in ln]
    if not rows:
        return ""
    head = "".join(f"<th>{html.escape(c.strip())}</th>" for c in rows[0])
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c.strip())}</td>" for c in r) + "</tr>" for r in rows[1:]
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _paired_reference(runs: list[dict[str, Any]]) -> str:
    return "fedtar" if any(r["method"] == "fedtar" for r in runs) else BASE


def results_of(runs: list[dict[str, Any]], wall_s: float = 0.0) -> dict[str, Any]:
    """results.json's content from the cells alone: everything else in it is derived from them."""
    against = _paired_reference(runs)
    return {
        "runs": runs,
        "summary": summarise(runs),
        "paired": paired_differences(runs, against),
        "paired_vs_base": paired_differences(runs, BASE) if against != BASE else [],
        # "does federating beat training alone": the question a site asks before it joins
        "paired_vs_local": paired_differences(runs, LOCAL),
        "privacy_utility": privacy_utility(runs),
        "wall_s_this_call": round(wall_s, 1),
        "wall_s_all_cells": round(sum(r.get("wall_s", 0.0) for r in runs), 1),
    }


def _write_cell(done: Path, cell: dict[str, Any]) -> None:
    """A finished cell's cell.json, whole or not at all (its presence marks the cell done)."""
    done.parent.mkdir(parents=True, exist_ok=True)
    _write_whole(done, json.dumps(cell, indent=1))


def kept(out: Path) -> dict[str, Any]:
    """A sweep folder's record worth committing: its configuration and every finished cell (the
    tables are derived from these; checkpoints and logs are not kept)."""
    saved = out / "sweep-config.json"
    if not saved.is_file():
        raise ValueError(f"{out}: no sweep-config.json; name a folder `secure-fed-lab sweep -o` wrote")
    model = out / "sweep-base-model.json"
    base_model = json.loads(model.read_text())["base_model"] if model.is_file() else None
    return {"config": json.loads(saved.read_text()), "base_model": base_model, "runs": load_cells(out)}


def restore_cells(record: dict[str, Any], out: Path) -> list[Path]:
    """The finished cells of a kept record (``kept``) written back into ``out``, each as its
    folder's cell.json where the folder has none, so a sweep into ``out`` runs only the rest and its
    tables cover both. A folder of another configuration or base model is refused, and so is a
    record that does not name its base model; the sweep then checks that base against this
    machine's. The new cell.json files."""
    config, runs, base_model = record["config"], list(record["runs"]), record.get("base_model")
    saved = out / "sweep-config.json"
    if saved.exists() and _as_today(json.loads(saved.read_text())) != _as_today(config):
        raise ValueError(
            f"{out} holds a sweep of another configuration than the kept cells ({saved}); pass another --out"
        )
    if base_model is None:
        raise ValueError(
            "the kept cells do not name their base model, so they cannot be set beside new ones; "
            "run them again"
        )
    out.mkdir(parents=True, exist_ok=True)
    _check_base_model(out, base_model)
    if not saved.exists():
        saved.write_text(json.dumps(config, indent=1))
    written = []
    for cell in runs:
        done = cell_folder(out, cell["method"], cell["epsilon"], cell["seed"]) / "cell.json"
        if not done.exists():
            _write_cell(done, cell)
            written.append(done)
    return written


def write_outputs(out: Path, wall_s: float = 0.0) -> dict[str, Any]:
    """results.json, results.md, privacy_utility.png and results.html from every cell in ``out``."""
    runs = load_cells(out)
    results = results_of(runs, wall_s)
    rows = results["summary"]
    pu, pu_ce = results["privacy_utility"], privacy_utility(runs, "CE-F1")
    png = out / "privacy_utility.png"
    drawn = out / f".privacy_utility.{os.getpid()}.png"
    has_plot = plot_privacy_utility(rows, drawn)
    if has_plot:
        drawn.replace(png)
    total_wall = results["wall_s_all_cells"]
    _write_whole(out / "results.json", json.dumps(results, indent=1))
    sections = [
        ("Mean ± sample std over paired seeds", markdown_table(rows, TABLE_METRICS)),
        ("Mean and 95 % t interval over seeds", interval_table(runs)),
        (f"Paired differences to {_paired_reference(runs)}", paired_table(results["paired"])),
        ("Paired differences to base", paired_table(results["paired_vs_base"])),
        ("Paired differences to local", paired_table(results["paired_vs_local"])),
        ("CIDEr per site", per_site_table(runs)),
        ("CE-F1 per site", per_site_table(runs, "CE-F1")),
        ("CE-F1-micro per site", per_site_table(runs, "CE-F1-micro")),
        ("CIDEr per site minus local, paired by seed", per_site_vs(runs, LOCAL)),
        ("CE-F1 per site minus local, paired by seed", per_site_vs(runs, LOCAL, "CE-F1")),
        ("Privacy–utility: share of the non-private CIDEr gain over base kept", privacy_table(pu)),
        ("Privacy–utility: share of the non-private CE-F1 gain", privacy_table(pu_ce, "CE-F1")),
        ("Share of the non-private gain kept, 95 % intervals, ε spent per site", share_table(runs)),
        ("CIDEr share kept per site", share_per_site_table(runs)),
        ("CE-F1 share kept per site", share_per_site_table(runs, "CE-F1")),
        ("Share of non-private central's gain over base, 95 % intervals", share_of_central_table(runs)),
        ("CIDEr share of central's gain per site", share_of_central_per_site_table(runs)),
        ("Wall time per cell", wall_table(runs)),
    ]
    md = "".join(f"### {title}\n\n{table}\n" for title, table in sections if table)
    md += (
        f"All {len(METRIC_NAMES)} metrics: results.json. Wall time of all cells: {total_wall / 60:.1f} min.\n"
    )
    _write_whole(out / "results.md", md)
    img = ""
    if has_plot:
        img = (
            '<img alt="privacy-utility" src="data:image/png;base64,'
            + base64.b64encode(png.read_bytes()).decode()
            + '">'
        )
    body = "".join(f"<h2>{html.escape(t)}</h2>{_md_to_html(tab)}" for t, tab in sections if tab)
    _write_whole(
        out / "results.html",
        "<!doctype html><meta charset='utf-8'><title>secure-fed sweep</title>"
        "<style>body{font-family:sans-serif}td,th{border:1px solid #ccc;padding:2px 6px}"
        "table{border-collapse:collapse}</style>"
        f"<h1>secure-fed sweep: {html.escape(str(out))}</h1>{img}{body}"
        f"<p>Wall time of all cells: {total_wall / 60:.1f} min.</p>",
    )
    return results


def _write_whole(path: Path, text: str) -> None:
    """Whole or not at all: two sweeps sharing a folder (`make -j2 results-hospital`'s workers) each
    write the tables when they end, and a killed or concurrent writer must not leave half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def privacy_table(pu: list[dict[str, Any]], metric: str = "CIDEr") -> str:
    if not pu:
        return ""
    head = f"| method | ε target | ε spent | seeds | {metric} | share of gain kept |\n" + "| --- " * 6 + "|\n"
    lines = []
    for r in pu:
        eps = "∞" if r["epsilon"] is None else f"{r['epsilon']:g}"
        spent = "—" if r["epsilon_spent"] is None else f"{r['epsilon_spent']:.3f}"
        kept = "—" if math.isnan(r["kept"]) else f"{100 * r['kept']:.0f} %"
        seeds = r.get("n", "—")
        lines.append(f"| {r['method']} | {eps} | {spent} | {seeds} | {_cell(*r[metric])} | {kept} |")
    return head + "\n".join(lines) + "\n"


def evaluate_base(base: RunConfig, seeds: Sequence[int], out: Path) -> list[dict[str, Any]]:
    """The pretrained base with untrained adapters, scored exactly as a run's final evaluation."""
    runs = []
    for seed in seeds:
        cfg = seed_config(base, BASE, None, seed)
        test, per_site = evaluate_reference(cfg, BASE, out / f"base-seed{seed}")
        runs.append({"method": BASE, "epsilon": None, "seed": seed, "test": test, "per_site": per_site})
    return runs
