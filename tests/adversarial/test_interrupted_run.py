"""An interrupted and resumed DP run must say what its sites' logs say.

Seen: `--resume` of an interrupted DP run printed ε = 6.06 (console, metrics.json) where the sites'
signed logs and the report said 7.96; round 2 was skipped as "sites gone: none" while a site had
declined it (its reason only in the server's log); the run exited 0 with fewer rounds than
configured; and an interrupted run's logs never said it was interrupted.

The interruption here lands where Ctrl-C hurts most: inside a site's DP training, after its ledger
charged the round and before the release was saved. On resume that site must sit the round out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from secure_fed.launch.runner import run_inprocess


def _records(out: Path, party: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "audit" / f"{party}.jsonl").read_text().splitlines()]


def _logged_epsilon(out: Path, site: str) -> dict[str, float]:
    """The site's own signed word: the largest cumulative ε over its populations, per accountant."""
    last: dict[str, dict[str, float]] = {}
    for record in _records(out, site):
        if record["event"] == "privacy":
            last[record["payload"]["population"]] = record["payload"]["epsilon"]
    return {acc: max(eps[acc] for eps in last.values()) for acc in ("rdp", "prv")}


@pytest.mark.slow
def test_a_resumed_run_reports_the_sites_epsilon_and_who_declined(make_config, monkeypatch):
    from secure_fed.algorithms.fedtar.learner import ReportLearner
    from secure_fed.audits.keys import load_public_keys
    from secure_fed.verifier.verify import verify_logs

    cfg = make_config(
        dp__enabled=True, dp__target_epsilon=8.0, dp__sample_rate=0.5, fed__rounds=3, train__threads=1
    )
    out = cfg.out
    train = ReportLearner.local_update

    def interrupted_in_training(self: ReportLearner, round_id: int, *args: Any, **kwargs: Any) -> Any:
        if self.data.name == "site1" and round_id == 2:
            raise KeyboardInterrupt  # Ctrl-C: round 2 charged to site1's ledger, nothing released
        return train(self, round_id, *args, **kwargs)

    monkeypatch.setattr(ReportLearner, "local_update", interrupted_in_training)
    with pytest.raises(KeyboardInterrupt):
        run_inprocess(cfg, out)
    # every party's log says it: the signal and the round in progress, signed, last
    for party in ("server", "site0", "site1", "site2"):
        last = _records(out, party)[-1]
        assert last["event"] == "run_aborted", (party, last)
        assert last["payload"] == {"signal": "SIGINT", "round": 2}, (party, last)
    monkeypatch.setattr(ReportLearner, "local_update", train)

    outcome = run_inprocess(cfg, out, resume=True)

    metrics = json.loads((out / "metrics.json").read_text())
    for site in ("site0", "site1", "site2"):
        logged = _logged_epsilon(out, site)
        shown = metrics["privacy"]["epsilon"][site]
        assert shown["rdp"] == pytest.approx(logged["rdp"], rel=1e-12), (site, shown, logged)
        assert shown["prv"] == pytest.approx(logged["prv"], rel=1e-12), (site, shown, logged)
    # round 2 could not be summed: site1 sat it out, and the run says who and why
    assert metrics["rounds"] == 2 and [row["round"] for row in metrics["per_round"]] == [1, 3]
    [skipped] = metrics["skipped_rounds"]
    assert skipped["round"] == 2 and skipped["dropped"] == []
    assert (
        list(skipped["declined"]) == ["site1"] and "charged before a restart" in skipped["declined"]["site1"]
    )
    [server_skip] = [r for r in _records(out, "server") if r["event"] == "round_skipped"]
    assert server_skip["payload"]["declined"] == skipped["declined"]
    assert outcome.metrics["skipped_rounds"] == metrics["skipped_rounds"]
    # one run: the id made at its start, kept by the resume, on every record of every log
    run_id = (out / "run_id").read_text().strip()
    for party in ("server", "site0", "site1", "site2"):
        assert {r["run_id"] for r in _records(out, party)} == {run_id}, party
    result = verify_logs(sorted((out / "audit").glob("*.jsonl")), load_public_keys(out / "keys"))
    assert result.ok, [str(p) for p in result.problems]


def test_a_run_short_of_its_rounds_exits_non_zero_and_says_why(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import secure_fed.launch.runner
    from secure_fed.cli import app
    from secure_fed.server.orchestrator import RunOutcome

    metrics = {
        "method": "fedtar",
        "seed": 0,
        "rounds": 2,
        "test": {},
        "stopped_early": None,
        "skipped_rounds": [
            {
                "round": 2,
                "reason": "too few survivors",
                "dropped": [],
                "declined": {"site1": "charged before"},
            }
        ],
    }
    monkeypatch.setattr(
        secure_fed.launch.runner, "run_federated", lambda *a, **k: RunOutcome(metrics=metrics)
    )
    result = CliRunner().invoke(
        app, ["run", "--rounds", "3", "--engine", "inprocess", "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 3, result.output
    assert (
        "incomplete: 2 of 3 rounds completed (round 2 skipped: site1 declined (charged before))"
        in " ".join(result.output.split())
    ), result.output
