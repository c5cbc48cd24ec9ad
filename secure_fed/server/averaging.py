"""Iterate averaging (`train.average`): the model released at the end is an average of the training
iterates, while training itself goes on from the last (raw) iterate.

Every iterate averaged is already released (a DP-SGD step of the pooled `central`, or the server's
model after a round: a function of the sites' private updates or of the decoded noisy sum), so the
average is post-processing and costs no ε: nothing is charged for it.

- "ema": weights ∝ decay^(t − i) over iterates i = 1..t, bias-corrected (m ← d·m + (1 − d)·w from
  m = 0, released m / (1 − d^t)), so the first iterate is not over-weighted by starting there.
- "tail": the plain mean of the last ⌈tail_fraction · total⌉ iterates of a run of `total`; before
  the tail starts the release is the raw iterate.

The state (`state_dict`) is plain arrays and numbers, so a checkpoint keeps it and a resumed run
releases what an uninterrupted one would.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from secure_fed.config import RunConfig


class AverageMismatch(ValueError):
    """A saved average made with other settings than this run's."""


class IterateAverage:
    def __init__(self, kind: str, total: int, decay: float = 0.9, tail_fraction: float = 0.5) -> None:
        if kind not in ("ema", "tail"):
            raise ValueError(f"unknown iterate average {kind!r}; expected 'ema' or 'tail'")
        if total < 1:
            raise ValueError(f"a run of {total} iterates has nothing to average")
        self.kind, self.total, self.decay, self.tail_fraction = kind, total, decay, tail_fraction
        self.value: np.ndarray | None = None  # ema: the biased moment m; tail: the running mean
        self.count = 0  # iterates folded in

    @classmethod
    def from_config(cls, cfg: RunConfig, total: int) -> IterateAverage | None:
        """The run's averager over `total` iterates, None for train.average = "none"."""
        train = cfg.train
        if train.average == "none":
            return None
        return cls(train.average, total, train.ema_decay, train.tail_fraction)

    @property
    def tail_start(self) -> int:
        """The first iterate (1-based) the tail mean takes."""
        return self.total - max(1, math.ceil(self.tail_fraction * self.total)) + 1

    def update(self, iterate: np.ndarray, index: int) -> None:
        """Fold in the `index`-th iterate of the run (1-based; a skipped one is simply not given)."""
        w = np.asarray(iterate, dtype=np.float64)
        if self.kind == "tail":
            if index < self.tail_start:
                return
            self.count += 1
            self.value = w.copy() if self.value is None else self.value + (w - self.value) / self.count
            return
        self.count += 1
        base = np.zeros_like(w) if self.value is None else self.value
        self.value = self.decay * base + (1.0 - self.decay) * w

    def released(self, raw: np.ndarray) -> np.ndarray:
        """The model to evaluate and release: the average, or `raw` while there is none yet."""
        if self.value is None or self.count == 0:
            return np.asarray(raw, dtype=np.float64)
        if self.kind == "tail":
            return self.value.copy()
        return self.value / (1.0 - self.decay**self.count)

    def settings(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "total": self.total,
            "decay": self.decay,
            "tail_fraction": self.tail_fraction,
        }

    def state_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"count": self.count, **self.settings()}
        if self.value is not None:
            out["value"] = self.value.copy()
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = {
            "kind": str(state["kind"]),
            "total": int(state["total"]),
            "decay": float(state["decay"]),
            "tail_fraction": float(state["tail_fraction"]),
        }
        if saved != self.settings():
            raise AverageMismatch(
                f"the checkpoint's iterate average was made with {saved}, this run's train settings give "
                f"{self.settings()}: resume with the settings it was started with, or start a new run"
            )
        self.count = int(np.asarray(state["count"]).reshape(-1)[0])
        value = state.get("value")
        self.value = None if value is None else np.asarray(value, dtype=np.float64).copy()
