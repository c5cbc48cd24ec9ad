"""A deployed ServerApp (`flwr run`, its own flwr-serverapp process) that is stopped signs it.

Seen (issue 33): SIGTERM to the ServerApp process, or `flwr stop`, left the server's log without a
closing record: Flower's signal handler exits with SystemExit mid-round and the SuperLink refuses a
stopped run's next message with RunNotRunningException, neither an Exception, so the orchestrator's
abort never ran and verify read the log as cut short. Each test drives the real ServerApp `main`
(config from the run context, the server's own log) with the round loop replaced by the stop; about
0.5 s each, no model and no network.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from flwr.app import Context, RecordDict
from flwr.supercore.run import RunNotRunningException

import secure_fed.launch.server_app as server_app
import secure_fed.protocol.run_context
import secure_fed.registry
from secure_fed.audits.keys import load_public_keys, write_key_pair
from secure_fed.server.orchestrator import Orchestrator
from secure_fed.verifier.verify import verify_logs

from ..conftest import small_config


def _serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run: Any) -> tuple[Path, BaseException]:
    """Run the deployed ServerApp's main with `run` as the round loop; the log and what it raised."""
    keys = tmp_path / "keys"
    write_key_pair(keys, "server", Ed25519PrivateKey.generate())
    cfg = small_config(tmp_path / "cache", tmp_path / "out", fed__rounds=3, audit__keys_dir=str(keys))
    monkeypatch.setattr(secure_fed.protocol.run_context, "config_from_context", lambda context: cfg)
    monkeypatch.setattr(server_app, "wait_for_nodes", lambda *a, **k: [1, 2, 3])
    monkeypatch.setattr(secure_fed.registry, "initial_state", lambda cfg: np.zeros(4))
    monkeypatch.setattr(Orchestrator, "run", run)
    context = Context(run_id=7, node_id=0, node_config={}, state=RecordDict(), run_config={})
    with pytest.raises(BaseException) as caught:
        server_app.make_server_app()(grid=object(), context=context)  # type: ignore[arg-type]
    return tmp_path / "out" / "runs" / "7" / "audit" / "server.jsonl", caught.value


def _last(log: Path) -> dict[str, Any]:
    return json.loads(log.read_text().splitlines()[-1])


def _in_round_2(self: Orchestrator) -> None:
    self.settled = 1  # round 1 done: the stop cuts round 2 short
    self.events("alpha", {"alpha": [0.5, 0.5]}, 1)


def test_sigterm_to_the_serverapp_process_is_signed_then_flower_exits(tmp_path, monkeypatch):
    flower: list[int] = []

    def flower_exit(signum: int, frame: Any) -> None:  # what Flower's handler does: report, exit
        flower.append(signum)
        raise SystemExit(0)

    def stopped_mid_round(self: Orchestrator, resume: bool = False) -> Any:
        _in_round_2(self)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)  # the signal lands here
        raise AssertionError("no stop")

    saved = signal.signal(signal.SIGTERM, flower_exit)
    try:
        log, raised = _serve(tmp_path, monkeypatch, stopped_mid_round)
        assert signal.getsignal(signal.SIGTERM) is flower_exit  # Flower's handler is back
    finally:
        signal.signal(signal.SIGTERM, saved)
    assert isinstance(raised, SystemExit) and flower == [signal.SIGTERM]
    last = _last(log)
    assert (last["event"], last["payload"]) == ("run_aborted", {"signal": "SIGTERM", "round": 2}), last
    result = verify_logs([log], load_public_keys(tmp_path / "keys"))
    assert result.ok and [(i.party, i.signal, i.round) for i in result.interruptions] == [
        ("server", "SIGTERM", 2)
    ]


def test_flwr_stop_is_signed(tmp_path, monkeypatch):
    def refused(self: Orchestrator, resume: bool = False) -> Any:
        _in_round_2(self)
        raise RunNotRunningException  # the SuperLink's answer once `flwr stop` ended the run

    log, raised = _serve(tmp_path, monkeypatch, refused)
    assert isinstance(raised, RunNotRunningException)
    last = _last(log)
    assert (last["event"], last["payload"]) == ("run_aborted", {"signal": "flwr stop", "round": 2}), last
    assert verify_logs([log], load_public_keys(tmp_path / "keys")).ok
