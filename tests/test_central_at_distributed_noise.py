"""benchmarks/central_at_distributed_noise.py: private `central` trained with the noise distributed
FedAvg's sums carried. The kept cells must have trained at that noise (the distributed plan's z
times √(m / (h − c)) for the five sites that added a share), must say the small ε they spent, and
the committed table must be what the kept records give."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
noise = load_script("benchmarks/central_at_distributed_noise.py")
EPSILONS = (8.0, 4.0, 2.0, 1.0)


@pytest.fixture(scope="module")
def plans() -> dict[float, dict]:
    return {e: noise.plan_noise(e) for e in EPSILONS}


def _kept_cells() -> list[dict]:
    paths = sorted(noise.KEPT.glob(f"{noise.NAME}-eps*.json"))
    assert paths, "no kept cells: run the script's documented commands"
    return [cell for path in paths for cell in json.loads(path.read_text(encoding="utf-8"))["runs"]]


def test_the_released_noise_is_the_five_shares_the_plan_sizes() -> None:
    """z·√(5/(h − c)) is the std, over C, of five shares of share_mu integer variance at granularity γ."""
    from secure_fed.config import load_config
    from secure_fed.dp.distributed.run import plan_for

    cfg = load_config(
        noise.DISTRIBUTED_CONFIG,
        {
            **noise.DISTRIBUTED_RECIPE,
            "dp.enabled": True,
            "dp.target_epsilon": 2.0,
            "dp.amplification": noise.KEPT_AMPLIFICATION,
        },
    )
    plan = plan_for(cfg, noise.DIM, noise.SITES)
    found = noise.plan_noise(2.0)
    released = plan.gamma * math.sqrt(noise.SITES * plan.share_mu) / plan.clip
    assert found["released_multiplier"] == pytest.approx(released, rel=1e-9)
    assert (found["honest_min"], found["colluders"]) == (4, 1)
    assert found["released_multiplier"] > found["plan_multiplier"] > found["central_sigma"]


def test_each_kept_cell_trained_at_its_distributed_runs_released_noise(plans: dict[float, dict]) -> None:
    cells = _kept_cells()
    assert {c["epsilon"] for c in cells} <= set(EPSILONS)
    for cell in cells:
        privacy = cell["privacy"]
        assert cell["method"] == "central" and cell["base_model"] == "f2154a8f26190d7a"
        assert privacy["noise_multiplier"] == pytest.approx(plans[cell["epsilon"]]["released_multiplier"])
        # the ledger prices the Gaussian that ran: below the ε of the run whose noise it carries
        assert privacy["epsilon"]["pooled"]["rdp"] < cell["epsilon"]
        assert (privacy["steps"], privacy["sample_rate"], privacy["clip"]) == (50, 0.1, 9.0)


def test_committed_table_is_what_the_kept_records_give(plans: dict[float, dict]) -> None:
    committed = json.loads(noise.TABLE.read_text(encoding="utf-8"))
    fresh = noise.table(plans, committed["source"]["commit"], committed["source"]["date"])
    assert fresh == committed, "stale: run python benchmarks/central_at_distributed_noise.py --keep --write"


@pytest.mark.slow
def test_plan_only_prints_each_epsilons_noise_and_runs_nothing(tmp_path: Path) -> None:
    """The documented first command: the σ per ε as JSON, no sweep folder made."""
    from tests.scripts import run_script

    out = tmp_path / "runs"
    done = run_script(
        "benchmarks/central_at_distributed_noise.py", "--plan-only", "--epsilons", "8", "-o", str(out)
    )
    assert done.returncode == 0, done.stderr
    (plan,) = json.loads(done.stdout)["plans"]
    assert plan["epsilon"] == 8.0 and plan["released_multiplier"] == pytest.approx(1.2338, abs=1e-4)
    assert not out.exists()


def test_a_smaller_rate_plans_what_the_accounting_benchmark_found() -> None:
    """The override reaches the plan: at q = 0.02 over 250 steps, ε = 1, the committed accounting
    table's Skellam plan under the general bound the kept runs used (benchmarks/distributed_noise.py)
    is this plan's z."""
    table = json.loads((ROOT / "docs/results/bench-distributed-noise-accounting.json").read_text())
    (row,) = [r for r in table["rows"] if r[0] == "hospital: ε = 1, q = 0.02, 250 steps"]
    general = row[table["columns"].index("general bound: plan")]
    plan = noise.plan_noise(1.0, overrides={"dp.sample_rate": 0.02, "fed.rounds": 250})
    assert plan["plan_multiplier"] == pytest.approx(float(general), abs=1e-4)
    assert plan["plan_multiplier"] < noise.plan_noise(1.0)["plan_multiplier"]


def test_the_smaller_rate_cells_ran_that_rate_over_the_same_passes_within_their_epsilon() -> None:
    distributed_name, central_name = noise.RATE_RECORDS[0.02]
    distributed, central = noise._record(distributed_name), noise._record(central_name)
    assert distributed["config"]["dp"]["noise"] == "distributed"
    assert (distributed["config"]["dp"]["sample_rate"], distributed["config"]["fed"]["rounds"]) == (0.02, 250)
    assert (central["config"]["dp"]["sample_rate"], central["config"]["fed"]["rounds"]) == (0.02, 5)
    for cell in distributed["runs"] + central["runs"]:
        assert cell["base_model"] == "f2154a8f26190d7a"
        spent = [e["rdp"] for e in cell["privacy"]["epsilon"].values()]
        assert spent and max(spent) <= cell["epsilon"] * (1 + 1e-6)
    for cell in central["runs"]:
        assert (cell["privacy"]["sample_rate"], cell["privacy"]["steps"]) == (0.02, 250)


def test_committed_rates_table_is_what_the_kept_records_give() -> None:
    committed = json.loads(noise.RATES_TABLE.read_text(encoding="utf-8"))
    fresh = noise.rates_table(committed["source"]["commit"], committed["source"]["date"])
    assert fresh == committed, "stale: run python benchmarks/central_at_distributed_noise.py --write-rates"


def test_write_rates_renders_the_committed_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The documented last command, run on the kept records (its --keep-rates half needs runs/)."""
    out = tmp_path / "hospital-sampling-rate.json"
    monkeypatch.setattr(noise, "RATES_TABLE", out)
    assert noise.main(["--write-rates", "--epsilons", "1"]) == 0
    written, committed = (
        json.loads(p.read_text(encoding="utf-8")) for p in (out, ROOT / "docs/results" / out.name)
    )
    assert {k: v for k, v in written.items() if k != "source"} == {
        k: v for k, v in committed.items() if k != "source"
    }
    assert written["source"]["command"] == committed["source"]["command"]
