"""tools/bench_tables.py's distributed-DP shapers on the committed raw outputs
(docs/results/distributed-*.json): the docs' tables are those files shaped, figure for figure, and
the accounting table's two multipliers are each the smallest that meets ε (rechecked with the
project's accountants). Files and two RDP curves, no benchmark run: well under a second in all."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from secure_fed.dp.accountants import epsilon_rdp
from secure_fed.dp.distributed import rdp_to_epsilon
from secure_fed.dp.events import PoissonSampledGaussian
from secure_fed.dp.skellam import ORDERS, _subsampled_curve

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
_spec = importlib.util.spec_from_file_location("bench_tables", ROOT / "tools" / "bench_tables.py")
assert _spec is not None and _spec.loader is not None
bench_tables = importlib.util.module_from_spec(_spec)
sys.modules["bench_tables"] = bench_tables
_spec.loader.exec_module(bench_tables)


def _raw(name: str) -> dict[str, Any]:
    return json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))


def test_distributed_noise_rows_are_the_measured_ratios() -> None:
    raw = _raw("distributed-noise")
    table = bench_tables.shape("distributed-noise", raw, "cmd", "machine", None, "0" * 40)
    rows = {r[0]: r for r in table["rows"]}
    assert list(rows) == [f"h = {h}, c = {c}" for h in (3, 5, 10) for c in (0, 1)]
    h3 = raw["output"]["noise"][0]
    assert h3["h"] == 3
    # site std, distributed std, ratio, goal, met: from the measured fields, not the plan's
    assert rows["h = 3, c = 0"][1:6] == [
        f"{h3['site_mode_std']:.3f}",
        f"{h3['c0']['std']:.3f}",
        f"{h3['c0']['ratio']:.3f}",
        f"{h3['goal_ratio']:.3f}",
        "no" if not h3["c0"]["ratio_le_goal"] else "yes",
    ]
    assert rows["h = 10, c = 1"][3] == f"{raw['output']['noise'][2]['c1']['ratio']:.3f}"
    assert rows["h = 10, c = 1"][6] == f"{1 / math.sqrt(9):.3f}"
    assert "σ = 1.1188" in table["notes"][0]


def test_distributed_cost_rows_are_the_cpu_and_wall_ratios() -> None:
    raw = _raw("distributed-cost")
    table = bench_tables.shape("distributed-cost", raw, "cmd", "machine", None, "0" * 40)
    assert [r[0] for r in table["rows"]] == [
        "5 sites, default graph",
        "50 sites, complete graph",
        "50 sites, SecAgg+ graph",
    ]
    five, complete, sparse = raw["output"]["results"]
    cols = table["columns"]
    row = dict(zip(cols, table["rows"][0], strict=True))
    assert row["ratio, CPU"] == f"{five['ratio_cpu']:.2f}"
    assert row["ratio with setup, CPU"] == f"{five['cpu']['ratio_with_round_setup']:.2f}"
    assert table["rows"][1][cols.index("h (c)")] == f"{complete['honest_min']} (1)"
    assert table["rows"][2][cols.index("ratio, wall")] == f"{sparse['ratio_wall']:.2f}"


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("distributed-noise", "distributed-noise"),
        ("distributed-noise-accounting", "distributed-noise"),
        ("distributed-cost", "distributed-cost"),
        ("dp-passes", "dp-passes"),
        ("fedtar-release-noise", "fedtar-release-noise"),
    ],
)
def test_committed_table_is_the_raw_output_shaped_with_its_source(name: str, raw: str, tmp_path: Path):
    # the CLI, given only the raw file, takes command, commit, date and machine from it
    assert bench_tables.main([name, str(RESULTS / f"{raw}.json"), "--results", str(tmp_path)]) == 0
    fresh = json.loads((tmp_path / f"bench-{name}.json").read_text(encoding="utf-8"))
    committed = json.loads((RESULTS / f"bench-{name}.json").read_text(encoding="utf-8"))
    assert fresh == committed
    raw_source = _raw(raw)["source"]
    for key in ("command", "commit", "date", "machine"):
        assert committed["source"][key] == raw_source[key]


def test_an_output_that_states_no_command_is_refused(tmp_path: Path) -> None:
    bare = tmp_path / "out.json"
    bare.write_text(json.dumps(_raw("distributed-cost")["output"]), encoding="utf-8")
    assert bench_tables.main(["distributed-cost", str(bare), "--results", str(tmp_path)]) == 2
    assert not (tmp_path / "bench-distributed-cost.json").exists()


def test_columns_follow_from_the_raw_fields() -> None:
    raw = _raw("distributed-noise")
    rows = raw["output"]["accounting"]
    table = bench_tables.shape("distributed-noise-accounting", raw, "cmd", "machine", None, "0" * 40)
    assert [r[0] for r in table["rows"]] == [r["setting"] for r in rows]
    for row, shaped in zip(rows, table["rows"], strict=True):
        assert row["penalty"] == row["skellam_plan"] / row["site_sigma_exact"]
        honest = math.sqrt(row["h"] - row["c"])
        assert math.isclose(row["ratio"], row["skellam_plan"] / (honest * row["site_sigma_exact"]))
        assert math.isclose(
            row["ratio_general"], row["skellam_plan_general"] / (honest * row["site_sigma_exact"])
        )
        assert shaped[4] == f"{row['ratio']:.3f}"
        assert shaped[5] == f"{1 / honest:.3f}"
        assert shaped[7] == ("more noise" if row["ratio"] >= 1 else "less noise")
        assert shaped[9] == f"{row['penalty_general']:.2f}"
        assert shaped[10] == f"{row['ratio_general']:.3f}"
        # the symmetric bound never needs more noise than the general one
        assert row["skellam_plan"] <= row["skellam_plan_general"]
    verdict = {r[0]: r[7] for r in table["rows"]}
    # with the symmetric bound distributed mode releases less noise than site mode at every row;
    # under the general bound the recipe's own rate lost at ε = 1 and 2
    assert set(verdict.values()) == {"less noise"}
    general = {r["setting"]: r["ratio_general"] for r in rows}
    assert [general[f"hospital: ε = {e}, q = 0.1, 50 steps"] > 1 for e in (1, 2, 4, 8)] == [
        True,
        True,
        False,
        False,
    ]


def test_the_benchmark_rows_multipliers_are_each_the_smallest_meeting_epsilon() -> None:
    """Site mode's σ is the smallest Gaussian meeting ε; each Skellam plan's multiplier is within
    0.5 % of the smallest Gaussian meeting ε under its own subsampling bound (the Skellam correction
    and the rounding cost the rest)."""
    row = _raw("distributed-noise")["output"]["accounting"][0]
    assert not row["histogram"]
    eps, q, steps, delta = (
        row["epsilon"],
        row["sample_rate"],
        row["steps"],
        _raw("distributed-noise")["output"]["target"]["delta"],
    )
    orders = np.asarray(ORDERS, dtype=np.float64)

    def under(bound: str) -> Any:
        def epsilon_of(z: float) -> float:
            return rdp_to_epsilon(orders, _subsampled_curve(q, orders / (2 * z * z), bound) * steps, delta)

        return epsilon_of

    def exact(sigma: float) -> float:
        return epsilon_rdp([PoissonSampledGaussian(q, sigma, steps)], delta)

    assert exact(row["site_sigma_exact"]) <= eps < exact(0.999 * row["site_sigma_exact"])
    for bound, z in (("symmetric", row["skellam_plan"]), ("general", row["skellam_plan_general"])):
        assert under(bound)(z) <= eps < under(bound)(0.995 * z)


def test_fedtar_release_rows_are_the_measured_ratios_and_meet_the_target() -> None:
    """benchmarks/fedtar_release_noise.py's committed output: every effective noise is its release's
    noise over its own signal (the copies with √Σc_t² of theirs), each ratio in the table is the
    output's, and the one-vector release meets issue 63's target (≤ 1.1× FedAvg's effective noise
    at ε = 8 on the hospital config, uniform α) where the copies do not."""
    raw = _raw("fedtar-release-noise")
    out = raw["output"]
    assert out["config"] == "configs/hospital-scale-distributed.toml" and out["epsilon"] == 8.0
    std = {name: found["std_plan_all_survive"] for name, found in out["noise"].items()}
    # the one vector pads to FedAvg's length: the same plan, the same noise
    assert std["one-vector"] == std["fedavg"]
    assert out["noise"]["one-vector"]["padded_dim"] == out["noise"]["fedavg"]["padded_dim"]
    for name, found in out["noise"].items():  # the measurement checks the plan's figure
        assert abs(found["std_measured"] / std[name] - 1) < 0.01, name
    table = bench_tables.shape("fedtar-release-noise", raw, "cmd", "machine", None, "0" * 40)
    assert [r[0] for r in table["rows"]] == [row["alpha"] for row in out["rows"]]
    for row, shaped in zip(out["rows"], table["rows"], strict=True):
        fedavg = row["fedavg"]["effective_noise"]
        assert math.isclose(fedavg, std["fedavg"] / row["fedavg"]["signal"])
        c = np.asarray(row["chain_weights"])
        copies = math.sqrt(float(c @ c)) * std["copies"] / row["copies"]["signal"]
        assert math.isclose(row["copies"]["effective_noise"], copies)
        for key in ("one_vector", "one_kappa", "weights_alone"):
            assert math.isclose(row[key]["effective_noise"], std["one-vector"] / row[key]["signal"])
        assert shaped[3] == f"{row['copies']['effective_noise'] / fedavg:.2f}"
        assert shaped[5] == f"{row['one_vector']['effective_noise'] / fedavg:.2f}"
        # the one vector is below the copies at every α measured
        assert row["one_vector"]["effective_noise"] < row["copies"]["effective_noise"]
    uniform = out["rows"][0]
    assert uniform["alpha"] == "uniform"
    assert uniform["one_vector"]["over_fedavg"] <= out["target_over_fedavg"] == 1.1
    assert uniform["copies"]["over_fedavg"] >= 2.1  # the measurement of the copies
    assert out["one_vector_default"] is True


def test_the_release_default_is_what_the_benchmark_chose() -> None:
    from secure_fed.config import TrainConfig

    chose = "one-vector" if _raw("fedtar-release-noise")["output"]["one_vector_default"] else "copies"
    assert TrainConfig().fedtar_release == chose


def test_distributed_survivors_rows_are_the_measured_ratios_and_the_plan_holds_mu_total() -> None:
    """The table's ratios are the measured std over the curator's σ·C; what the plan predicts is
    (kept variances over mu_total) m/(m − c) per revealing share, and every case keeps ≥ mu_total."""
    raw = _raw("distributed-survivors")
    out = raw["output"]
    table = bench_tables.shape("distributed-survivors", raw, "cmd", "machine", None, "0" * 40)
    rows = {row[0]: row for row in table["rows"]}
    prv = out["curator_sigma"]["prv"] * out["clip"]
    for cell in out["rows"]:
        assert rows[cell["case"]][3] == f"{cell['std'] / prv:.3f}"
        assert cell["honest_floor_over_mu"] >= 1 - 1e-12
    by_case = {cell["case"]: cell for cell in out["rows"]}
    z = out["skellam_noise_multiplier"]
    # all five reveal for m = 5: 5·mu/4; unlayered: 5·mu/3 (h − c = 3)
    assert by_case["all five survive"]["ratio_prv_expected"] == pytest.approx(
        math.sqrt(5 / 4) * z * out["clip"] / prv
    )
    assert by_case["unlayered, all five"]["ratio_prv_expected"] == pytest.approx(
        math.sqrt(5 / 3) * z * out["clip"] / prv
    )
    # issue 64's dropout target holds on the measurement, the all-five one is reported as it is
    assert by_case["one dropout before masking"]["ratio_prv"] <= 1.25
    assert by_case["one dropout after confirming"]["ratio_prv"] <= 1.25


def test_skellam_gdp_rows_are_the_outputs_and_the_rdp_row_is_the_ledgers() -> None:
    """The table's cells are the raw output's; the RDP row's plan prices at the target ε (what the
    ledger charges), the route's ratio follows from its z the way the survivors table's does."""
    raw = _raw("skellam-gdp")
    out = raw["output"]
    table = bench_tables.shape("skellam-gdp", raw, "cmd", "machine", None, "0" * 40)
    rdp, route = out["rows"]
    assert [row[0] for row in table["rows"]] == [rdp["accountant"], route["accountant"]]
    assert table["rows"][1][4] == f"{route['ratio_all_five']:.3f}"
    assert rdp["sound"] == "yes" and route["sound"] != "yes"
    assert rdp["epsilon_of_running_plan"] == pytest.approx(out["epsilon"], rel=1e-4)
    assert route["epsilon_of_running_plan"] < rdp["epsilon_of_running_plan"]
    for row in (rdp, route):
        expected = math.sqrt(5 / 4) * row["z"] * (1 + out["inflation"]) / out["curator_sigma_prv"]
        assert row["ratio_all_five"] == pytest.approx(expected, rel=1e-12)


# each committed benchmarks/alpha_clip.py output, and the configs whose FedTAR cells take its C_α:
# paper-drift-0-distributed shares paper-drift-distributed's public sizes, rounds, rate, C and lr, and
# the emulation reads no site data, so their drift (the one key they differ in) does not enter
ALPHA_CLIP = {
    "alpha-clip-paper-drift": (
        "configs/paper-drift-distributed.toml",
        ("configs/paper-drift-distributed.toml", "configs/paper-drift-0-distributed.toml"),
    ),
    "alpha-clip-hospital": (
        "configs/hospital-scale-distributed.toml",
        ("configs/hospital-scale-distributed.toml",),
    ),
}


def test_alpha_clip_table_is_the_raw_outputs_and_the_configs_carry_the_rule() -> None:
    """benchmarks/alpha_clip.py's committed outputs shaped are the committed table, figure for figure;
    C_α is the pooled median to one digit over round 1, the middle and the last round; and each
    preset measured carries it as [dp] alpha_clip."""
    from secure_fed.config import DPConfig, load_config

    raws = [_raw(name) for name in ALPHA_CLIP]
    committed = json.loads((RESULTS / "bench-alpha-clip.json").read_text(encoding="utf-8"))
    fresh = bench_tables.shape("alpha-clip", raws, "cmd", "machine", None, "0" * 40)
    assert (fresh["columns"], fresh["rows"], fresh["notes"]) == (
        committed["columns"],
        committed["rows"],
        committed["notes"],
    )
    for (config, carriers), raw in zip(ALPHA_CLIP.values(), raws, strict=True):
        assert raw["config"] == config and raw["release"] == "one-vector"
        rounds = raw["target"]["rounds"]
        assert [r["round"] for r in raw["rounds"]] == [1, math.ceil(rounds / 2), rounds]
        assert raw["pooled"]["norms"] == 3 * raw["public"]["held_out_patients"]
        # the rate rule: the target's noise on the averaged step
        noise = raw["noise"]
        assert math.isclose(noise["emulated_step_std"], noise["target_step_std"])
        assert raw["alpha_clip"] == float(f"{raw['pooled']['median']:.1g}")
        for path in carriers:
            assert load_config(ROOT / path).dp.alpha_clip == raw["alpha_clip"], path
    # the presets differ, so the default stays where it was
    assert DPConfig().alpha_clip == 1.0


def test_alpha_shares_table_is_the_raw_output_and_the_shares_carry_what_they_should() -> None:
    """benchmarks/alpha_shares.py's committed output shaped is the committed table, figure for
    figure; the measured noise of the released α sum is √m × σ_α·C_α with each site's own release and
    √(m/(m − c)) × with shares (within 4 standard errors), the issue's cut from √5 to √(5/4)."""
    from tests.scripts import load_script

    raw = _raw("alpha-shares")
    committed = json.loads((RESULTS / "bench-alpha-shares.json").read_text(encoding="utf-8"))
    assert load_script("benchmarks/alpha_shares.py").shape(raw) == committed
    out = raw["output"]
    assert out["sites"] == 5 and out["colluders"] == 1 and not out["quick"]
    cases = {c["case"]: c for c in out["cases"]}
    m, c = out["sites"], out["colluders"]
    assert cases["before"]["expected"] == pytest.approx(math.sqrt(m))
    assert cases["after"]["expected"] == pytest.approx(math.sqrt(m / (m - c)))
    for case in cases.values():
        assert abs(case["std_over_unit"] - case["expected"]) <= 4 * case["standard_error"], case
