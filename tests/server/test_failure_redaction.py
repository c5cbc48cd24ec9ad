"""A failed site's framework text (Ray's out-of-memory monitor, an actor's death, a crashed worker)
becomes a kind and one line of our own: on the console once per site and kind, in a signed record
never, whatever host details the original carried."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from ray.exceptions import ActorDiedError, OutOfMemoryError, WorkerCrashedError

from secure_fed.protocol.failures import (
    OUT_OF_MEMORY,
    SIGNED_REASONS,
    SITE_ERROR,
    WORKER_CRASHED,
    WORKER_KILLED,
    classify,
    console_reason,
    declined_reason,
    has_host_detail,
    one_line,
    signed_reason,
)
from secure_fed.server import transports
from secure_fed.server.transports import GridTransport

# Ray's memory monitor's text (its raylet's format), with the host's top memory users: other users'
# processes and command lines
MONITOR = (
    "Task was killed due to the node running low on memory.\n"
    "Memory on the node (IP: 127.0.0.1, ID: 5f1e0c2a9b8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b) "
    "where the task (actor ID: 0cb2f1e8a3d4c5b6a7980123ffffffffffffffff01000000, "
    "name=ClientAppActor.__init__, "
    "pid=48213, memory used=3.91GB) was running was 22.1GB / 23.2GB (0.952), which exceeds the memory usage "
    "threshold of 0.95. Ray killed this worker "
    "(ID: 9d1c2b3a4f5e6d7c8b9a0f1e2d3c4b5a6f7e8d9c0b1a2f3e4d5c6b7a) "
    "because it was the most recently scheduled task; to see more information about memory usage on this "
    "node, use `ray logs raylet.out -ip 127.0.0.1`. To see the logs of the worker, use `ray logs "
    "worker-9d1c2b3a*out -ip 127.0.0.1. Top 10 memory users:\n"
    "PID\tMEM(GB)\tCOMMAND\n"
    "48213\t3.91\tray::ClientAppActor.run\n"
    "1177\t2.40\t/usr/bin/python3 /home/alice/private_study/train.py --cohort oncology --token s3cr3t\n"
    "2290\t1.10\t/opt/conda/bin/jupyter-lab --ip=0.0.0.0 --NotebookApp.token=bob-token\n"
)
ACTOR_DIED = (
    "The actor died unexpectedly before finishing this task.\n"
    "\tclass_name: ClientAppActor\n"
    "\tactor_id: 0cb2f1e8a3d4c5b6a7980123ffffffffffffffff01000000\n"
    "\tpid: 48213\n"
    "\tnamespace: 7c0b7a56-4f4b-4c35-9c1e-3d1f0f0f7e21\n"
    "\tip: 127.0.0.1\n"
    "The actor is dead because its worker process has died. Worker exit type: UNEXPECTED_SYSTEM_EXIT "
    "Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of file. Some "
    "common causes include: (1) the process was killed by the OOM killer due to high memory usage, (2) "
    "ray stop --force was called, or (3) the worker crashed unexpectedly due to SIGSEGV or another "
    "unexpected error."
)


def _actor_died() -> ActorDiedError:
    err = ActorDiedError()
    err.error_msg = ACTOR_DIED  # what Ray builds from the actor's death context
    return err


def _oom_died() -> ActorDiedError:
    err = ActorDiedError()
    err.error_msg = ACTOR_DIED.split("The actor is dead")[0] + (
        "The actor is dead because its worker process has died. Worker exit type: NODE_OUT_OF_MEMORY "
        "Worker exit detail: " + MONITOR
    )
    return err


def flower_reason(err: BaseException) -> str:
    """How Flower's simulation wraps an exception into an error reply (vce_api.worker)."""
    return str(type(err)) + ":<'" + str(err) + "'>"


ERRORS = [
    (OutOfMemoryError(MONITOR), OUT_OF_MEMORY),
    (_oom_died(), OUT_OF_MEMORY),
    (_actor_died(), WORKER_KILLED),
    (WorkerCrashedError(), WORKER_CRASHED),
]


@pytest.mark.parametrize(
    ("err", "kind"), ERRORS, ids=lambda v: type(v).__name__ if isinstance(v, Exception) else v
)
def test_ray_errors_become_one_line_of_our_own(err: BaseException, kind: str) -> None:
    for given in (err, flower_reason(err), str(err) if kind != WORKER_CRASHED else flower_reason(err)):
        found = classify(given)
        assert found.kind == kind, (given, found)
        assert "\n" not in found.reason and not has_host_detail(found.reason)
        code, reason = signed_reason(err)
        assert (code, reason) == (kind, found.reason)
    line = classify(flower_reason(err)).line("site1", "`secure-fed run --resume runs/x`")
    assert line.startswith("site1: ") and line.endswith("then `secure-fed run --resume runs/x`")
    assert "\n" not in line


def test_the_memory_monitors_text_is_caught_as_host_detail() -> None:
    for leaky in (MONITOR, ACTOR_DIED, flower_reason(_oom_died())):
        assert has_host_detail(leaky)
    assert has_host_detail("PID\tMEM(GB)\tCOMMAND") and has_host_detail("/proc/1177/cmdline")
    assert not has_host_detail("round 2: only 1 site(s) took part, fewer than fed.min_sites = 2")


class Ours(RuntimeError):
    """An exception of ours: its module must be secure_fed's for its text to be kept."""


Ours.__module__ = "secure_fed.server.orchestrator"


def test_signed_reasons_are_fixed_texts_and_the_console_keeps_our_words() -> None:
    # our exception: its code's fixed text is signed, its message (which may name files) is not
    ours = Ours("round 2: only 1 site(s) took part\n  site1: cannot read /srv/site1/keys")
    ours.code = "too_few_sites"
    assert signed_reason(ours) == ("too_few_sites", SIGNED_REASONS["too_few_sites"])
    assert console_reason(ours) == "round 2: only 1 site(s) took part site1: cannot read /srv/site1/keys"
    # ours without a known code: the generic rule text, never the message
    code, reason = signed_reason(Ours("stopped: see D:\\exports\\cohort.csv"))
    assert code == "internal" and "exports" not in reason and "Ours" in reason
    # our exception carrying a framework's text (a reason that was never classified) is reduced
    code, reason = signed_reason(Ours(f"sum failed: {flower_reason(_oom_died())}"))
    assert (code, reason) == (OUT_OF_MEMORY, classify(flower_reason(_oom_died())).reason)
    assert not has_host_detail(console_reason(Ours(f"sum failed: {flower_reason(_oom_died())}")))
    # anything not ours keeps only its type: its message may name files or hosts
    code, reason = signed_reason(FileNotFoundError("/home/alice/run/checkpoint: no such file"))
    assert code == "internal" and "FileNotFoundError" in reason and "alice" not in reason
    assert len(one_line("x " * 1000)) <= 1000 and one_line("x " * 1000).endswith("…")


def test_a_sites_decline_is_signed_as_its_codes_fixed_text() -> None:
    said = {"status": "refused", "code": "policy", "error": "not in C:\\Users\\dr_smith\\policy.toml"}
    assert declined_reason(said) == SIGNED_REASONS["policy"]
    assert (
        declined_reason({"status": "declined", "code": "budget", "reason": "ε 9 > 8"})
        == SIGNED_REASONS["budget"]
    )
    assert declined_reason(None) == "no reply (dropped out)"
    unknown = declined_reason({"status": "refused", "code": "srv_hospital_data", "error": "x"})
    assert "srv" not in unknown and "debug log" in unknown
    lost = declined_reason({"error": "its worker process crashed", "failure": WORKER_CRASHED})
    assert lost == "its worker process crashed"  # the transport's kind, in our words


def _message(content: Any, dst_node_id: int, message_type: str) -> SimpleNamespace:
    """Flower's Message outside a run (it needs the run's task identity)."""
    return SimpleNamespace(metadata=SimpleNamespace(dst_node_id=dst_node_id))


class ErrorGrid:
    """Every node's every reply is Flower's error reply carrying `reason`."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.pushed: list[Any] = []

    def push_messages(self, messages: list[Any]) -> list[str]:
        self.pushed = list(messages)
        return [f"m{i}" for i, _ in enumerate(messages)]

    def pull_messages(self, ids: set[str]) -> list[SimpleNamespace]:
        return [
            SimpleNamespace(
                metadata=SimpleNamespace(reply_to_message_id=f"m{i}", src_node_id=m.metadata.dst_node_id),
                has_error=lambda: True,
                error=SimpleNamespace(reason=self.reason),
            )
            for i, m in enumerate(self.pushed)
            if f"m{i}" in ids
        ]


def test_a_dead_worker_is_one_console_line_per_site_and_its_text_stays_in_flowers_log(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transports, "Message", _message)
    grid = ErrorGrid(flower_reason(_oom_died()))
    # node 77 never answered hello (no name from it), but the simulation knows its partition
    transport = GridTransport(
        grid,  # type: ignore[arg-type]
        site_of=lambda node: {77: "site2"}.get(node),
        resume="`secure-fed run --resume runs/hard`",
    )
    transport.name_sites({11: "site0", 42: "site1"})
    caplog.set_level(logging.INFO)
    replies: dict[int, dict[str, Any]] = {}
    for phase in ("train", "hypergrad", "evaluate", "finish"):
        replies = transport.exchange(phase, {11: {}, 42: {}, 77: {}})
    ours = [r.getMessage() for r in caplog.records if r.name.startswith("secure_fed")]
    assert ours == [
        f"{site}: its worker was ended by the out-of-memory monitor: free memory or lower `[train] threads`, "
        "then `secure-fed run --resume runs/hard`"
        for site in ("site0", "site1", "site2")
    ]
    assert not any("Flower node" in line for line in ours)  # node 77 named by its partition's site
    raw = [r.getMessage() for r in caplog.records if r.name == "flwr"]
    assert len(raw) == 12 and all("Top 10 memory users" in m for m in raw)  # Flower's log keeps it all
    for reply in replies.values():
        assert reply["failure"] == OUT_OF_MEMORY and not has_host_detail(json.dumps(reply))
    assert set(transport.failures) == {11, 42, 77}


def test_an_unknown_node_without_a_simulation_is_named_by_its_flower_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(transports, "Message", _message)
    transport = GridTransport(ErrorGrid("boom"))  # type: ignore[arg-type]
    assert transport.name(5) == "Flower node 5"
    assert transport.exchange("hello", {5: {}})[5]["error"] == classify("boom").reason


def test_a_clientapp_exception_is_a_site_error() -> None:
    text = (
        "<class 'flwr.clientapp.client_app.ClientAppException'>:<'\nException ClientAppException occurred.'>"
    )
    assert classify(text).kind == SITE_ERROR


def _records(out: Path, party: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "audit" / f"{party}.jsonl").read_text().splitlines()]


# what the dying handler's text holds and no signed log may: a whole log carries hashes and the
# run's paths of its own, so it is searched for the framework's words, and the failure records for
# any host detail at all
LEAK = re.compile(r"Top 10|MEM\(GB\)|\bPID\b|pid[:=]|actor_id|ActorDiedError|UNEXPECTED_SYSTEM_EXIT|alice")


def _no_leak(out: Path) -> None:
    for path in (out / "audit").glob("*.jsonl"):
        assert not LEAK.search(path.read_text()), (path.name, LEAK.search(path.read_text()))
        for record in map(json.loads, path.read_text().splitlines()):
            if record["event"] in ("run_aborted", "run_stopped", "round_skipped", "run_end", "alpha_skipped"):
                assert not has_host_detail(json.dumps(record["payload"])), record


def _dying_site1(
    monkeypatch: pytest.MonkeyPatch, sites: tuple[str, ...] = ("site1",), at: str = "train"
) -> Any:
    """The sites' handlers die as a killed Ray worker's does, from round 2's training on (or from
    the final evaluation on: ``at="evaluate"``)."""
    from secure_fed.launch import runner

    made = runner.make_site_handler
    dead: set[str] = set()

    def dying(runtime: Any, secret: Any) -> Any:
        call = made(runtime, secret)

        def answer(phase: str, request: dict[str, Any]) -> dict[str, Any]:
            starts = phase == at and (at != "train" or request.get("round") == 2)
            if runtime.site in sites and (dead or starts):
                dead.add(phase)
                raise _oom_died()
            return call(phase, request)

        return answer

    monkeypatch.setattr(runner, "make_site_handler", dying)
    return made


@pytest.mark.slow  # a whole run in process: make test-fast leaves it out
def test_a_lost_worker_stops_an_inprocess_run_for_resume_and_signs_only_our_words(
    make_config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The orchestrator's side, without Ray: with every site needed (fed.min_sites = 3), site1's
    lost worker stops the run (SitesLost); the server's log ends with our code and reason and no
    head record, nothing is evaluated or written as a result; `--resume` finishes it."""
    from secure_fed.audits.keys import load_public_keys
    from secure_fed.data.sites import site_names
    from secure_fed.launch import runner
    from secure_fed.server.orchestrator import SitesLost
    from secure_fed.verifier.verify import verify_logs

    cfg = make_config("lost", fed__method="fedavg", fed__rounds=2, fed__min_sites=3)
    made = _dying_site1(monkeypatch)
    with pytest.raises(SitesLost) as stopped:
        runner.run_inprocess(cfg, cfg.out)
    assert stopped.value.code == OUT_OF_MEMORY and set(stopped.value.lost) == {"site1"}
    assert f"`secure-fed run --resume {cfg.out}`" in stopped.value.console_line(cfg.out)
    server = _records(cfg.out, "server")
    assert server[-1]["event"] == "run_aborted", server[-1]
    assert server[-1]["payload"] == {
        "reason": "sites' worker processes ended (site1: its worker was ended by the out-of-memory "
        "monitor): free memory or lower `[train] threads`, then resume the run",
        "code": OUT_OF_MEMORY,
        "round": 2,
        "resumable": True,  # the sites were told nothing: `audit verify` reads them as stopped with it
    }
    _no_leak(cfg.out)
    assert not (cfg.out / "metrics.json").exists()

    monkeypatch.setattr(runner, "make_site_handler", made)  # memory freed: the worker is back
    outcome = runner.run_inprocess(cfg, cfg.out, resume=True)
    assert [r["round"] for r in outcome.metrics["per_round"]] == [1, 2]
    assert outcome.unfinished == {}
    keys = load_public_keys(runner.run_keys_dir(cfg, site_names(cfg)))
    result = verify_logs(sorted((cfg.out / "audit").glob("*.jsonl")), keys)
    assert result.ok, [str(p) for p in result.problems]


@pytest.mark.slow  # a whole run in process: make test-fast leaves it out
def test_a_lost_worker_the_run_tolerates_leaves_its_log_without_an_end_and_says_so(
    make_config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One of three sites lost where two suffice: the run finishes on two, and names the site
    whose log lacks its end record (the CLI exits 1 on it)."""
    from secure_fed.launch import runner

    cfg = make_config("tolerated", fed__method="fedavg", fed__rounds=2)
    _dying_site1(monkeypatch)
    outcome = runner.run_inprocess(cfg, cfg.out)
    assert [r["participants"] for r in outcome.metrics["per_round"]][1:] == [["site0", "site2"]]
    assert outcome.unfinished == {
        "site1": "its worker was ended by the out-of-memory monitor; free memory or lower `[train] threads`"
    }
    assert set(outcome.metrics["test_per_site"]) == {"site0", "site2"}
    _no_leak(cfg.out)


@pytest.mark.slow  # a whole run in process: make test-fast leaves it out
def test_no_site_evaluating_the_final_model_stops_the_run_for_resume(
    make_config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen: a run whose every `evaluate` and `finish` failed exited 0 with NaN scores. Now there
    is no result: the run stops for `--resume`, which goes straight to the evaluation."""
    from secure_fed.launch import runner
    from secure_fed.server.orchestrator import SitesLost

    cfg = make_config("no-eval", fed__method="fedavg", fed__rounds=2)
    made = _dying_site1(monkeypatch, ("site0", "site1", "site2"), at="evaluate")
    with pytest.raises(SitesLost, match="no site evaluated the final model"):
        runner.run_inprocess(cfg, cfg.out)
    assert not (cfg.out / "metrics.json").exists()
    server = _records(cfg.out, "server")
    assert (server[-1]["event"], server[-1]["payload"]["code"]) == ("run_aborted", OUT_OF_MEMORY)
    _no_leak(cfg.out)
    monkeypatch.setattr(runner, "make_site_handler", made)
    outcome = runner.run_inprocess(cfg, cfg.out, resume=True)
    assert len(outcome.metrics["per_round"]) == 2 and set(outcome.metrics["test_per_site"]) == {
        "site0",
        "site1",
        "site2",
    }


def test_the_simulation_names_a_node_by_its_partitions_site_before_hello() -> None:
    """Flower's simulation registers its nodes with random ids; the partition each got is kept, so
    a node that fails before it answered hello is named by its site, not as `Flower node <id>`."""
    from flwr.server.superlink.fleet.vce import vce_api

    from secure_fed.config import build_config
    from secure_fed.launch.runner import _naming_simulated_nodes
    from secure_fed.launch.server_app import SIMULATED_NODES, simulated_site_of

    ids = iter([9001, 7, 123456789])
    state = SimpleNamespace(
        create_node=lambda *args, **kwargs: next(ids), acknowledge_node_heartbeat=lambda **kwargs: True
    )
    SIMULATED_NODES.clear()
    with _naming_simulated_nodes():
        vce_api._register_nodes(num_nodes=3, state_factory=SimpleNamespace(state=lambda: state))
    site_of = simulated_site_of(build_config({"data": {"synth": {"sites": 3}}}))
    assert [site_of(n) for n in (9001, 7, 123456789, 5)] == ["site0", "site1", "site2", None]
    SIMULATED_NODES.clear()
