"""Server state after every round, written atomically so a crash never leaves half a checkpoint."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

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


def save_checkpoint(
    folder: Path,
    round_id: int,
    global_state: np.ndarray,
    strategy_state: dict[str, Any],
    meta: dict[str, Any],
) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / (STATE_FILE + ".tmp")
    torch.save(
        {
            "round": round_id,
            "global": torch.from_numpy(global_state.copy()),
            "strategy": _to_tensors(strategy_state),
        },
        tmp,
    )
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    tmp.replace(folder / STATE_FILE)
    meta_tmp = folder / (META_FILE + ".tmp")
    meta_tmp.write_text(json.dumps({"round": round_id, **meta}, indent=1, default=float))
    meta_tmp.replace(folder / META_FILE)


def load_checkpoint(folder: Path) -> tuple[int, np.ndarray, dict[str, Any], dict[str, Any]] | None:
    path = folder / STATE_FILE
    if not path.exists():
        return None
    # Only tensors and plain containers: a checkpoint cannot run code when loaded.
    data = torch.load(path, map_location="cpu", weights_only=True)
    meta = json.loads((folder / META_FILE).read_text()) if (folder / META_FILE).exists() else {}
    strategy = {k: (v.numpy() if isinstance(v, torch.Tensor) else v) for k, v in data["strategy"].items()}
    return int(data["round"]), data["global"].numpy(), strategy, meta
