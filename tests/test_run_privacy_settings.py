"""Privacy settings of `secure-fed run` apply or are refused, never silently ignored.

`[dp] ledger_dir` and `budget_epsilon` used to reach only deployed nodes: two `secure-fed run`s on
the same patients each started from ε = 0 and wrote no ledger, and `--target-epsilon` without
`--dp` ran a full non-private run.
"""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from secure_fed.cli import app
from secure_fed.launch.runner import run_id_for
from secure_fed.site.lifetime import site_ledger_of
from secure_fed.site.runtime import SiteRuntime

runner = CliRunner()


def _one_line_error(result, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    for needle in needles:
        assert needle in lines[0], result.output


def _config(tmp_path: Path, dp: str) -> Path:
    """A run on real-format data (the folder need not exist: the setting is refused first)."""
    config = tmp_path / "run.toml"
    config.write_text(f'[data]\nsource = "manifest"\npath = "{tmp_path / "cohort"}"\n[dp]\n{dp}')
    return config


def test_target_epsilon_without_dp_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "run"
    config = _config(tmp_path, "")
    result = runner.invoke(app, ["run", "-c", str(config), "--target-epsilon", "8", "--out", str(out)])
    _one_line_error(result, "--target-epsilon", "--dp")
    assert not out.exists()  # refused before anything was written


def test_a_budget_without_dp_is_refused(tmp_path: Path) -> None:
    config = _config(tmp_path, "budget_epsilon = 10.0\n")
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", "-c", str(config), "--out", str(out)])
    _one_line_error(result, "dp.budget_epsilon", "--dp")
    assert not out.exists()


def test_a_lifetime_budget_on_real_data_needs_a_ledger_folder(tmp_path: Path) -> None:
    config = _config(tmp_path, "enabled = true\ntarget_epsilon = 8.0\nbudget_epsilon = 10.0\n")
    result = runner.invoke(app, ["run", "-c", str(config), "--out", str(tmp_path / "run")])
    _one_line_error(result, "dp.ledger_dir", "dp.budget_epsilon")


def test_two_runs_on_the_same_patients_charge_one_ledger(
    make_config, tmp_path: Path, one_torch_thread
) -> None:
    """The sites of a `secure-fed run` (in-process, or the simulation's ClientApp: both build them
    with SiteRuntime.create) join the ledger in `[dp] ledger_dir` as deployed nodes do."""
    ledgers = tmp_path / "ledgers"
    spent = []
    for name in ("first", "second"):
        cfg = make_config(
            name,
            dp__enabled=True,
            dp__target_epsilon=8.0,
            dp__budget_epsilon=10.0,
            dp__sample_rate=0.5,
            dp__ledger_dir=str(ledgers),
            fed__method="fedavg",
        )
        runtime = SiteRuntime.create(cfg, "site0", run_id=run_id_for(Path(cfg.out)))
        assert runtime.privacy is not None
        admitted = runtime.privacy.admit_round(1)
        spent.append((admitted.ok, admitted.would_be_epsilon))
    store = site_ledger_of(cfg, "site0")
    assert store.path.exists() and len(store.runs) == 2  # both runs are this site's
    # the second run's round is priced on top of the first run's: the budget of 10 holds for life
    assert spent[0][0] and spent[1][1] > spent[0][1]
