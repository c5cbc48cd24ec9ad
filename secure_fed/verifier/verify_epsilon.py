"""`audit verify`'s second accountant: each privacy record's ε re-derived from the logged mechanism
events with dp_accounting (composition per (signer, site, population) in log order), and each
empirical lower bound's ε̂ from its logged counts."""

from __future__ import annotations

import math
from collections import defaultdict

from secure_fed.audits.privacy import PrivacyEntry, PrivacyPayloadError, parse_privacy
from secure_fed.verifier.accounting import EventError, StreamAccountant, prv_matches, rdp_matches
from secure_fed.verifier.lower_bound import check_record as check_empirical_record
from secure_fed.verifier.verdict import population_words
from secure_fed.verifier.verify_records import LogState, RecordChecker
from secure_fed.verifier.verify_results import Rederived


def rederive(checker: RecordChecker, state: LogState, rederived: dict[str, Rederived]) -> None:
    streams: dict[tuple[str, str, str], StreamAccountant] = defaultdict(StreamAccountant)
    for item in state.privacy:
        record, label, seq = item.record, item.label, item.record["seq"]
        try:
            entry = parse_privacy(record["payload"])
            stream = streams[(record["party"], entry.site, entry.population)]
            stream.compose(entry.event)
        except (PrivacyPayloadError, EventError) as err:
            checker.report(state.path, item.line, f"{label}privacy record unreadable: {err}", seq)
            continue
        rdp, pld = stream.epsilon_rdp(entry.delta), stream.epsilon_pld(entry.delta)
        rdp_ok = rdp_matches(entry.epsilon_rdp, rdp)
        prv_ok = None if entry.epsilon_prv is None else prv_matches(entry.epsilon_prv, pld)
        rederived.setdefault(record["hash"], Rederived(rdp, pld, rdp_ok, prv_ok))
        if not rdp_ok:
            checker.report(
                state.path,
                item.line,
                f"{label}RDP epsilon {_fmt(entry.epsilon_rdp)} does not match mechanism parameters "
                f"(re-derived {_fmt(rdp)} with RDP; {_whose(entry)}, δ={entry.delta:g})",
                seq,
            )
        if prv_ok is False:
            checker.report(
                state.path,
                item.line,
                f"{label}PRV epsilon {_fmt(entry.epsilon_prv or 0.0)} does not match mechanism "
                "parameters "
                f"(re-derived {_fmt(pld)} with PLD; {_whose(entry)}, δ={entry.delta:g})",
                seq,
            )


def _whose(entry: PrivacyEntry) -> str:
    """ "site0's validation patients": whose ε a privacy record prices."""
    return f"{entry.site}'s {population_words(entry.population)}"


def _fmt(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.4g}"


def check_empirical_audits(checker: RecordChecker, states: list[LogState]) -> dict[str, float]:
    """Re-derive each `empirical_audit` record's ε̂ from its logged counts (one-run audit bound)."""
    found: dict[str, float] = {}
    for state in states:
        for seq, record in sorted(state.records.items()):
            if record["event"] != "empirical_audit":
                continue
            again, problem = check_empirical_record(record["payload"])
            if again is not None:
                found[record["hash"]] = again
            if problem:
                checker.report(state.path, None, f"record seq {seq}: {problem}", seq)
    return found
