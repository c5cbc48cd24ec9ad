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

from collections.abc import Mapping, Sequence
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from secure_fed.audits.reader import TORN, Line, read_log
from secure_fed.audits.records import shape_problem
from secure_fed.verifier.verdict import EXIT_DROPOUT as EXIT_DROPOUT  # re-exported for callers
from secure_fed.verifier.verdict import EXIT_INTERRUPTED as EXIT_INTERRUPTED
from secure_fed.verifier.verify_crosslog import (
    check_copies,
    check_distributed,
    check_handed_over,
    check_participation,
    note_unsupplied,
)
from secure_fed.verifier.verify_epsilon import check_empirical_audits, rederive
from secure_fed.verifier.verify_records import LogState, RecordChecker
from secure_fed.verifier.verify_results import Dropout as Dropout  # the findings: importable from here too
from secure_fed.verifier.verify_results import Interruption as Interruption
from secure_fed.verifier.verify_results import LogSummary, Rederived, Verification
from secure_fed.verifier.verify_results import Problem as Problem
from secure_fed.verifier.verify_results import problem_line as problem_line
from secure_fed.verifier.verify_results import time_problem as time_problem
from secure_fed.verifier.verify_results import verification_json as verification_json
from secure_fed.verifier.verify_stops import _LOST_WORKERS as _LOST_WORKERS
from secure_fed.verifier.verify_stops import _signal_stop_words as _signal_stop_words
from secure_fed.verifier.verify_stops import judge_unfinished


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
    checker = RecordChecker(public_keys or {}, unkeyed=public_keys is None)
    states: list[LogState] = []
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
        check_copies(checker, states)
        check_participation(checker, states)
        check_handed_over(checker, states)
        check_distributed(checker, states)
    dropouts = judge_unfinished(checker, states)
    unsupplied = note_unsupplied(checker, states)
    rederived: dict[str, Rederived] = {}
    for state in states:
        rederive(checker, state, rederived)
    empirical = check_empirical_audits(checker, states)
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
