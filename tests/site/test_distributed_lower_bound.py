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


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread", "pinned_canary_seed")
def test_with_ckks_the_alpha_audit_measures_the_shared_sum(cache_dir: Path, tmp_path: Path) -> None:
    """Distributed FedTAR with CKKS: beside the ring sum's record, one for the α scalars, measured as
    the threat model sees their sum (the honest sites' shares, drawn by the site's `alpha_share`),
    against one release's ε at σ_α; `audit verify` re-derives both."""
    from secure_fed.crypto.keys import init_keys

    keys = tmp_path / "he-keys"
    init_keys(keys, ["server", "site0", "site1", "site2"])
    config = _config(cache_dir, tmp_path, distributed=True)
    text = config.read_text().replace('method = "fedavg"', 'method = "fedtar"')
    config.write_text(f'{text}\n[he]\nenabled = true\nkeys_dir = "{keys}"\n')
    out = tmp_path / "audit"
    result = runner.invoke(
        app, ["lower-bound", "--config", str(config), "--canaries", "1000", "--site", "site0", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (out / "audit" / "site0.jsonl").read_text().splitlines()]
    ring, alpha = [r["payload"] for r in records if r["event"] == "empirical_audit"]
    assert ring["mechanism"] == "distributed_skellam_sum"
    assert alpha["mechanism"] == "alpha_scalars" and alpha["noise"] == "shares"
    assert alpha["participants"] == 3 and alpha["colluders"] == 1 and alpha["population"] == "validation"
    assert alpha["epsilon_hat"] <= alpha["stated_epsilon"]
    logs = [str(p) for p in sorted((out / "audit").glob("*.jsonl"))]
    # the run's keys are the provisioned kit it was given (he.keys_dir), not a folder made for it
    verified = runner.invoke(app, ["audit", "verify", *logs, "--keys", str(keys)])
    assert verified.exit_code == 0, verified.output
    assert f"ε̂ = {alpha['epsilon_hat']:.3f} re-derived" in verified.output
