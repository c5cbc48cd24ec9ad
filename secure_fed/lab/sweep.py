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

This module runs the cells; what a cell is (its method names, config and folder) is `cells.py`, the
folder's records `records.py`, the reference cells' scoring `references.py`, the summaries and paired
differences `statistics.py`, and the tables, plot and pages written from them `tables.py`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from secure_fed.config import RunConfig
from secure_fed.lab.cells import (
    BASE,
    CENTRAL,
    FINE_TUNE,
    FINE_TUNED,
    LOCAL,
    METHODS,
    NOISE_FREE,
    NOISE_FREE_METHODS,
    REFERENCES,
    cell_folder,
    run_label,
    seed_config,
)
from secure_fed.lab.records import _check_base_model, _check_folder, _write_cell
from secure_fed.lab.references import evaluate_fine_tuned, evaluate_private_central, evaluate_reference
from secure_fed.lab.statistics import _max_epsilon
from secure_fed.lab.tables import write_outputs
from secure_fed.launch.runner import run_inprocess


def base_model_digest(cfg: RunConfig) -> str:
    """This machine's base model for the sweep's config (pretrained and cached on first use, as
    the first cell would): its weights' digest."""
    from secure_fed.model.setup import build_report_model

    return build_report_model(cfg).base_digest


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
    from secure_fed.verifier.report import write_report

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
