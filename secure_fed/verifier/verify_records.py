"""`audit verify`'s reading of one log: each line a whole record, its hash and signature, seq and
prev_hash chained from the genesis hash, times in order, head records matching the log, embedded
copies intact; and what the cross-log checks need from it (`LogState`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from secure_fed.audits.keys import key_fingerprint
from secure_fed.audits.payloads import instruction_problem, record_round, round_sites
from secure_fed.audits.reader import TORN, Line
from secure_fed.audits.records import GENESIS_HASH, record_hash, shape_problem, signature_holds
from secure_fed.verifier.alpha_shares import ALPHA_SHARE_EVENT
from secure_fed.verifier.distributed_checks import REMOVAL_EVENT, REVEAL_EVENT, SURVIVORS_EVENT
from secure_fed.verifier.verify_results import Interruption, Problem, time_problem


@dataclass
class PrivacyItem:
    line: Line
    record: dict[str, Any]
    label: str  # "" for a record of this log, "embedded site-0 record seq 7: " for a copy


@dataclass
class LogState:
    path: str
    party: str | None = None
    run_id: str | None = None
    records: dict[int, dict[str, Any]] = field(default_factory=dict)
    privacy: list[PrivacyItem] = field(default_factory=list)
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
    # this log's own records of the α noise shares it drew (distributed DP with CKKS)
    alpha_shares: list[tuple[Line, dict[str, Any]]] = field(default_factory=list)

    def participated(self, site: str) -> dict[int, Line]:
        """Rounds in which this log says `site` took part, with the line that says so first."""
        found: dict[int, Line] = {}
        for line, round_, participants, _ in self.rounds:
            if site in participants:
                found.setdefault(round_, line)
        return found


class RecordChecker:
    """Reads each log on its own and holds every finding: the checks across logs, of stops and of ε
    (verify_crosslog, verify_stops, verify_epsilon) report through it too."""

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

    def check_log(self, path: str, lines: list[Line]) -> LogState:
        state = LogState(path)
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
                state.privacy.append(PrivacyItem(line, record, ""))
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

    def check_embedded(self, path: str, line: Line, record: dict[str, Any], state: LogState) -> None:
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
            state.privacy.append(PrivacyItem(line, inner, label))
        elif inner["event"] == "instruction":
            self.check_instruction(path, line, inner, label)

    def note_event(self, path: str, line: Line, record: dict[str, Any], state: LogState) -> None:
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
        elif event == ALPHA_SHARE_EVENT and record["party"] == state.party:
            state.alpha_shares.append((line, record))
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
