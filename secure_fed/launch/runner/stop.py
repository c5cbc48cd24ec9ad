"""A run that stops (a signal, a failure): every log signed as stopped, what the stop cost, the report."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from secure_fed.audits.log import AuditLog
from secure_fed.audits.reader import read_log
from secure_fed.config import RunConfig
from secure_fed.data.sites import site_names
from secure_fed.launch.console import Terminated
from secure_fed.launch.runner.folder import report_line, run_keys_dir, write_report
from secure_fed.server.trail import ServerTrail
from secure_fed.site.runtime import SiteRuntime

log = logging.getLogger(__name__)


def signal_name(stop: KeyboardInterrupt) -> str:
    return "SIGTERM" if isinstance(stop, Terminated) else "SIGINT"


def sign_interrupt(
    signal: str, round_id: int | None, logs: list[AuditLog], runtimes: Iterable[SiteRuntime] = ()
) -> None:
    """Ctrl-C or a service manager's SIGTERM: each log this process writes (the server's, and the
    in-process sites') ends with a signed `run_aborted` naming the signal and the round it cut short,
    so a report can say the run was interrupted. No head record: `--resume` goes on with the chains
    from the last checkpoint (a head would close them for good)."""
    payload = {"signal": signal, "round": round_id or None}
    for log_ in [*logs, *(r.trail.log for r in runtimes if r.trail is not None)]:
        if log_.closed:
            continue
        try:
            log_.append("run_aborted", payload, round=round_id or None)
        except Exception:  # noqa: BLE001 (the other parties' logs still get theirs; the stop goes on)
            log.exception("could not sign run_aborted in %s", log_.path)
        log_.abandon()


def _hand_over_pending(trail: ServerTrail, site_logs: Iterable[Path]) -> None:
    """The privacy records the sites signed in the round the stop cut short (charged at admission)
    reach the server with that round's replies, which the stop lost; the server's copies must hold
    them too, or a check of its log against each site's finds releases only the site shows. Where
    this process runs the server and holds the sites' logs (in-process, or a simulation's stop once
    Ray's workers are gone), what the server has not copied is copied from them now."""
    try:
        copied = {
            (r["payload"].get("party"), r["payload"].get("seq"))
            for r in map(json.loads, trail.log.path.read_text().splitlines())
            if r.get("event") == "site_record"
        }
        for path in site_logs:
            for record in map(json.loads, Path(path).read_text().splitlines()):
                if record.get("event") == "privacy" and (record["party"], record["seq"]) not in copied:
                    trail.copy(record)
    except Exception:  # noqa: BLE001 (the stop goes on; verify then names the gap)
        log.exception("could not copy the sites' last privacy records into the server's log")


def _log_records(path: Path) -> list[dict[str, Any]]:
    """The log's readable records (a stop reads what it can: a damaged line is verify's to judge)."""
    with contextlib.suppress(OSError):
        return [line.record for line in read_log(path) if line.record is not None]
    return []


def _checkpointed_round(out: Path) -> int:
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        return int(json.loads((Path(out) / "checkpoint" / "meta.json").read_text())["round"])
    return 0


def stop_words(out: Path, signed_round: int | None = None) -> str:
    """After a stop the logs signed: the round it cut short, what the stop cost there (from the
    sites' own signed records: a site is charged a round's ε when it is admitted to train, before
    anything leaves it), and how to go on. `signed_round`: the round the stop names, where the
    caller knows it; else the server's last `run_aborted` says it."""
    out = Path(out)
    audit = out / "audit"
    server = _log_records(audit / "server.jsonl")
    round_id = signed_round
    if round_id is None:
        aborts = [r for r in server if r.get("event") == "run_aborted"]
        round_id = aborts[-1]["payload"].get("round") if aborts else None
    done = _checkpointed_round(out)
    way_on = f"`secure-fed run --resume {out}` continues " + (
        f"after round {done}" if done else "from round 1"
    )
    if not isinstance(round_id, int):
        return way_on
    charged, dp = [], False
    for path in sorted(audit.glob("*.jsonl")):
        if path.stem == "server":
            continue
        own = [r for r in _log_records(path) if r.get("party") == path.stem and r.get("event") == "privacy"]
        dp = dp or bool(own)
        if any(r.get("round") == round_id for r in own):
            charged.append(path.stem)
    summed = any(r.get("event") == "secagg_round" and r.get("round") == round_id for r in server)
    where = f"in round {round_id}"
    if charged:
        released = (
            f"its sum was formed before the stop, but round {round_id} was not saved"
            if summed
            else f"nothing of round {round_id} was released"
        )
        cost = (
            f"round {round_id}'s ε was charged at every site that trained in it ({', '.join(charged)}), "
            f"and {released}: that ε is spent"
        )
        return f"{where}; {cost}; {way_on}"
    if dp:
        return f"{where}; no site was charged ε for round {round_id}; {way_on}"
    return f"{where}; {way_on}"


def report_after_stop(cfg: RunConfig, out: Path) -> str | None:
    """The report of a run that stopped (a signal, a failure): written as for a finished run, its
    verdict saying how far the run got; the console line naming it, or None (no audit log)."""
    if not cfg.audit.enabled:
        return None
    try:
        path = write_report(out, run_keys_dir(cfg.model_copy(update={"out": Path(out)}), site_names(cfg)))
    except Exception:  # noqa: BLE001 (the stop goes on; `secure-fed audit report` can write it later)
        log.info("could not write the report after the stop", exc_info=True)
        return (
            f"the report could not be written now; `secure-fed audit report {out}/audit/*.jsonl "
            f"--keys {out}/keys -o {out}/report.html` writes it"
        )
    return None if path is None else report_line(path)
