"""A run's folder: its id, the keys its parties sign with, the report written into it."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from secure_fed.config import RunConfig
from secure_fed.protocol.keyring import audit_keys_dir


def run_keys_dir(cfg: RunConfig, names: list[str]) -> Path | None:
    """Signing keys are needed for the audit log and for SecAgg+ / CKKS (sites sign their keys)."""
    return audit_keys_dir(cfg, names) if cfg.audit.enabled or cfg.secagg_on or cfg.he.enabled else None


RUN_ID_FILE = "run_id"


def run_id_for(out: Path, resume: bool = False) -> str:
    """The run's id, shared by every party of the run and kept by `--resume`: a random id, made
    when the run starts and kept in OUT/run_id (not derived from the folder: a second run there must
    not carry the first one's id). An id already in the folder is kept: the folder's run goes on (a
    finished run's closed logs refuse every record, so nothing is appended to them)."""
    import hashlib
    import uuid

    path = Path(out) / RUN_ID_FILE
    if path.is_file():
        return path.read_text().strip()
    if resume:
        # a folder from before run ids were random: its logs carry the hash of its path
        run_id = hashlib.sha256(str(Path(out).resolve()).encode()).hexdigest()[:12]
    else:
        run_id = uuid.uuid4().hex[:12]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(run_id + "\n")
    return run_id


def write_report(out: Path, keys_dir: Path | None) -> Path | None:
    """The compliance report over every party's log of the run."""
    from secure_fed.audits.keys import load_public_keys
    from secure_fed.verifier.report import write_report as render

    logs = sorted((Path(out) / "audit").glob("*.jsonl"))
    if not logs or keys_dir is None:
        return None
    html, _, _ = render(logs, Path(out) / "report.html", public_keys=load_public_keys(keys_dir))
    return Path(html)


def report_line(path: Path) -> str:
    """'wrote OUT/report.html (WORD: why)': the verdict the report leads with."""
    with contextlib.suppress(OSError, ValueError, KeyError):
        said = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))["verdict"]
        return f"wrote {path} ({said['word']}: {said['why']})"
    return f"wrote {path}"


class RunFolderRefused(ValueError):
    """A folder that cannot take the run asked of it: one line naming the folder and the fix."""


def run_in_folder(folder: Path) -> str | None:
    """What shows `folder` holds a run (its run id, configuration, logs, checkpoint, results)."""
    marks = (RUN_ID_FILE, "config.json", "audit", "checkpoint", "metrics.json")
    found = [name for name in marks if (folder / name).exists()]
    return ", ".join(f"{n}/" if (folder / n).is_dir() else n for n in found) or None


def enclosing_run(folder: Path) -> Path | None:
    """The run folder `folder` lies inside, if any: a run's own folder (its audit/, checkpoint/)
    is its run's, and a new run written there mixed its logs with the run's."""
    for parent in folder.resolve().parents:
        held = run_in_folder(parent) or ""
        if "config.json" in held and held != "config.json":
            return parent
    return None


def check_resumable(resume: Path) -> None:
    """`--resume DIR` only for a run that started there and has not finished."""
    if not (resume / "config.json").is_file():
        raise RunFolderRefused(
            f"--resume {resume}: no run to continue there (no config.json); pass the folder an earlier"
            " `secure-fed run --out DIR` wrote, or use --out for a new run"
        )
    if (resume / "metrics.json").is_file():
        # its logs end with their head records: a closed log is never reopened
        raise RunFolderRefused(
            f"--resume {resume}: that run finished (metrics.json is written); start a new run with --out"
        )


def resumed_config(resume: Path, given: dict[str, object]) -> RunConfig:
    """The configuration the run in `resume` started with; a flag given beside it is refused (the
    run goes on as DIR/config.json says, and a flag that would not apply must not look applied)."""
    ignored = [flag for flag, value in given.items() if value is not None]
    if ignored:
        raise RunFolderRefused(
            f"--resume {resume} continues the run as {resume / 'config.json'} has it; "
            f"{', '.join(ignored)} would not apply: drop it, or start a new run with --out"
        )
    try:
        return RunConfig.model_validate(json.loads((resume / "config.json").read_text()))
    except ValueError as err:  # JSON and pydantic errors alike
        raise RunFolderRefused(
            f"{resume / 'config.json'}: not a run configuration ({err}); start a new run with --out"
        ) from err


def check_new_folder(folder: Path) -> None:
    """A new run's folder holds no run and lies inside none."""
    held = run_in_folder(folder)
    if held:
        # a second run here appended to the first one's closed logs, which then stopped verifying
        way_on = (
            "that run finished:"
            if (folder / "metrics.json").is_file()
            else f"`secure-fed run --resume {folder}` continues it, or"
        )
        raise RunFolderRefused(
            f"--out {folder}: holds a run already ({held}); {way_on} give another --out for a new run"
        )
    inside = enclosing_run(folder)
    if inside is not None:
        raise RunFolderRefused(
            f"--out {folder}: lies inside the run folder {inside}, which belongs to that run; give an --out "
            "outside it for a new run"
        )
