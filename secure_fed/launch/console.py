"""What a person running `secure-fed run` sees: our own lines and progress, not the frameworks' logs.

A default run shows progress (rich) for base pretraining, each round and the final evaluation, one
line per round and a closing privacy line. `--verbose` (or FLWR_LOG_LEVEL) brings the frameworks'
INFO/DEBUG logs back.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

_FORMAT = "%(levelname)s %(name)s: %(message)s"


class Terminated(KeyboardInterrupt):
    """SIGTERM (a service manager's stop), taken like Ctrl-C: the run stops, its logs sign
    `run_aborted` with the signal, and its last checkpoint stays for --resume."""


def quiet_frameworks(verbose: bool = False) -> None:
    """Warnings and errors only, each once, in our format; no framework DEBUG or INFO lines.

    Opacus calls `logging.basicConfig` at import (root handler, no level) and Flower's logger sits at
    DEBUG and also propagates to the root, so every Flower DEBUG line printed twice. Here the root gets
    one handler at WARNING and Flower keeps only its own console handler.
    """
    if not verbose:
        # Read by transformers at import: its advice to library users ("pass an attention_mask") is
        # not the operator's to act on.
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    if not verbose and "transformers" in sys.modules:
        sys.modules["transformers"].logging.set_verbosity_error()
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format=_FORMAT, force=True)
    for noisy in ("ray", "opacus", "filelock", "matplotlib", "PIL"):
        logging.getLogger(noisy).setLevel(logging.INFO if verbose else logging.WARNING)
    try:
        from flwr.common.logger import FLOWER_LOGGER, console_handler
    except ImportError:  # pragma: no cover (flwr is a dependency)
        return
    FLOWER_LOGGER.propagate = False
    if not verbose and not os.environ.get("FLWR_LOG_LEVEL"):
        console_handler.setLevel(logging.WARNING)


class _PretrainWatcher(logging.Handler):
    """Turns the model builder's INFO records into a progress bar (it has no callback of its own)."""

    def __init__(self, progress: Progress) -> None:
        super().__init__(logging.INFO)
        self.progress = progress
        self.task: Any = None

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING:
            logging.getLogger().handle(record)  # warnings still reach the console as usual
            return
        message = str(record.msg)
        if message.startswith("pretraining the"):
            self.task = self.progress.add_task("base pretraining (public data, cached once)", total=None)
        elif message.startswith("base pretraining step") and len(record.args or ()) >= 2:
            step, steps = record.args[0], record.args[1]  # type: ignore[index]
            if self.task is None:
                self.task = self.progress.add_task("base pretraining (public data, cached once)", total=None)
            self.progress.update(self.task, completed=int(step), total=int(steps))


# what each message phase is, in an operator's words
PHASES = {
    "hello": "contacting the sites",
    "train": "local training at the sites",
    "secagg_setup": "SecAgg+ key exchange",
    "secagg_shares": "SecAgg+ key shares",
    "secagg_masked": "SecAgg+ masked upload",
    "secagg_consistency": "SecAgg+ signing the survivor set",
    "secagg_unmask": "SecAgg+ unmasking the sum",
    "plain_sum": "summing the updates",
    "hypergrad": "α hypergradients at the sites",
    "plain_scalars": "summing the α scalars",
    "he_keys": "α masks: key exchange",
    "he_encrypt": "CKKS: encrypting the α scalars",
    "he_decrypt": "CKKS: decrypting the α sum",
    "evaluate": "scoring the test splits",
    "finish": "closing the logs",
}


class RunProgress:
    """Progress bars for one run; `on_round` is the runner's per-round callback."""

    def __init__(self, console: Console, rounds: int, line: Callable[[int, int, Any], str]) -> None:
        self.console = console
        self.rounds = rounds
        self.line = line
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self.round_task: Any = None
        self.watcher: _PretrainWatcher | None = None

    def done_pretraining(self) -> None:
        # Steps are logged every 100: the last record is short of the total, so close it here.
        if self.watcher is not None and self.watcher.task is not None:
            self.progress.remove_task(self.watcher.task)
            self.watcher.task = None
            self.progress.console.print("base model ready (pretrained on public data, now cached)")

    def on_phase(self, round_id: int, phase: str) -> None:
        """The round bar names the phase on the wire (training, SecAgg+ shares, α, ...)."""
        if self.round_task is None:
            return
        if phase == "train":
            self.done_pretraining()  # the sites are past building their models
        what = PHASES.get(phase, phase.replace("_", " "))
        where = f"round {round_id}/{self.rounds}" if round_id else "setting up"
        if phase in ("evaluate", "finish"):
            where = "end of run"
        self.progress.update(self.round_task, description=f"{where}: {what}")

    def on_round(self, round_id: int, rounds: int, result: Any) -> None:
        self.done_pretraining()
        self.progress.console.print(self.line(round_id, rounds, result), highlight=False)
        nxt = f"round {round_id + 1}: training" if round_id < rounds else "evaluating on the test splits"
        self.progress.update(self.round_task, completed=round_id, total=rounds, description=nxt)


@contextmanager
def run_progress(
    console: Console, rounds: int, line: Callable[[int, int, Any], str]
) -> Iterator[RunProgress]:
    """Live progress while the run goes on; nothing is left on screen but the per-round lines."""
    shown = RunProgress(console, rounds, line)
    watcher = _PretrainWatcher(shown.progress)
    shown.watcher = watcher
    watched = [logging.getLogger(name) for name in ("secure_fed.model.setup", "secure_fed.model.build")]
    saved = [(lg.level, lg.propagate) for lg in watched]
    for lg in watched:
        lg.addHandler(watcher)
        lg.setLevel(logging.INFO)
        lg.propagate = False
    try:
        with shown.progress:
            shown.round_task = shown.progress.add_task("round 1: preparing sites, training", total=rounds)
            yield shown
    finally:
        for lg, (level, propagate) in zip(watched, saved, strict=True):
            lg.removeHandler(watcher)
            lg.setLevel(level)
            lg.propagate = propagate


def privacy_line(metrics: dict[str, Any], accountant: str, budget: float | None) -> str | None:
    """One line: δ, the accountant, and each site's ε (of its budget) — None when no DP was spent."""
    privacy = metrics.get("privacy") or {}
    spent: dict[str, dict[str, float | None]] = privacy.get("epsilon") or {}
    if not spent:
        return None
    delta = privacy.get("delta")
    parts = []
    populations = set()
    # imported here: the accountants pull in scipy, which a run without DP never needs
    from secure_fed.dp.accountants import accountant_named

    counted = accountant_named(accountant)
    for site, eps in sorted(spent.items()):
        # no PRV figure covers every population that released: RDP's, said so
        value, used = counted.pick(eps)
        mark = f" ({used.label})" if used is not counted else ""
        shown = "n/a" if value is None else f"{value:.2f}"
        parts.append(f"{site} {shown}" + (f"/{budget:g}" if budget is not None else "") + mark)
        populations.add(POPULATION_WORDS.get(str(eps.get("population", "train")), "patients"))
    name = counted.label
    delta_text = f"{delta:.1e}" if isinstance(delta, int | float) else "n/a"
    budget_text = " of budget" if budget is not None else ""
    whose = " or ".join(sorted(populations))
    return f"privacy: δ={delta_text}, ε per patient, {whose} ({name} accountant){budget_text}: " + ", ".join(
        parts
    )


# the population a site's headline ε is of (the one with the largest ε)
POPULATION_WORDS = {"train": "training patients", "validation": "validation patients"}
