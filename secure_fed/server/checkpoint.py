"""Server state after every round, written atomically so a crash never leaves half a checkpoint."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

STATE_FILE = "state.pt"
META_FILE = "meta.json"


def _to_tensors(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(obj))
    if isinstance(obj, dict):
        return {k: _to_tensors(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_to_tensors(v) for v in obj]
    return obj


class Checkpoint(NamedTuple):
    round: int
    global_state: np.ndarray  # the raw iterate: training resumes from it
    strategy: dict[str, Any]
    meta: dict[str, Any]
    # train.average's state (secure_fed.server.averaging), None when the run does not average
    average: dict[str, Any] | None = None

    @property
    def released(self) -> np.ndarray:
        """The model the run releases at this round: the iterate average where one was kept."""
        if self.average is None:
            return self.global_state
        from secure_fed.server.averaging import IterateAverage

        settings = self.average
        average = IterateAverage(
            str(settings["kind"]), int(settings["total"]), float(settings["decay"]),
            float(settings["tail_fraction"]),
        )  # fmt: skip
        average.load_state_dict(self.average)
        return average.released(self.global_state)


def save_checkpoint(
    folder: Path,
    round_id: int,
    global_state: np.ndarray,
    strategy_state: dict[str, Any],
    meta: dict[str, Any],
    average: dict[str, Any] | None = None,
    record: Callable[[str], None] | None = None,
) -> str:
    """Write the round's state; returns the SHA-256 of state.pt. `record(sha256)` runs once the new
    file is on disk and before it replaces the last one, so the signed log names every state.pt a
    resume can find (a crash between the two leaves the previous file, whose hash the log holds)."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / (STATE_FILE + ".tmp")
    data: dict[str, Any] = {
        "round": round_id,
        "global": torch.from_numpy(global_state.copy()),
        "strategy": _to_tensors(strategy_state),
    }
    if average is not None:
        # with the raw iterate in one file: a crash never pairs a model with another round's average
        data["average"] = _to_tensors(average)
    torch.save(data, tmp)
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    digest = file_sha256(tmp)
    if record is not None:
        record(digest)
    tmp.replace(folder / STATE_FILE)
    meta_tmp = folder / (META_FILE + ".tmp")
    meta_tmp.write_text(json.dumps({"round": round_id, **meta}, indent=1, default=float))
    meta_tmp.replace(folder / META_FILE)
    return digest


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _arrays(section: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.numpy() if isinstance(v, torch.Tensor) else v) for k, v in section.items()}


def load_checkpoint(folder: Path) -> Checkpoint | None:
    path = folder / STATE_FILE
    if not path.exists():
        return None
    # Only tensors and plain containers: a checkpoint cannot run code when loaded.
    data = torch.load(path, map_location="cpu", weights_only=True)
    meta = json.loads((folder / META_FILE).read_text()) if (folder / META_FILE).exists() else {}
    average = _arrays(data["average"]) if "average" in data else None
    return Checkpoint(int(data["round"]), data["global"].numpy(), _arrays(data["strategy"]), meta, average)
