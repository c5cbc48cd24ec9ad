"""`audit verify`'s checks across logs, against the server's own account of each round: copies
equal their originals, every participant's release logged (DP on), every site's privacy record
handed over, distributed DP's plan and survivor sets (`distributed_checks`) and α noise shares
(`alpha_shares`), and the logs not supplied."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from secure_fed.audits.payloads import record_round, run_settings
from secure_fed.audits.reader import Line
from secure_fed.verifier.alpha_shares import alpha_share_findings
from secure_fed.verifier.distributed_checks import (
    UNMASK_PHASE,
    SiteRounds,
    distributed_findings,
    removal_findings,
)
from secure_fed.verifier.verify_records import LogState, RecordChecker
from secure_fed.verifier.verify_results import Problem


def check_copies(checker: RecordChecker, states: list[LogState]) -> None:
    """Each embedded record must equal the record of the same seq in its party's own log."""
    own = {(state.party, state.run_id): state for state in states if state.party is not None}
    for state in states:
        for line, inner in state.embedded:
            source = own.get((inner["party"], inner["run_id"]))
            if source is None or source is state:
                continue
            original = source.records.get(inner["seq"])
            if original is None or original["hash"] != inner["hash"]:
                checker.report(
                    state.path,
                    line,
                    f"embedded {inner['party']} record seq {inner['seq']} differs from {source.path}",
                    inner["seq"],
                )


def check_participation(checker: RecordChecker, states: list[LogState]) -> None:
    """With DP on, every site a round lists as taking part must have logged that round's release."""
    configs = [run_settings(config) for state in states for config in state.run_configs]
    if not any(settings.dp for settings in configs):
        return
    logged = {(item.record["party"], record_round(item.record)) for state in states for item in state.privacy}
    for state in states:
        for line, round_, participants, _ in state.rounds:
            for site in participants:
                if (site, round_) not in logged:
                    checker.report(
                        state.path,
                        line,
                        f"round {round_}: {site} took part, but no log holds a privacy record of "
                        f"{site} for round {round_} (DP is on in the run_config)",
                    )


def check_distributed(checker: RecordChecker, states: list[LogState]) -> None:
    """Under distributed DP: one plan and one signed survivor set of at least h sites per round,
    across the sites' own logs (`distributed_checks`), so a logged ε is an upper bound."""
    removals = [
        (state.path, line.number, record["round"], record["payload"].get("removed"))
        for state in states
        for line, record in state.removals
        if isinstance(record.get("round"), int) and isinstance(record.get("payload"), dict)
    ]
    sites = [site_rounds(state) for state in states if state.party]
    found = distributed_findings(sites) + removal_findings(sites, removals) + alpha_share_findings(sites)
    for finding in found:
        checker.problems.append(Problem(finding.path, finding.line, finding.reason))


def check_handed_over(checker: RecordChecker, states: list[LogState]) -> None:
    """Each privacy record of a site's own log must be among the copies of a log that says the
    site took part in the round the record was handed over with."""
    for carrier in states:
        if not carrier.rounds and not carrier.embedded:
            continue
        copied = {inner["hash"] for _, inner in carrier.embedded}
        for site_log in states:
            site = site_log.party
            if site_log is carrier or site is None or site_log.run_id != carrier.run_id:
                continue
            if site not in carrier.named:
                continue
            took_part = carrier.participated(site)
            for item in site_log.privacy:
                record = item.record
                if item.label or record["hash"] in copied:
                    continue
                _missing_copy(checker, carrier, site_log, record, took_part)


def _missing_copy(
    checker: RecordChecker,
    carrier: LogState,
    site_log: LogState,
    record: dict[str, Any],
    took_part: dict[int, Line],
) -> None:
    site, round_ = record["party"], record_round(record)
    what = f"{site} record seq {record['seq']} (privacy, round {round_})"
    # A release made before training (round 0, e.g. the GMM histogram) goes out with the first
    # round the site takes part in.
    handed_in = round_ if round_ in took_part else (min(took_part) if took_part and not round_ else None)
    if handed_in is None:
        checker.warnings.append(
            f"{what} has no copy in {carrier.path}: only {site}'s own log shows this release"
        )
        return
    if any(count > 1 for (_, round_acted), count in site_log.acted.items() if round_acted == handed_in):
        checker.warnings.append(
            f"{what} has no copy in {carrier.path}, which lists {site} as a participant of round "
            f"{handed_in}; {site} acted twice on an instruction of that round (retried after a "
            f"restart?), so only {site}'s own log shows this release"
        )
        return
    checker.report(
        carrier.path,
        took_part[handed_in],
        f"{what} is in {site_log.path} but missing here, although this log lists {site} as a "
        f"participant of round {handed_in} (copy dropped)",
        record["seq"],
    )


def note_unsupplied(checker: RecordChecker, states: list[LogState]) -> list[str]:
    """Sites a log names whose own log was not given (their records were seen only as copies)."""
    own = {(state.party, state.run_id) for state in states}
    missing: dict[str, str] = {}
    for state in states:
        for site in sorted(state.named):
            if site != state.party and (site, state.run_id) not in own and site not in missing:
                missing[site] = "the server" if state.party == "server" else str(state.party)
    for site, holder in sorted(missing.items()):
        checker.warnings.append(
            f"{site}: log not supplied; its records were checked only as copied by {holder}"
        )
    parties = {state.party for state in states if state.party}
    if parties and "server" not in parties:
        checker.warnings.append(
            "server: log not supplied; participation and the copies of site records were not"
            " cross-checked (give audit/server.jsonl too)"
        )
    return sorted(missing)


def site_rounds(state: LogState) -> SiteRounds:
    """What a log's own records say about its party's distributed-DP rounds."""
    assert state.party is not None
    rounds = SiteRounds(state.path, state.party)
    for item in state.privacy:
        record = item.record
        payload = record["payload"]
        event = payload.get("event") if isinstance(payload, dict) else None
        if (
            not item.label
            and isinstance(event, dict)
            and event.get("type") == "skellam_sum"
            and isinstance(record.get("round"), int)
        ):
            rounds.plans.setdefault(record["round"], (item.line.number, event))
        if (
            not item.label
            and isinstance(payload, dict)
            and payload.get("mechanism") == "alpha_scalars"
            and isinstance(record.get("round"), int)
        ):
            rounds.alpha_charges.setdefault(record["round"], (item.line.number, payload))
    for line, record in state.survivors:
        payload = record["payload"]
        sites = _survivors_named(payload) if isinstance(payload, dict) else None
        if isinstance(record.get("round"), int) and sites is not None:
            h = payload.get("honest_min")
            rounds.survivors.setdefault(
                record["round"], (line.number, sites, h if isinstance(h, int) else None)
            )
    rounds.unmasked = {
        r for (phase, r), n in state.acted.items() if phase == UNMASK_PHASE and isinstance(r, int) and n
    }
    for line, record in state.reveals:
        if isinstance(record.get("round"), int) and isinstance(record.get("payload"), dict):
            rounds.reveals.setdefault(record["round"], []).append((line.number, record["payload"]))
    for line, record in state.alpha_shares:
        if isinstance(record.get("round"), int) and isinstance(record.get("payload"), dict):
            rounds.alpha_shares.setdefault(record["round"], []).append((line.number, record["payload"]))
    return rounds


def _survivors_named(payload: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The survivors a `secagg_survivors` record confirmed, each as "site@node" where the record names
    the node (so two sites that confirmed the same names under different node ids differ), else as
    its site (logs written before the nodes were logged)."""
    members = payload.get("members")
    if isinstance(members, list) and all(isinstance(m, list) and len(m) == 2 for m in members):
        return tuple(sorted(f"{site}@{node}" for node, site in members))
    sites = payload.get("survivors")
    return tuple(str(s) for s in sites) if isinstance(sites, list) else None
