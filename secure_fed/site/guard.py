"""What a site has already done in this run, so that no server can make it release twice.

The policy (policy.py) says what a site does at all; the guard says what it will still do in this
run: α scalars only for a training round it admitted, once per round; the test split scored once,
when training is over; nothing after its run finished. It lives in the site's private folder
(atomic JSON) because Flower's deployment runtime runs every message in a fresh process, and
because the server can neither read nor reset it there (unlike anything the server sends back).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from secure_fed.dp.private_files import atomic_write_bytes


class Refusal(Exception):
    """A server instruction the site will not act on: `code` goes to the server, nothing else."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class SiteFault(Exception):
    """The site's own setup failed a phase (its privacy accounting, its ledger), not the server's
    request: the server is told the site could not complete it, never that it sent a bad request."""


def request_digest(phase: str, request: Mapping[str, Any]) -> str:
    """SHA-256 over the phase and every parameter (arrays by dtype, shape and bytes), key order free."""
    h = hashlib.sha256(phase.encode())
    for key in sorted(request):
        value = request[key]
        h.update(b"\x00" + key.encode() + b"\x00")
        if isinstance(value, np.ndarray):
            array = np.ascontiguousarray(value)
            h.update(f"{array.dtype.str}{array.shape}".encode() + array.tobytes())
        elif isinstance(value, bytes):
            h.update(b"b" + value)
        else:
            h.update(json.dumps(value, sort_keys=True, default=repr).encode())
    return h.hexdigest()


@dataclass
class SiteGuard:
    path: Path
    run_id: str
    last_round: int = 0  # highest training round the server asked for, admitted or declined
    trained: list[int] = field(default_factory=list)  # rounds whose update this site released
    alpha: dict[str, str] = field(default_factory=dict)  # round → digest of the request answered
    evaluated: bool = False
    # a deployed site's last training message acted on: {"round", "sha256"} of the global it carried,
    # the only weights that site scores its test split with (the vector is kept beside this file)
    trained_from: dict[str, Any] = field(default_factory=dict)
    finished: str | None = None  # why training is over for this site ("" = the last round was done)
    # protocol records that must outlive the protocol state (updates masked, rounds encrypted):
    # Flower keeps that state in memory only, so a restarted node would otherwise forget them
    marks: dict[str, list[Any]] = field(default_factory=dict)
    # {"method", "rounds"} as the run's first message found them: they size the site's DP plan, so
    # a later message (a `hello` announcing others) cannot move the site to another plan mid-run
    run: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path, run_id: str) -> SiteGuard:
        if path.exists():
            saved = json.loads(path.read_text())
            if saved.get("run_id") == run_id:
                saved.pop("path", None)
                return cls(path=path, **saved)
        return cls(path=path, run_id=run_id)

    def save(self) -> None:
        state = {k: v for k, v in asdict(self).items() if k != "path"}
        atomic_write_bytes(self.path, json.dumps(state).encode())

    def restore_marks(self, state: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
        """`state` with every remembered mark put back (a union: a mark is never forgotten)."""
        out = dict(state)
        for key in keys:
            remembered = self.marks.get(key, [])
            current = list(out.get(key, []))
            if remembered or key in out:
                out[key] = current + [m for m in remembered if m not in current]
        return out

    def keep_marks(self, state: dict[str, Any], keys: tuple[str, ...]) -> None:
        merged = self.restore_marks(state, keys)
        kept = {key: list(merged[key]) for key in keys if key in merged}
        if any(self.marks.get(key) != value for key, value in kept.items()):
            self.marks.update(kept)
            self.save()

    # -- rules ----------------------------------------------------------------------------------
    def check_open(self, phase: str) -> None:
        if self.finished is not None and phase != "hello":
            raise Refusal("run_finished", f"this site's run is over; {phase!r} is not acted on")

    def fix_run(self, method: str, rounds: int) -> None:
        """The run's method and round count, fixed by its first message of any kind (and saved);
        a site holding others afterwards is refused: its plan would not be the one it released under."""
        if not self.run:
            self.run = {"method": method, "rounds": rounds}
            self.save()
            return
        self.check_announced(method, rounds, "this site's configuration")

    def check_announced(self, method: str | None, rounds: int | None, source: str) -> None:
        """A `source` naming another method or round count than the run was fixed at is refused."""
        fixed_method, fixed_rounds = self.run.get("method"), self.run.get("rounds")
        if (method is None or method == fixed_method) and (rounds is None or rounds == fixed_rounds):
            return
        raise Refusal(
            "run_changed",
            f"this run was fixed at {fixed_rounds} rounds of {fixed_method} by its first message; "
            f"{source} for {rounds if rounds is not None else fixed_rounds} rounds of "
            f"{method or fixed_method} is not acted on (another round count or method is a new run)",
        )

    def check_training(self, round_id: int) -> None:
        if round_id < 1:
            raise Refusal("bad_request", f"training round must be >= 1, got {round_id}")
        if self.evaluated:
            raise Refusal("run_finished", "the test split was scored: training is over for this run")
        self.last_round = max(self.last_round, round_id)

    def trained_round(self, round_id: int) -> None:
        if round_id not in self.trained:
            self.trained.append(round_id)

    def check_alpha(self, round_id: int, digest: str) -> bool:
        """True: a retry of the request answered before (same values go back, no new noise)."""
        if self.evaluated:
            raise Refusal("run_finished", "the test split was scored: training is over for this run")
        if round_id not in self.trained:
            raise Refusal(
                "alpha_not_admitted", f"no α scalars for round {round_id}: this site did not train it"
            )
        answered = self.alpha.get(str(round_id))
        if answered is None:
            return False
        if answered != digest:
            raise Refusal("alpha_already_released", f"α scalars for round {round_id} were already released")
        return True

    def alpha_released(self, round_id: int, digest: str) -> None:
        self.alpha[str(round_id)] = digest

    def check_end(self, phase: str, final_round: int, stopped_early: str | None) -> None:
        """Scoring the test split and finishing both end training: only after the last round, or
        when the server says the run stopped early (the site then acts on no further training)."""
        if self.last_round < final_round and not stopped_early:
            raise Refusal(
                f"{phase}_before_last_round",
                f"{phase} asked after round {self.last_round} of {final_round} with no early stop stated",
            )
        if phase == "evaluate" and not self.trained:
            # an early stop is the server's word, not training: scoring needs a round this site trained
            raise Refusal("evaluate_untrained", "no training round of this run was done at this site")
        if phase == "evaluate" and self.evaluated:
            raise Refusal("evaluate_repeated", "the test split was scored once already in this run")
