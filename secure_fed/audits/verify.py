"""`audit verify`: is every log complete, unmodified, correctly signed, and is every ε honest?

Checks, per log: each line is a whole record; its hash matches its content; its signature verifies
with the public key of its party; seq runs 0, 1, 2, … and each prev_hash is the previous hash (so
nothing was deleted, reordered or inserted); every head record matches the count and last hash
before it, and the log ends with one (else it was truncated). Records of other parties embedded in
a log (`site_record`) must be intact, signed by that party, and identical to the party's own log
when that log is verified too. `instruction` records must have their documented shape (payloads.py).
Every privacy record's ε is re-derived from the logged mechanism events with dp_accounting
(composition per (signer, site, population) in log order): RDP within 1% of the logged Opacus RDP
ε, and the logged PRV ε against dp_accounting's PLD.

Across logs, against the server's own account of each round (`secagg_round` participants):
- with DP on in the run_config, a site that took part in a round must have a privacy record of
  that round in some log given (else its release went unaccounted);
- a privacy record in a site's own log must be copied into the server's log when the server lists
  the site as a participant of that round (or, for a record made before training, of any round):
  the site handed it over with that round's reply, so a missing copy was dropped. A record the
  server's log does not account for at all is a warning: a reply lost in transit looks the same.
  So is a missing copy for a round the site acted on twice (its own `instruction` records): a
  round retried after a restart is answered without the records handed over the first time;
- a site the server's log names whose own log was not given is a warning, so that a verdict on
  the server's copies alone never reads as a verdict on the site's log.

Keys: the verifier takes public keys only from the caller (a KEYS directory the officer trusts).
It never uses keys or fingerprints carried inside a log: whoever can rewrite a log could rewrite
those too, so they would prove nothing.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from secure_fed.audits.accounting import EventError, StreamAccountant, prv_matches, rdp_matches
from secure_fed.audits.distributed_checks import (
    REMOVAL_EVENT,
    REVEAL_EVENT,
    SURVIVORS_EVENT,
    UNMASK_PHASE,
    SiteRounds,
    distributed_findings,
    removal_findings,
)
from secure_fed.audits.empirical_bound import check_record as check_empirical_record
from secure_fed.audits.keys import key_fingerprint
from secure_fed.audits.payloads import instruction_problem, record_round, round_sites, run_settings
from secure_fed.audits.privacy import PrivacyEntry, PrivacyPayloadError, parse_privacy
from secure_fed.audits.reader import TORN, Line, read_log
from secure_fed.audits.records import GENESIS_HASH, record_hash, shape_problem, signature_holds
from secure_fed.audits.verdict import EXIT_DROPOUT as EXIT_DROPOUT  # re-exported for callers
from secure_fed.audits.verdict import EXIT_INTERRUPTED as EXIT_INTERRUPTED
from secure_fed.audits.verdict import population_words

# What AuditLog writes: datetime.now(UTC).isoformat(timespec="microseconds"). Anything else in a
# `time` field was not written by the log (and would reach the report's page as text).
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?\+00:00", re.ASCII)


def time_problem(value: str) -> str | None:
    """Why a record's `time` is not the ISO 8601 UTC stamp the log writes, or None."""
    if not _TIME.fullmatch(value):
        return f"time {value[:40]!r} is not an ISO 8601 UTC time (YYYY-MM-DDTHH:MM:SS.ffffff+00:00)"
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return f"time {value!r} is no calendar time"
    return None


@dataclass(frozen=True)
class Problem:
    path: str
    line: int | None
    reason: str
    seq: int | None = None

    def __str__(self) -> str:
        return (
            f"{self.path}:{self.line}: {self.reason}"
            if self.line is not None
            else f"{self.path}: {self.reason}"
        )


@dataclass(frozen=True)
class Rederived:
    """ε of a privacy record as re-derived by dp_accounting (at the record's δ)."""

    rdp: float
    pld: float
    rdp_ok: bool
    prv_ok: bool | None  # None when no PRV ε was logged


@dataclass(frozen=True)
class LogSummary:
    path: str
    party: str | None
    run_id: str | None
    records: int
    privacy_records: int  # own and copied, counted whether or not their signatures verify
    closed: bool  # ends with a valid head record
    dropped_in: int | None = None  # not closed: the round the server's signed log says the site left
    interrupted_by: str | None = None  # not closed: the signal its party's last, signed record names


@dataclass(frozen=True)
class Dropout:
    """A site's log without a head record that the server's signed log explains: the site left the
    run (killed, lost) in `round`, and its log holds nothing of a later round."""

    site: str
    path: str
    round: int
    records: int  # records of the site's log up to where it stops
    evidence: str  # the server's record that says so, in words

    def __str__(self) -> str:
        return (
            f"{self.path}: {self.site} dropped out in round {self.round}: its log stops after "
            f"{self.records} record(s) with no head record, as {self.evidence} says"
        )


@dataclass
class Verification:
    ok: bool
    problems: list[Problem]
    logs: list[LogSummary] = field(default_factory=list)
    # By record hash; embedded copies share their original's hash.
    rederived: dict[str, Rederived] = field(default_factory=dict)
    keys_checked: bool = True
    # Findings that do not make the logs wrong but limit what was checked; they never change `ok`.
    warnings: list[str] = field(default_factory=list)
    # Sites named in a log whose own log was not given: checked only through the copies of others.
    unsupplied: list[str] = field(default_factory=list)
    # empirical_audit records (by hash) → ε̂ re-derived from their logged counts
    empirical: dict[str, float] = field(default_factory=dict)
    # logs that stop without a head record where the server's signed log says their site left
    dropouts: list[Dropout] = field(default_factory=list)
    # logs that end with their party's signed run_aborted naming a stop signal (an interrupted run)
    interruptions: list[Interruption] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Verified, and every log closed: no site dropped out, the run was not interrupted."""
        return self.ok and not self.dropouts and not self.interruptions


@dataclass
class _Privacy:
    line: Line
    record: dict[str, Any]
    label: str  # "" for a record of this log, "embedded site-0 record seq 7: " for a copy


@dataclass(frozen=True)
class Interruption:
    """A log without a head record that ends with its own party's signed `run_aborted` naming a stop
    signal (Ctrl-C, a service manager's SIGTERM), in a run whose server log ends the same way: the
    run was stopped there and may be resumed; nothing after it was cut off."""

    party: str
    path: str
    signal: str
    round: int | None
    records: int

    def __str__(self) -> str:
        where = f" in round {self.round}" if self.round is not None else ""
        return (
            f"{self.path}: {self.party}'s log ends with its signed run_aborted: the run was "
            f"interrupted by {self.signal}{where} ({self.records} record(s), no head record)"
        )


@dataclass
class _LogState:
    path: str
    party: str | None = None
    run_id: str | None = None
    records: dict[int, dict[str, Any]] = field(default_factory=dict)
    privacy: list[_Privacy] = field(default_factory=list)
    embedded: list[tuple[Line, dict[str, Any]]] = field(default_factory=list)
    count: int = 0
    privacy_count: int = 0
    closed: bool = False
    # no head record: (the line to name, why) — a dropout if the server's log explains it
    unfinished: tuple[Line, str] | None = None
    dropped: dict[str, tuple[int, str]] = field(default_factory=dict)  # site → (round, evidence)
    run_configs: list[dict[str, Any]] = field(default_factory=list)
    # secagg_round records: (line, round, sites that took part, every site the record names)
    rounds: list[tuple[Line, int, list[str], set[str]]] = field(default_factory=list)
    named: set[str] = field(default_factory=set)  # sites this log speaks of (rounds, refusals, copies)
    # (phase, round) → how often this log's party acted on that instruction (2+: a retry)
    acted: Counter[tuple[str, int | None]] = field(default_factory=Counter)
    # this log's own signed survivor sets (distributed DP's consistency step)
    survivors: list[tuple[Line, dict[str, Any]]] = field(default_factory=list)
    # this log's own reveals of removable noise layers, and any server records of their removal
    reveals: list[tuple[Line, dict[str, Any]]] = field(default_factory=list)
    removals: list[tuple[Line, dict[str, Any]]] = field(default_factory=list)

    def participated(self, site: str) -> dict[int, Line]:
        """Rounds in which this log says `site` took part, with the line that says so first."""
        found: dict[int, Line] = {}
        for line, round_, participants, _ in self.rounds:
            if site in participants:
                found.setdefault(round_, line)
        return found


class _Checker:
    def __init__(self, public_keys: Mapping[str, Ed25519PublicKey], unkeyed: bool = False) -> None:
        self.keys = public_keys
        # No keys given at all: signatures go unchecked (said once, by the verdict), and everything
        # else is checked as if they held, so that a copy is not called dropped for want of a key.
        self.unkeyed = unkeyed
        self.problems: list[Problem] = []
        self.warnings: list[str] = []
        self._missing_key_reported: set[tuple[str, str]] = set()
        self._signed: dict[tuple[str, str], list[int]] = {}  # (log, party) → [checked, failed]
        self._mismatch: dict[tuple[str, str], tuple[int, str]] = {}  # → (problem index, label)
        self.logged_fingerprints: dict[str, str] = {}
        self.wrong_keys: set[str] = set()  # parties none of whose signatures verify with the key given
        self.interruptions: list[Interruption] = []

    def report(self, path: str, line: Line | None, reason: str, seq: int | None = None) -> None:
        self.problems.append(Problem(path, line.number if line else None, reason, seq))

    def signature_problem(self, path: str, line: Line, record: dict[str, Any], label: str = "") -> bool:
        """Report a bad hash or signature of `record`; True when one was found. A signature that
        could not be checked (no key) is not a bad one: the record still takes part in the
        cross-log checks by its hash, and the missing key is named once per log and party."""
        if record_hash(record) != record["hash"]:
            self.report(path, line, f"{label}hash mismatch (record was modified)", record["seq"])
            return True
        party = record["party"]
        key = self.keys.get(party)
        if key is None:
            if not self.unkeyed and (path, party) not in self._missing_key_reported:
                self._missing_key_reported.add((path, party))
                self.report(path, line, f"{label}no public key for party {party!r}: signatures not checked")
            return False
        checked = self._signed.setdefault((path, party), [0, 0])
        checked[0] += 1
        if not signature_holds(record["hash"], record["signature"], key):
            # One problem per (log, party), naming the first bad record; the count and the
            # fingerprints are filled in at the end (a wrong key folder fails every record alike).
            checked[1] += 1
            if checked[1] == 1:
                self._mismatch[(path, party)] = (len(self.problems), label)
                self.report(path, line, "", record["seq"])
            return True
        return False

    def note_fingerprints(self, record: dict[str, Any]) -> None:
        """What a key_fingerprints record says (for the message only: never trusted as a key)."""
        signing = record["payload"].get("signing") if isinstance(record["payload"], dict) else None
        if isinstance(signing, dict):
            self.logged_fingerprints.update({p: fp for p, fp in signing.items() if isinstance(fp, str)})

    def finish_mismatches(self) -> None:
        """Word each (log, signer) mismatch once; a signer whose own log fails with the key given is
        named there only, not again for each copy of its records in other logs."""
        drop: set[int] = set()
        own_first = sorted(self._mismatch.items(), key=lambda item: bool(item[1][1]))
        for (path, party), (index, label) in own_first:
            total, bad = self._signed[(path, party)]
            if label and bad == total and party in self.wrong_keys:
                drop.add(index)
                continue
            if bad == total:
                self.wrong_keys.add(party)
            given = key_fingerprint(self.keys[party])[:16]
            logged = self.logged_fingerprints.get(party)
            if bad == total:
                said = (
                    f"the run's key_fingerprints record says {logged[:16]}…"
                    if logged and logged != key_fingerprint(self.keys[party])
                    else "no fingerprint of it in the logs given"
                    if not logged
                    else "the same as the run's key_fingerprints record"
                )
                reason = (
                    f"{label}key mismatch: none of {party}'s {total} signature(s) verify with the key given"
                    f" (sha256 {given}…; {said}); pass this run's public keys"
                    " (`secure-fed keys export-public --keys KEYS --out PUBDIR`)"
                )
            else:  # some records only: those were changed or re-signed, not the key folder wrong
                reason = f"{label}signature does not verify with {party}'s key"
                if bad > 1:
                    reason += f" ({bad} of {total} records, the first here): records modified or re-signed"
            old = self.problems[index]
            self.problems[index] = Problem(old.path, old.line, reason, old.seq)
        self.problems = [p for i, p in enumerate(self.problems) if i not in drop]

    def check_log(self, path: str, lines: list[Line]) -> _LogState:
        state = _LogState(path)
        expected_seq, prev_hash = 0, GENESIS_HASH
        last_record: tuple[Line, dict[str, Any]] | None = None
        last_time: datetime | None = None
        if not lines:
            self.report(path, None, "empty log (truncated: no head record)")
            return state
        for line in lines:
            if line.record is None:
                if line.error != TORN:  # a torn tail is judged with the missing head record below
                    self.report(path, line, line.error or "unreadable line")
                continue
            record = line.record
            shape = shape_problem(record)
            if shape:
                self.report(path, line, f"not an audit record: {shape}")
                continue
            state.count += 1
            if state.party is None:
                state.party, state.run_id = record["party"], record["run_id"]
            self.signature_problem(path, line, record)
            seq = record["seq"]
            bad_time = time_problem(record["time"])
            if bad_time:
                self.report(path, line, bad_time, seq)
            else:
                # A log is written in order: a time before its predecessor's was set by hand.
                when = datetime.fromisoformat(record["time"])
                if last_time is not None and when < last_time:
                    self.report(
                        path,
                        line,
                        f"time {record['time']} is earlier than the record before it "
                        f"({last_time.isoformat()})",
                        seq,
                    )
                last_time = when
            if record["party"] != state.party:
                self.report(
                    path,
                    line,
                    f"party {record['party']!r} in a log of {state.party!r} (record inserted)",
                    seq,
                )
            elif record["run_id"] != state.run_id:
                self.report(
                    path,
                    line,
                    f"run_id {record['run_id']!r} differs from {state.run_id!r} (record inserted)",
                    seq,
                )
            if seq != expected_seq:
                self.report(
                    path, line, f"seq {seq} expected {expected_seq} (record deleted or reordered)", seq
                )
            elif record["prev_hash"] != prev_hash:
                self.report(
                    path,
                    line,
                    "prev_hash does not match the previous record (record inserted or replaced)",
                    seq,
                )
            if record["event"] == "head":
                payload = record["payload"]
                if payload.get("count") != seq or payload.get("last_hash") != prev_hash:
                    self.report(
                        path,
                        line,
                        f"head record does not match the log (count {payload.get('count')!r}, "
                        f"expected {seq}; or last hash differs)",
                        seq,
                    )
            elif record["event"] == "privacy":
                state.privacy_count += 1
                state.privacy.append(_Privacy(line, record, ""))
            elif record["event"] == "site_record":
                self.check_embedded(path, line, record, state)
            else:
                self.note_event(path, line, record, state)
            state.records.setdefault(seq, record)
            # Resynchronise on this record so one deletion is one problem, not a cascade.
            expected_seq, prev_hash = seq + 1, record["hash"]
            last_record = (line, record)
        tail_torn = lines[-1].error == TORN
        if last_record is not None and last_record[1]["event"] == "head" and not tail_torn:
            state.closed = True
        else:
            # Judged once every log is read: the server's log may say the site dropped out here.
            state.unfinished = (
                lines[-1],
                TORN if tail_torn else "truncated: no head record (log cut short or not closed cleanly)",
            )
        return state

    def check_embedded(self, path: str, line: Line, record: dict[str, Any], state: _LogState) -> None:
        inner = record["payload"]
        shape = shape_problem(inner)
        if shape:
            self.report(path, line, f"embedded record is malformed: {shape}", record["seq"])
            return
        label = f"embedded {inner['party']} record seq {inner['seq']}: "
        if inner["event"] == "privacy":
            state.privacy_count += 1
        bad_time = time_problem(inner["time"])
        if bad_time:
            self.report(path, line, f"{label}{bad_time}", record["seq"])
        if self.signature_problem(path, line, inner, label):
            return
        if inner["run_id"] != record["run_id"]:
            self.report(path, line, f"{label}run_id {inner['run_id']!r} is not this run's", record["seq"])
        earlier = [seen for _, seen in state.embedded if seen["party"] == inner["party"]]
        if earlier and earlier[-1]["seq"] >= inner["seq"]:
            self.report(
                path,
                line,
                f"{label}copied after seq {earlier[-1]['seq']} (copies duplicated or reordered)",
                record["seq"],
            )
        state.embedded.append((line, inner))
        state.named.add(inner["party"])
        if inner["event"] == "privacy":
            state.privacy.append(_Privacy(line, inner, label))
        elif inner["event"] == "instruction":
            self.check_instruction(path, line, inner, label)

    def note_event(self, path: str, line: Line, record: dict[str, Any], state: _LogState) -> None:
        """Keep what the cross-log checks need from the run's own events; shape-check instructions."""
        event, payload = record["event"], record["payload"]
        if event == "run_config":
            state.run_configs.append(payload)
        elif event == "secagg_round":
            round_ = record_round(record)
            if round_ is not None:
                participants, named = round_sites(payload)
                state.rounds.append((line, round_, participants, named))
                state.named |= named
        if event in ("secagg_round", "round_skipped") and isinstance(record["round"], int):
            dropped = payload.get("dropped")
            for site in dropped if isinstance(dropped, list) else []:
                if isinstance(site, str) and site not in state.dropped:
                    what = "skipped round" if event == "round_skipped" else "secure-aggregation round"
                    state.dropped[site] = (
                        record["round"],
                        f"the server's {what} record of round {record['round']}",
                    )
        elif event == SURVIVORS_EVENT and record["party"] == state.party:
            state.survivors.append((line, record))
        elif event == REVEAL_EVENT and record["party"] == state.party:
            state.reveals.append((line, record))
        elif event == REMOVAL_EVENT:
            state.removals.append((line, record))
        elif event == "budget_refusal" and isinstance(payload.get("site"), str):
            state.named.add(payload["site"])
        elif event == "instruction":
            if self.check_instruction(path, line, record, "") and payload["outcome"] == "acted":
                state.acted[(payload["phase"], payload["round"])] += 1

    def check_instruction(self, path: str, line: Line, record: dict[str, Any], label: str) -> bool:
        """Report a malformed instruction record; True when it is well formed."""
        payload = record["payload"]
        problem = instruction_problem(payload)
        if problem is None and payload["round"] != record["round"]:
            problem = f"round {payload['round']!r} differs from the record's round {record['round']!r}"
        if problem:
            self.report(path, line, f"{label}instruction record malformed: {problem}", record["seq"])
        return problem is None

    def check_copies(self, states: list[_LogState]) -> None:
        """Each embedded record must equal the record of the same seq in its party's own log."""
        own = {(state.party, state.run_id): state for state in states if state.party is not None}
        for state in states:
            for line, inner in state.embedded:
                source = own.get((inner["party"], inner["run_id"]))
                if source is None or source is state:
                    continue
                original = source.records.get(inner["seq"])
                if original is None or original["hash"] != inner["hash"]:
                    self.report(
                        state.path,
                        line,
                        f"embedded {inner['party']} record seq {inner['seq']} differs from {source.path}",
                        inner["seq"],
                    )

    def check_participation(self, states: list[_LogState]) -> None:
        """With DP on, every site a round lists as taking part must have logged that round's release."""
        configs = [run_settings(config) for state in states for config in state.run_configs]
        if not any(settings.dp for settings in configs):
            return
        logged = {
            (item.record["party"], record_round(item.record)) for state in states for item in state.privacy
        }
        for state in states:
            for line, round_, participants, _ in state.rounds:
                for site in participants:
                    if (site, round_) not in logged:
                        self.report(
                            state.path,
                            line,
                            f"round {round_}: {site} took part, but no log holds a privacy record of "
                            f"{site} for round {round_} (DP is on in the run_config)",
                        )

    def check_distributed(self, states: list[_LogState]) -> None:
        """Under distributed DP: one plan and one signed survivor set of at least h sites per round,
        across the sites' own logs (`distributed_checks`), so a logged ε is an upper bound."""
        removals = [
            (state.path, line.number, record["round"], record["payload"].get("removed"))
            for state in states
            for line, record in state.removals
            if isinstance(record.get("round"), int) and isinstance(record.get("payload"), dict)
        ]
        sites = [_site_rounds(state) for state in states if state.party]
        for finding in distributed_findings(sites) + removal_findings(sites, removals):
            self.problems.append(Problem(finding.path, finding.line, finding.reason))

    def check_handed_over(self, states: list[_LogState]) -> None:
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
                    self.missing_copy(carrier, site_log, record, took_part)

    def missing_copy(
        self, carrier: _LogState, site_log: _LogState, record: dict[str, Any], took_part: dict[int, Line]
    ) -> None:
        site, round_ = record["party"], record_round(record)
        what = f"{site} record seq {record['seq']} (privacy, round {round_})"
        # A release made before training (round 0, e.g. the GMM histogram) goes out with the first
        # round the site takes part in.
        handed_in = round_ if round_ in took_part else (min(took_part) if took_part and not round_ else None)
        if handed_in is None:
            self.warnings.append(
                f"{what} has no copy in {carrier.path}: only {site}'s own log shows this release"
            )
            return
        if any(count > 1 for (_, round_acted), count in site_log.acted.items() if round_acted == handed_in):
            self.warnings.append(
                f"{what} has no copy in {carrier.path}, which lists {site} as a participant of round "
                f"{handed_in}; {site} acted twice on an instruction of that round (retried after a "
                f"restart?), so only {site}'s own log shows this release"
            )
            return
        self.report(
            carrier.path,
            took_part[handed_in],
            f"{what} is in {site_log.path} but missing here, although this log lists {site} as a "
            f"participant of round {handed_in} (copy dropped)",
            record["seq"],
        )

    def note_unsupplied(self, states: list[_LogState]) -> list[str]:
        """Sites a log names whose own log was not given (their records were seen only as copies)."""
        own = {(state.party, state.run_id) for state in states}
        missing: dict[str, str] = {}
        for state in states:
            for site in sorted(state.named):
                if site != state.party and (site, state.run_id) not in own and site not in missing:
                    missing[site] = "the server" if state.party == "server" else str(state.party)
        for site, holder in sorted(missing.items()):
            self.warnings.append(
                f"{site}: log not supplied; its records were checked only as copied by {holder}"
            )
        parties = {state.party for state in states if state.party}
        if parties and "server" not in parties:
            self.warnings.append(
                "server: log not supplied; participation and the copies of site records were not"
                " cross-checked (give audit/server.jsonl too)"
            )
        return sorted(missing)

    def judge_unfinished(self, states: list[_LogState]) -> list[Dropout]:
        """A log without a head record is a problem (cut short), unless the server's log, itself
        closed and intact, says in a signed record that the log's site left the run in a round
        and the site's log holds nothing of a later round: then it is that site's dropout."""
        problem_paths = {problem.path for problem in self.problems}
        servers = [
            state
            for state in states
            if state.party == "server" and state.closed and state.path not in problem_paths
        ]
        # A stop signal ends the run for every party, so a site's signed stop counts only when the
        # server's intact log of that run ends with one too: a log cut back to an earlier run_aborted
        # (hiding the rounds of a resume) sits beside a server log that went on and closed.
        stopped = {
            state.run_id
            for state in states
            if state.party == "server" and state.path not in problem_paths and _signal_stop(state)
        }
        # ...and a server's log cut back to a stop it signed before a resume sits beside logs of the
        # same run that go on past it: that stop did not end the run
        for state in states:
            if state.party != "server" or state.run_id not in stopped:
                continue
            later = _outlived_by(state, states)
            if later is not None:
                stopped.discard(state.run_id)
                problem_paths.add(state.path)
                self.report(
                    state.path,
                    state.unfinished[0] if state.unfinished else None,
                    f"the log stops at its signed run_aborted, but {later}: it was cut back to a stop "
                    "the run resumed from",
                )
        # A resumable stop of the server's own (its machinery failed, sites' workers were lost) is
        # signed in its log alone: the sites were told nothing. A site's log of that run that holds
        # nothing after the stop's round and no end of its own stopped there with the run.
        resumable = {
            state.run_id: stop
            for state in states
            if state.party == "server"
            and state.path not in problem_paths
            and (stop := _signal_stop(state)) is not None
            and _resumable(state)
        }
        dropouts = []
        for state in states:
            if state.unfinished is None:
                continue
            stop = _signal_stop(state)
            if stop is None and state.path not in problem_paths and _stopped_with(state, resumable):
                stop = resumable[state.run_id]
            if (
                stop is not None
                and state.path not in problem_paths
                and state.run_id in stopped
                and (self.unkeyed or {"server", str(state.party)} <= set(self.keys))
                and not self.wrong_keys
            ):
                signal, round_ = stop
                self.interruptions.append(
                    Interruption(str(state.party), state.path, signal, round_, state.count)
                )
                continue
            line, why = state.unfinished
            said = next(
                (
                    server.dropped[state.party]
                    for server in servers
                    if server.run_id == state.run_id and state.party in server.dropped
                ),
                None,
            )
            later = [
                r["round"]
                for r in state.records.values()
                if isinstance(r["round"], int) and said and r["round"] > said[0]
            ]
            # a site that left records no end: a log that holds one was cut after the run went on.
            # Its own signed stop as its last record is how it left (its node was stopped mid-run).
            own_stop = state.records[max(state.records)] if stop is not None else None
            ended = any(
                r["event"] in ("run_end", "run_aborted")
                or (r["event"] == "instruction" and r["payload"].get("phase") in ("evaluate", "finish"))
                for r in state.records.values()
                if r is not own_stop
            )
            unsigned = "server" not in self.keys and not self.unkeyed
            if said is None or unsigned or self.wrong_keys or later or ended:
                detail = (
                    f"; it holds records of round {max(later)}, after it left in round {said[0]}"
                    if said and later
                    else ""
                )
                self.report(state.path, line, why + detail)
                continue
            dropouts.append(Dropout(str(state.party), state.path, said[0], state.count, said[1]))
        return dropouts

    def rederive(self, state: _LogState, rederived: dict[str, Rederived]) -> None:
        streams: dict[tuple[str, str, str], StreamAccountant] = defaultdict(StreamAccountant)
        for item in state.privacy:
            record, label, seq = item.record, item.label, item.record["seq"]
            try:
                entry = parse_privacy(record["payload"])
                stream = streams[(record["party"], entry.site, entry.population)]
                stream.compose(entry.event)
            except (PrivacyPayloadError, EventError) as err:
                self.report(state.path, item.line, f"{label}privacy record unreadable: {err}", seq)
                continue
            rdp, pld = stream.epsilon_rdp(entry.delta), stream.epsilon_pld(entry.delta)
            rdp_ok = rdp_matches(entry.epsilon_rdp, rdp)
            prv_ok = None if entry.epsilon_prv is None else prv_matches(entry.epsilon_prv, pld)
            rederived.setdefault(record["hash"], Rederived(rdp, pld, rdp_ok, prv_ok))
            if not rdp_ok:
                self.report(
                    state.path,
                    item.line,
                    f"{label}RDP epsilon {_fmt(entry.epsilon_rdp)} does not match mechanism parameters "
                    f"(re-derived {_fmt(rdp)} with RDP; {_whose(entry)}, δ={entry.delta:g})",
                    seq,
                )
            if prv_ok is False:
                self.report(
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


def _no_record(lines: list[Line]) -> bool:
    """No line of the file is an audit record: another kind of file, not a damaged log. A lone torn
    line is a log cut in its first write, judged as one."""
    if not lines or (len(lines) == 1 and lines[0].error == TORN):
        return False
    return not any(line.record is not None and not shape_problem(line.record) for line in lines)


def verify_logs(
    paths: Sequence[Path | str], public_keys: Mapping[str, Ed25519PublicKey] | None
) -> Verification:
    """Verify the logs together (copies across logs are cross-checked). `public_keys=None` checks
    everything but signatures, and the result is then never ok."""
    checker = _Checker(public_keys or {}, unkeyed=public_keys is None)
    states: list[_LogState] = []
    for raw in paths:
        path = str(raw)
        try:
            lines = read_log(path)
        except IsADirectoryError:
            # the folder `secure-fed run` prints is the natural thing to pass; its logs sit under audit/
            audit = Path(path) / "audit"
            logs = audit if audit.is_dir() else Path(path)
            checker.report(path, None, f"a folder, not a log: pass its logs, {logs}/*.jsonl")
            continue
        except OSError as err:
            checker.report(path, None, f"cannot read: {err.strerror or err}")
            continue
        if _no_record(lines):
            # one line for a file given by mistake (a README, a config), not one per line of it
            checker.report(
                path,
                None,
                f"not an audit log: none of its {len(lines)} lines is an audit record; pass the run's "
                "audit/*.jsonl",
            )
            continue
        states.append(checker.check_log(path, lines))
    for state in states:
        for record in state.records.values():
            if record.get("event") == "key_fingerprints":
                checker.note_fingerprints(record)
    checker.finish_mismatches()
    if checker.wrong_keys:
        # Copies and participation rest on signatures: with a wrong key each would fail again.
        checker.warnings.append(
            "cross-log checks (copies, participation) skipped: the keys given do not match "
            + ", ".join(sorted(checker.wrong_keys))
        )
    else:
        checker.check_copies(states)
        checker.check_participation(states)
        checker.check_handed_over(states)
        checker.check_distributed(states)
    dropouts = checker.judge_unfinished(states)
    unsupplied = checker.note_unsupplied(states)
    rederived: dict[str, Rederived] = {}
    for state in states:
        checker.rederive(state, rederived)
    empirical = _check_empirical_audits(checker, states)
    order = {str(path): index for index, path in enumerate(paths)}
    problems = sorted(checker.problems, key=lambda p: (order.get(p.path, 0), p.line or 0))
    dropped_in = {dropout.path: dropout.round for dropout in dropouts}
    stopped_by = {stop.path: stop.signal for stop in checker.interruptions}
    logs = [
        LogSummary(
            s.path,
            s.party,
            s.run_id,
            s.count,
            s.privacy_count,
            s.closed,
            dropped_in.get(s.path),
            stopped_by.get(s.path),
        )
        for s in states
    ]
    return Verification(
        not problems and public_keys is not None,
        problems,
        logs,
        rederived,
        keys_checked=public_keys is not None,
        warnings=checker.warnings,
        unsupplied=unsupplied,
        empirical=empirical,
        dropouts=dropouts,
        interruptions=checker.interruptions,
    )


def _site_rounds(state: _LogState) -> SiteRounds:
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


def _last_abort(state: _LogState) -> dict[str, Any] | None:
    """The log's last record when it is its party's `run_aborted` and the log has no head record."""
    if state.unfinished is None or not state.records:
        return None
    line, _ = state.unfinished
    last = state.records[max(state.records)]
    return last if line.record is last and last["event"] == "run_aborted" else None


def _resumable(state: _LogState) -> bool:
    last = _last_abort(state)
    return last is not None and last["payload"].get("resumable") is True


# A resumable stop the server signed, worded from the `code` it signed with it: a code of lost site
# workers (the server's `SitesLost`: a site's worker process ended and the run cannot go on without
# it) or any other, a failure of the server's own code (`MachineryFailed`). The codes are the
# failure kinds' (secure_fed/failures.py; a test keeps the two the same), kept here as plain strings
# so the verifier reads a log without the code that ran it.
_LOST_WORKERS = {
    "out_of_memory": "lost site workers (ended by the out-of-memory monitor)",
    "worker_killed": "lost site workers (their processes were killed)",
    "worker_crashed": "lost site workers (their processes crashed)",
    "workers_lost": "lost site workers",
}
_SERVER_CODE = "a failure of the server's own code"


def _signal_stop_words(payload: Mapping[str, Any]) -> str:
    """What stopped a run whose server signed a resumable `run_aborted` with no signal, by its `code`."""
    return _LOST_WORKERS.get(str(payload.get("code")), _SERVER_CODE)


def _signal_stop(state: _LogState) -> tuple[str, int | None] | None:
    """(what stopped it, round) when the log's last line is its party's `run_aborted` naming a stop
    signal, or, in the server's log, a resumable stop of its own (`_signal_stop_words`: lost site
    workers, a failure of the server's own code)."""
    last = _last_abort(state)
    if last is None:
        return None
    payload = last["payload"]
    signal, round_ = payload.get("signal"), payload.get("round")
    if (not isinstance(signal, str) or not signal) and payload.get("resumable") is True:
        signal = _signal_stop_words(payload)
    if not isinstance(signal, str) or not signal:
        return None
    return signal, round_ if isinstance(round_, int) and not isinstance(round_, bool) else None


def _outlived_by(server: _LogState, states: list[_LogState]) -> str | None:
    """How a log of the server's run goes on past the stop its log ends with, if one does: it holds a
    later round. (A site's log closed after a stop in the last round is not enough: a site may have
    closed on `finish` before the server's own stop.)"""
    stop = _signal_stop(server)
    round_ = stop[1] if stop else None
    for other in states:
        if other is server or other.run_id != server.run_id:
            continue
        rounds = [r["round"] for r in other.records.values() if isinstance(r["round"], int)]
        if round_ is not None and rounds and max(rounds) > round_:
            return f"{other.party}'s log of the same run holds round {max(rounds)}"
    return None


def _stopped_with(state: _LogState, resumable: dict[str | None, tuple[str, int | None]]) -> bool:
    """A site's log that stops, with no end of its own, in a run whose server signed a resumable
    stop, and holds no record of a round after the stop's."""
    if state.party == "server" or state.run_id not in resumable:
        return False
    round_ = resumable[state.run_id][1]
    for record in state.records.values():
        if record["event"] in ("run_end", "run_aborted"):
            return False
        if round_ is not None and isinstance(record["round"], int) and record["round"] > round_:
            return False
    return True


def _check_empirical_audits(checker: _Checker, states: list[_LogState]) -> dict[str, float]:
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


# `audit verify` / `audit report` exit codes (secure_fed/audits/verdict.py words them): 0 every log
# verifies and is closed; 1 a problem (a record changed, missing, unsigned, a wrong ε, a log cut
# short) or no keys given; 3 every record verifies but a site's log stops where the server's signed
# log says that site left the run (a dropout); 4 every record verifies but the run was interrupted
# by a signal (each log ends with its signed run_aborted).


def problem_line(problem: Problem) -> str:
    """A problem named by the log's file name, not the folder it was read from (a host detail)."""
    where = Path(problem.path).name + (f":{problem.line}" if problem.line is not None else "")
    return f"{where}: {problem.reason}"


def verification_json(verification: Verification | None) -> dict[str, Any]:
    """What the report keeps of a verification: JSON-ready, and what `verdict` reads."""
    if verification is None:
        return {
            "ok": False,
            "ran": False,
            "keys_checked": False,
            "problems": [],
            "first_problem": None,
            "warnings": [],
            "unsupplied": [],
            "rederived": 0,
        }
    return {
        "ok": verification.ok,
        "ran": True,
        "complete": verification.complete,
        "dropouts": [asdict(dropout) for dropout in verification.dropouts],
        "interruptions": [asdict(stop) for stop in verification.interruptions],
        "keys_checked": verification.keys_checked,
        "problems": [str(problem) for problem in verification.problems],
        "first_problem": problem_line(verification.problems[0]) if verification.problems else None,
        "warnings": list(verification.warnings),
        "unsupplied": list(verification.unsupplied),
        "logs": [asdict(log) for log in verification.logs],
        "rederived": len(verification.rederived),
    }
