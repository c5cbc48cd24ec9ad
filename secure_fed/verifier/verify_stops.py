"""`audit verify`'s reading of a log without a head record: cut short, a site's dropout the
server's signed log explains, or a run stopped (a signal, or a resumable stop the server signed)
and so interrupted, not truncated."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from secure_fed.verifier.verify_records import LogState, RecordChecker
from secure_fed.verifier.verify_results import Dropout, Interruption


def judge_unfinished(checker: RecordChecker, states: list[LogState]) -> list[Dropout]:
    """A log without a head record is a problem (cut short), unless the server's log, itself
    closed and intact, says in a signed record that the log's site left the run in a round
    and the site's log holds nothing of a later round: then it is that site's dropout."""
    problem_paths = {problem.path for problem in checker.problems}
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
            checker.report(
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
            and (checker.unkeyed or {"server", str(state.party)} <= set(checker.keys))
            and not checker.wrong_keys
        ):
            signal, round_ = stop
            checker.interruptions.append(
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
        unsigned = "server" not in checker.keys and not checker.unkeyed
        if said is None or unsigned or checker.wrong_keys or later or ended:
            detail = (
                f"; it holds records of round {max(later)}, after it left in round {said[0]}"
                if said and later
                else ""
            )
            checker.report(state.path, line, why + detail)
            continue
        dropouts.append(Dropout(str(state.party), state.path, said[0], state.count, said[1]))
    return dropouts


def _last_abort(state: LogState) -> dict[str, Any] | None:
    """The log's last record when it is its party's `run_aborted` and the log has no head record."""
    if state.unfinished is None or not state.records:
        return None
    line, _ = state.unfinished
    last = state.records[max(state.records)]
    return last if line.record is last and last["event"] == "run_aborted" else None


def _resumable(state: LogState) -> bool:
    last = _last_abort(state)
    return last is not None and last["payload"].get("resumable") is True


# A resumable stop the server signed, worded from the `code` it signed with it: a code of lost site
# workers (the server's `SitesLost`: a site's worker process ended and the run cannot go on without
# it) or any other, a failure of the server's own code (`MachineryFailed`). The codes are the
# failure kinds' (secure_fed/protocol/failures.py; a test keeps the two the same), kept here as plain strings
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


def _signal_stop(state: LogState) -> tuple[str, int | None] | None:
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


def _outlived_by(server: LogState, states: list[LogState]) -> str | None:
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


def _stopped_with(state: LogState, resumable: dict[str | None, tuple[str, int | None]]) -> bool:
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
