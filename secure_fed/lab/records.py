"""A sweep folder's records: the configuration and base model every cell of a folder shares (a
folder holds one benchmark), the finished cells (each its own cell.json, written whole or not at
all), and the kept record of a folder that docs/results/sweeps/ commits and `--cells-from` restores."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from secure_fed.config import RunConfig
from secure_fed.lab.cells import (
    METHODS,
    cell_folder,
)


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


def _write_cell(done: Path, cell: dict[str, Any]) -> None:
    """A finished cell's cell.json, whole or not at all (its presence marks the cell done)."""
    done.parent.mkdir(parents=True, exist_ok=True)
    _write_whole(done, json.dumps(cell, indent=1))


def _write_whole(path: Path, text: str) -> None:
    """Whole or not at all: two sweeps sharing a folder (`make -j2 results-hospital`'s workers) each
    write the tables when they end, and a killed or concurrent writer must not leave half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


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
