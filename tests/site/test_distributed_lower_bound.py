"""`secure-fed lower-bound` with dp.noise = "distributed": the measurement runs the run's own plan
(the site's, from its config and the provisioned sites) against the decoded ring sum, logs a
signed `empirical_audit` record that `audit verify` re-derives, and ε̂ stays below the accountant's
ε of the rounds (~15 s on a warm cache: the site's cohort and model, then a 0.5 s measurement)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from secure_fed.cli import app
from tests.site.test_lower_bound import _config

runner = CliRunner()


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread", "pinned_canary_seed")
def test_distributed_lower_bound_logs_a_record_that_verifies(cache_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "audit"
    args = [
        "lower-bound",
        "--config",
        str(_config(cache_dir, tmp_path, distributed=True)),
        "--canaries",
        "1000",
    ]
    result = runner.invoke(app, [*args, "--site", "site0", "-o", str(out)])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (out / "audit" / "site0.jsonl").read_text().splitlines()]
    (audit,) = [r["payload"] for r in records if r["event"] == "empirical_audit"]
    assert audit["mechanism"] == "distributed_skellam_sum" and audit["site"] == "site0"
    assert audit["sites"] == 3 and audit["colluders"] == 1 and audit["rounds"] == 2
    assert audit["canaries"] == 1000 and audit["guesses"] == 100 and audit["guessed_out"] == 0
    # the rounds' own ε (the target less the GMM histogram's part), which the ceiling clears
    assert 0 < audit["stated_epsilon"] < 2.0 < audit["epsilon_hat_max"]
    assert audit["epsilon_hat"] <= audit["stated_epsilon"] and audit["verdict"] == "passed"
    assert records[-1]["event"] == "head"
    logs = [str(p) for p in sorted((out / "audit").glob("*.jsonl"))]
    verified = runner.invoke(app, ["audit", "verify", *logs, "--keys", str(out / "keys")])
    assert verified.exit_code == 0, verified.output
    assert f"ε̂ = {audit['epsilon_hat']:.3f} re-derived" in verified.output
