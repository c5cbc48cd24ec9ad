"""A run's folder: its id, the keys its parties sign with, the report written into it."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from secure_fed.config import RunConfig
from secure_fed.keyring import audit_keys_dir


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
    from secure_fed.audits.report import write_report as render

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
