"""A deployed site whose task is stopped signs its own `run_aborted` (its key, its log of that run).

Flower 1.42's SuperNode never signals a ClientApp process when the SuperLink stops a run; the
process is stopped by a signal only: SIGTERM from the node's service manager (`secure-fed client`
ends the node's whole process group), SIGINT from Flower's own task heartbeat once the SuperNode has
ended the task, or from its parent monitor once the SuperExec is gone. Here the site's runner
(`approved_app.main`, what `flwr-clientapp` starts on a site's node) is driven through one message
whose ClientApp is stopped by SIGTERM half-way: Flower's Runtime-API calls are stand-ins, the site's
approval list, keys, audit log and signing are real. Costs about 1 s.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from secure_fed.audits.log import AuditLog
from secure_fed.cli import app as cli
from secure_fed.launch import approved_app
from secure_fed.protocol.wire import to_records
from secure_fed.verifier.verify import verify_logs

FAB = b"an approved FAB's bytes"
RUN_ID = 4242


@pytest.fixture
def restore_signals() -> Iterator[None]:
    """The runner installs Flower's handlers and exit handlers in this process: put them back."""
    from flwr.supercore.exit import exit_handler

    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT)}
    handlers = list(exit_handler.registered_exit_handlers)
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        exit_handler.registered_exit_handlers[:] = handlers


@pytest.fixture
def site(tmp_path: Path) -> dict[str, Any]:
    keys = tmp_path / "keys"
    made = CliRunner().invoke(cli, ["keys", "init", "--out", str(keys), "--sites", "1"])
    assert made.exit_code == 0, made.output
    approvals = tmp_path / "approved.json"
    approvals.write_text(json.dumps({"approved": [{"sha256": approved_app.fab_sha256(FAB)}]}))
    policy = tmp_path / "site0.toml"
    policy.write_text(f'out = "{tmp_path / "out"}"\n[audit]\nkeys_dir = "{keys}"\n')
    node = {
        "site": "site0",
        "config-file": str(policy),
        "keys-dir": str(keys),
        "approved-fabs": str(approvals),
    }
    return {"node": node, "keys": keys, "log": tmp_path / f"out/runs/{RUN_ID}/audit/site0.jsonl"}


def drive(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any], client_app: Callable[..., Any]
) -> dict[str, Any]:
    """Run `approved_app.main` for one message of run RUN_ID with Flower's Runtime API stood in for;
    what it pushed back is returned. Flower's own signal handling is kept, but its exit is a
    SystemExit here (flwr_exit's forced `os._exit` would end the test process)."""
    import flwr.common.args
    import flwr.supercore.exit
    import flwr.supercore.heartbeat
    import flwr.supercore.runtime
    import flwr.supercore.tls
    import flwr.supernode.runtime.run_clientapp as run_clientapp
    from flwr.supercore.exit.exit_handler import trigger_exit_handlers

    pushed: dict[str, Any] = {}
    args = argparse.Namespace(
        parent_pid=None, runtime_api_address="127.0.0.1:1", insecure=True, root_certificates=None
    )
    monkeypatch.setattr(
        importlib.import_module("flwr.supernode.cli.flwr_clientapp"),  # the package's name is a function
        "_parse_args_run_flwr_clientapp",
        lambda: SimpleNamespace(parse_args=lambda: args),
    )
    monkeypatch.setattr(flwr.common.args, "try_obtain_flwr_app_token", lambda _args: "token")
    monkeypatch.setattr(flwr.supercore.tls, "validate_and_resolve_root_certificates", lambda *_: None)
    monkeypatch.setattr(
        flwr.supercore.runtime.RuntimeHttpClient,
        "from_server_address",
        classmethod(lambda cls, **_: SimpleNamespace(close=lambda: None)),
    )

    class Heartbeat:
        def __init__(self, _fn: Any) -> None:
            self.is_running = False

        def start(self) -> None:
            self.is_running = True

        def stop(self) -> None:
            self.is_running = False

    monkeypatch.setattr(flwr.supercore.heartbeat, "HeartbeatSender", Heartbeat)
    message = SimpleNamespace(content=to_records({"round": 2, "phase": "train"}))
    context = SimpleNamespace(node_config=node, run_id=RUN_ID)
    run = SimpleNamespace(run_id=RUN_ID, fab_id="secure-fed/secure-fed")
    monkeypatch.setattr(
        run_clientapp,
        "pull_task_input",
        lambda _client: (message, context, run, SimpleNamespace(content=FAB)),
    )
    monkeypatch.setattr(
        run_clientapp, "push_message", lambda _c, reply, _ctx: pushed.setdefault("reply", reply)
    )
    monkeypatch.setattr(
        run_clientapp,
        "push_task_output",
        lambda client, context, sub_status, details: pushed.setdefault("task", (sub_status, details)),
    )

    def flwr_exit(code: int, message: str | None = None, **_: Any) -> None:
        trigger_exit_handlers(run_before_force_exit=True)
        trigger_exit_handlers(run_before_force_exit=False)
        raise SystemExit(code)

    monkeypatch.setattr(flwr.supercore.exit, "flwr_exit", flwr_exit)
    monkeypatch.setattr(flwr.supercore.exit.signal_handler, "flwr_exit", flwr_exit)
    monkeypatch.setattr(approved_app, "load_site_app", lambda: client_app)
    with pytest.raises(SystemExit) as ended:
        approved_app.main()
    pushed["exit"] = ended.value.code
    return pushed


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def stopped_app(log_path: Path, keys: Path, sig: signal.Signals) -> Callable[..., Any]:
    """The site's ClientApp, cut short: it holds the site's log of the run open (as its runtime
    does), signs a record, and is stopped by `sig` before its reply."""
    from secure_fed.audits.keys import load_private_key
    from secure_fed.launch import client_app as site_app

    def client_app(message: Any, context: Any) -> Any:
        log = AuditLog(log_path, "site0", str(RUN_ID), load_private_key(keys, "site0"))
        site_app._RUNTIMES[("cfg", "site0", str(RUN_ID))] = SimpleNamespace(trail=SimpleNamespace(log=log))
        log.append("budget_refusal", {"site": "site0", "budget": 1.0, "reason": "stand-in"}, round=2)
        os.kill(os.getpid(), sig)
        time.sleep(30)  # the signal arrives here
        raise AssertionError("the stop did not stop the ClientApp")

    return client_app


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_site_signs_run_aborted_naming_the_signal(
    site: dict[str, Any], monkeypatch: pytest.MonkeyPatch, restore_signals: None, sig: signal.Signals
) -> None:
    from secure_fed.launch import client_app as site_app

    monkeypatch.setattr(site_app, "_RUNTIMES", {})
    pushed = drive(monkeypatch, site["node"], stopped_app(site["log"], site["keys"], sig))
    assert pushed["exit"] != 0 and "reply" not in pushed  # Flower's handler still ended the task
    records = _records(site["log"])
    assert [r["event"] for r in records] == ["code", "budget_refusal", "run_aborted"], records
    last = records[-1]
    assert last["party"] == "site0" and last["run_id"] == str(RUN_ID)
    assert last["payload"] == {"signal": sig.name, "round": 2} and last["round"] == 2
    # signed with the site's key on the site's chain; no head record: the log says it was stopped
    from secure_fed.audits.keys import load_public_keys

    result = verify_logs([site["log"]], load_public_keys(site["keys"]))
    assert [p for p in result.problems if "truncated" not in str(p)] == []
    assert not result.logs[0].closed


def test_a_stop_signs_only_a_run_the_site_took_part_in(site: dict[str, Any]) -> None:
    """No log of the run (the site never ran it): nothing is written. A closed log (a refused FAB,
    a finished run): it stays closed. An open one this process does not hold: it is reopened and
    its chain goes on."""
    node = site["node"]
    assert not approved_app.sign_site_stop(node, "never-ran", "SIGTERM", None)
    assert not (site["log"].parents[2] / "never-ran").exists()
    approved_app.log_code(
        node, "refused", "code_refused", {"fab_sha256": "b" * 64, "fab_id": "x"}, close=True
    )
    refused = site["log"].parents[2] / "refused/audit/site0.jsonl"
    assert not approved_app.sign_site_stop(node, "refused", "SIGTERM", None)
    assert [r["event"] for r in _records(refused)] == ["code_refused", "head"]
    approved_app.log_code(node, str(RUN_ID), "code", {"fab_sha256": "a" * 64}, close=False)
    assert approved_app.sign_site_stop(node, str(RUN_ID), "SIGINT", 3)
    records = _records(site["log"])
    assert [r["event"] for r in records] == ["code", "run_aborted"]
    assert records[-1]["payload"] == {"signal": "SIGINT", "round": 3} and records[-1]["seq"] == 1
