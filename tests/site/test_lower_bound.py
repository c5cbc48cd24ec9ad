"""`secure-fed lower-bound` end to end on a small cohort: the site's own runtime trains with
canaries, the signed `empirical_audit` record verifies, and the report shows ε̂ beside ε."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from secure_fed.cli import app
from secure_fed.dp.canaries import default_guesses
from secure_fed.site import lower_bound

runner = CliRunner()


def _config(cache_dir: Path, tmp_path: Path, dp: bool = True, distributed: bool = False) -> Path:
    """The measurement's small run; `distributed`: FedAvg's one-step rounds with distributed noise, h = 3."""
    train = "local_epochs = 1\n" if distributed else ""
    fed = 'method = "fedavg"\n' if distributed else ""
    privacy = (
        'enabled = true\ntarget_epsilon = 2.0\nsample_rate = 0.5\nnoise = "distributed"\nhonest_min = 3\n'
        if distributed
        else f"enabled = {'true' if dp else 'false'}\ntarget_epsilon = 4.0\n"
    )
    path = tmp_path / "audit.toml"
    path.write_text(
        f"""
seed = 0
[data]
max_visits = 3
val_fraction = 0.25
test_fraction = 0.25
[data.synth]
sites = 3
patients = 16
visits = 3
[model]
cache_dir = "{cache_dir}"
pretrain_steps = 150
[train]
batch_size = 8
threads = 1
{train}[fed]
rounds = 2
{fed}[dp]
{privacy}"""
    )
    return path


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread", "pinned_canary_seed")
def test_audit_logs_a_record_that_verifies_and_reaches_the_report(cache_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "audit"
    config = _config(cache_dir, tmp_path)
    result = runner.invoke(
        app,
        [
            "lower-bound",
            "--config",
            str(config),
            "--canaries",
            "200",
            "--site",
            "site0",
            "-o",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (out / "audit" / "site0.jsonl").read_text().splitlines()]
    measurements = {
        r["payload"]["mechanism"]: r["payload"] for r in records if r["event"] == "empirical_audit"
    }
    assert set(measurements) == {"dp_sgd", "alpha_scalars", "gmm_histogram"}
    for other in ("alpha_scalars", "gmm_histogram"):
        assert measurements[other]["epsilon_hat"] <= measurements[other]["stated_epsilon"]
    audit = measurements["dp_sgd"]
    assert audit["canaries"] == 200 and audit["guesses"] == default_guesses(200)
    assert 0 <= audit["correct"] <= audit["guesses"]
    assert audit["rounds"] == 2 and audit["steps"] > 0
    # the stated ε is the site's own accountant over the DP-SGD steps it logged
    dpsgd = [
        r["payload"] for r in records if r["event"] == "privacy" and r["payload"]["mechanism"] == "dp_sgd"
    ]
    assert len(dpsgd) == 2
    assert audit["stated_epsilon"] <= audit["site_epsilon"] + 1e-9
    assert audit["epsilon_hat"] <= audit["stated_epsilon"]
    assert records[-1]["event"] == "head"  # the measurement run's log was closed cleanly

    verified = runner.invoke(
        app,
        ["audit", "verify", *map(str, sorted((out / "audit").glob("*.jsonl"))), "--keys", str(out / "keys")],
    )
    assert verified.exit_code == 0, verified.output
    assert f"ε̂ = {audit['epsilon_hat']:.3f} re-derived" in verified.output
    page = (out / "report.html").read_text()
    assert "Empirical lower bound on ε" in page and "measured lower bound" in page
    assert "re-derived from the logged counts by the verifier" in page


def test_audit_refuses_a_config_without_dp(cache_dir: Path, tmp_path: Path) -> None:
    config = _config(cache_dir, tmp_path, dp=False)
    result = runner.invoke(app, ["lower-bound", "--config", str(config), "-o", str(tmp_path / "x")])
    assert result.exit_code == 2
    assert "dp.enabled is false" in result.output and "Traceback" not in result.output


def test_audit_refuses_an_unknown_site(cache_dir: Path, tmp_path: Path) -> None:
    config = _config(cache_dir, tmp_path)
    result = runner.invoke(
        app, ["lower-bound", "--config", str(config), "--site", "nowhere", "-o", str(tmp_path / "x")]
    )
    assert result.exit_code == 2
    assert "--site nowhere" in result.output


def test_help_has_an_example() -> None:
    result = runner.invoke(app, ["lower-bound", "--help"])
    assert result.exit_code == 0 and "Example" in result.output


def test_results_commands_are_the_ones_the_script_runs() -> None:
    """docs/RESULTS.md's lower-bound and verify commands are run by benchmarks/lower_bound.sh, verbatim."""
    root = Path(__file__).resolve().parents[2]
    script = (root / "benchmarks" / "lower_bound.sh").read_text()
    results = (root / "docs" / "RESULTS.md").read_text()
    section = results[results.index("## Empirical lower bound") :]
    said = [line.strip() for line in section.splitlines()]
    commands = [line for line in said if line.startswith(("secure-fed lower-bound", "secure-fed audit"))]
    assert any(c.startswith("secure-fed lower-bound") for c in commands)
    for command in commands:
        assert command.replace("secure-fed", "$SF", 1) in script, command


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread", "pinned_canary_seed")
def test_a_histogram_released_without_noise_is_a_violation_on_the_console(
    cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GMM histogram whose noise a bug dropped: every guess right, and the console says so,
    as evidence at the stated confidence rather than proof, with what to do next."""
    real = lower_bound.bound_histogram

    def noiseless(m: int, guesses: int, n_cells: int, sigma: float, *rest: Any, **kw: Any) -> Any:
        return real(m, guesses, n_cells, 0.0, *rest, **kw)

    monkeypatch.setattr(lower_bound, "bound_histogram", noiseless)
    out = tmp_path / "audit"
    args = ["lower-bound", "--config", str(_config(cache_dir, tmp_path)), "--canaries", "200"]
    result = runner.invoke(app, [*args, "--site", "site0", "-o", str(out)])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (out / "audit" / "site0.jsonl").read_text().splitlines()]
    (histogram,) = [
        r["payload"]
        for r in records
        if r["event"] == "empirical_audit" and r["payload"]["mechanism"] == "gmm_histogram"
    ]
    assert histogram["correct"] == histogram["guesses"] and histogram["verdict"] == "violation"
    said = " ".join(result.output.split())  # the console wraps at its width
    assert "1 violation(s): evidence of a leak above the stated ε, not proof" in said
    assert "Rerun the measurement in a new --out folder" in said


def test_the_old_spelling_is_refused_in_one_line_naming_the_new_command() -> None:
    # `audit` names the signed logs only; the measurement moved to `lower-bound`, options kept
    result = runner.invoke(app, ["audit", "empirical", "--canaries", "200", "-o", "runs/x"])
    assert result.exit_code == 2
    said = " ".join(result.output.split())
    assert "`secure-fed lower-bound --canaries 200 -o runs/x`" in said and "Traceback" not in said
    assert "empirical" not in runner.invoke(app, ["audit", "--help"]).output
