"""The paper's protocol beside ours (`make results-paper`): the sweep's method variants set what they
say, the Table-1 layout and the FedTAR − FedAvg differences come from the cells (hand-made numbers
here), the drift plot places each sweep by its config, and the recipe's configs are the twins they
claim to be."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from secure_fed.config import RunConfig, load_config
from secure_fed.lab import cells as lab_cells
from secure_fed.lab import statistics as lab_stats
from secure_fed.lab import tables as lab_tables
from tests.scripts import ROOT, load_script

doc_tables = load_script("tools/doc_tables.py")
plot_paper_drift = load_script("tools/plot_paper_drift.py")


def _cells(method: str, epsilon: float | None, values: list[float]) -> list[dict]:
    return [
        {
            "method": method,
            "epsilon": epsilon,
            "seed": s,
            "test": {
                m: v * k for m, k in zip(lab_stats.PAPER_METRICS, (0.1, 0.01, 0.2, 1.0, 0.05), strict=True)
            },
        }
        for s, v in enumerate(values)
    ]


def test_plain_baselines_drop_the_patient_head_and_convex_variants_change_the_step() -> None:
    base = RunConfig()
    for method in lab_cells.PLAIN_BASELINES:
        cfg = lab_cells.seed_config(base, method, None, 1)
        assert cfg.fed.method == method.removesuffix("-plain")
        assert not cfg.model.hyper_lora and not cfg.hyper_lora_on
        assert cfg.train.fedtar_chain == "residual"
    for method in lab_cells.CONVEX_VARIANTS:
        cfg = lab_cells.seed_config(base, method, None, 1)
        assert cfg.fed.method == method.removesuffix("-convex")
        assert cfg.train.fedtar_chain == "convex"
    ours = lab_cells.seed_config(base, "fedavg", None, 1)
    assert ours.fed.method == "fedavg" and ours.hyper_lora_on and ours.train.fedtar_chain == "residual"
    assert set(lab_cells.VARIANTS) <= set(lab_cells.METHODS)


def test_the_paper_variants_with_distributed_dp_validate() -> None:
    base = load_config(ROOT / "configs" / "paper-drift-distributed.toml")
    for method in ("fedavg-plain", "fedtar-convex"):
        cfg = RunConfig.model_validate(lab_cells.seed_config(base, method, 8.0, 0).model_dump())
        assert cfg.dp.enabled and cfg.dp.noise == "distributed" and cfg.dp.target_epsilon == 8.0


def test_paper_table_has_a_row_per_method_and_a_dash_without_a_dp_variant() -> None:
    runs = [*_cells("fedtar", None, [3.0, 3.2, 3.4]), *_cells("fedtar", 8.0, [1.0, 1.2, 1.4]),
            *_cells("fedprox-plain", None, [2.0, 2.0, 2.3])]  # fmt: skip
    columns, rows = doc_tables._parse_markdown(lab_tables.paper_table(runs))
    assert columns[:2] == ["method", "seeds (ε=∞ / ε=8)"]
    assert columns[2:] == [f"{m} ε=∞" for m in lab_stats.PAPER_METRICS] + [
        f"{m} ε=8" for m in lab_stats.PAPER_METRICS
    ]
    assert [r[0] for r in rows] == ["fedtar", "fedprox-plain"]  # METHODS order
    cider = columns.index("CIDEr ε=∞")
    half = lab_cells.t975(2) * float(np.std([3.0, 3.2, 3.4], ddof=1)) / np.sqrt(3)
    assert rows[0][cider] == f"3.200 [{3.2 - half:.3f}, {3.2 + half:.3f}]"
    assert rows[0][1] == "3 / 3"
    assert rows[1][1] == "3 / —"
    assert rows[1][columns.index("BLEU-1 ε=8") :] == ["—"] * len(lab_stats.PAPER_METRICS)


def test_paper_table_from_a_kept_record_joined_with_its_distributed_sweep(tmp_path: Path) -> None:
    """The ε = ∞ cells in one sweep, the ε = 8 cells in the distributed-DP one: --with joins them."""
    plain = [*_cells("fedtar", None, [3.0, 3.5]), *_cells("fedavg", None, [2.5, 2.5]),
             *_cells("fedavg-plain", None, [2.0, 2.1])]  # fmt: skip
    private = [*_cells("fedtar", 8.0, [1.0, 1.5]), *_cells("fedavg", 8.0, [1.2, 1.1])]
    for name, runs in (("drift", plain), ("drift-distributed", private)):
        (tmp_path / f"{name}.json").write_text(json.dumps({"config": {}, "base_model": "b", "runs": runs}))
    data = doc_tables.from_sweep(
        tmp_path / "drift.json", "paper", "T", "cmd", "m", adding=[tmp_path / "drift-distributed.json"]
    )
    rows = {r[0]: r for r in data["rows"]}
    assert rows["fedtar"][1] == "2 / 2" and rows["fedavg-plain"][1] == "2 / —"
    diff = doc_tables.from_sweep(
        tmp_path / "drift.json",
        "paper-differences",
        "T",
        "cmd",
        "m",
        adding=[tmp_path / "drift-distributed.json"],
    )
    labels = [r[0] for r in diff["rows"]]
    assert labels == ["fedtar − fedavg, ε=∞", "fedtar − fedavg, ε=8", "fedtar − fedavg-plain, ε=∞"]
    cider = diff["columns"].index("Δ CIDEr [95 % CI]")
    # per seed: 3.0 − 2.5 = 0.5, 3.5 − 2.5 = 1.0; at ε = 8: −0.2, +0.4
    half = lab_cells.t975(1) * float(np.std([0.5, 1.0], ddof=1)) / np.sqrt(2)
    assert diff["rows"][0][cider] == f"+0.750 [{0.75 - half:+.3f}, {0.75 + half:+.3f}]"
    assert diff["rows"][1][cider].startswith("+0.100 [")


def test_privacy_cost_is_each_method_at_epsilon_minus_itself_without_dp_paired_by_seed(
    tmp_path: Path,
) -> None:
    plain = [*_cells("fedtar", None, [3.0, 3.5, 3.1]), *_cells("fedavg", None, [2.5, 2.5, 2.4]),
             *_cells("base", None, [0.5, 0.5, 0.5])]  # fmt: skip
    private = [*_cells("fedtar", 8.0, [1.0, 1.5, 2.0]), *_cells("fedavg", 8.0, [1.2, 1.1, 1.3])]
    for name, runs in (("drift", plain), ("drift-distributed", private)):
        (tmp_path / f"{name}.json").write_text(json.dumps({"config": {}, "base_model": "b", "runs": runs}))
    data = doc_tables.from_sweep(
        tmp_path / "drift.json", "privacy-cost", "T", "cmd", "m", adding=[tmp_path / "drift-distributed.json"]
    )
    assert data["columns"][0] == "method at ε − the same method without DP"
    # base has no private cells, so no row; each row pairs a method with itself, never another
    assert [r[0] for r in data["rows"]] == ["fedtar: ε=8 − ε=∞", "fedavg: ε=8 − ε=∞"]
    cider = data["columns"].index("Δ CIDEr [95 % CI]")
    fedtar = [1.0 - 3.0, 1.5 - 3.5, 2.0 - 3.1]  # per seed
    half = lab_cells.t975(2) * float(np.std(fedtar, ddof=1)) / np.sqrt(3)
    mean = float(np.mean(fedtar))
    assert data["rows"][0][cider] == f"{mean:+.3f} [{mean - half:+.3f}, {mean + half:+.3f}]"
    assert data["rows"][1][cider].startswith("-1.267 [")


def _record(path: Path, drift: float, runs: list[dict]) -> Path:
    config = RunConfig().model_dump(mode="json", exclude={"out"})
    config["data"]["synth"]["institution_drift"] = drift
    path.write_text(json.dumps({"config": config, "base_model": "b", "runs": runs}))
    return path


def test_drift_plot_places_each_sweep_by_its_drift_and_joins_one_drifts_sweeps(tmp_path: Path) -> None:
    def pair(epsilon: float | None, fedtar: list[float], fedavg: list[float]) -> list[dict]:
        return [*_cells("fedtar", epsilon, fedtar), *_cells("fedavg", epsilon, fedavg)]

    sweeps = [
        _record(tmp_path / "d0.json", 0.0, pair(None, [2.0, 2.0], [3.0, 2.5])),
        _record(tmp_path / "d0-dp.json", 0.0, pair(8.0, [1.0, 1.0], [1.5, 1.5])),
        _record(tmp_path / "d5.json", 0.5, pair(None, [4.0, 4.2], [3.0, 3.0])),
    ]
    points = plot_paper_drift.drift_points(sweeps)
    got = [(p["drift"], p["epsilon"], p["n"], round(p["mean"], 6)) for p in points]
    assert got == [(0.0, None, 2, -0.75), (0.0, 8.0, 2, -0.5), (0.5, None, 2, 1.1)]
    assert points[1]["ci"] == pytest.approx([-0.5, -0.5])  # both seeds differ by −0.5: no spread
    out = tmp_path / "p.png"
    argv = [*map(str, sweeps), "-o", str(out), "--points", str(tmp_path / "p.json")]
    assert plot_paper_drift.main(argv) == 0
    assert out.read_bytes().startswith(b"\x89PNG")
    assert json.loads((tmp_path / "p.json").read_text())["points"] == json.loads(json.dumps(points))
    with pytest.raises(plot_paper_drift.DriftPlotError, match="also in another sweep"):
        plot_paper_drift.drift_points([sweeps[0], sweeps[0]])


def _without(cfg: RunConfig, *paths: str) -> dict:
    dumped = cfg.model_dump(mode="json", exclude={"out"})
    for path in paths:
        *parents, leaf = path.split(".")
        node = dumped
        for p in parents:
            node = node[p]
        node.pop(leaf)
    return dumped


def test_the_recipes_configs_are_twins() -> None:
    """drift 0 is the default benchmark; each distributed config is its site twin but for the noise
    placement and the round count (80 one-step rounds: site mode's 10 rounds x 2 epochs x 4 steps)."""
    names = (
        "results",
        "paper-drift",
        "paper-drift-0",
        "paper-drift-distributed",
        "paper-drift-0-distributed",
    )
    configs = {n: load_config(ROOT / "configs" / f"{n}.toml") for n in names}
    assert configs["paper-drift-0"] == configs["results"]
    drifted = configs["paper-drift"].data.synth
    assert (drifted.institution_drift, drifted.institution_clusters) == (0.5, 1.0)
    changed = ("dp", "fed.rounds", "train.local_epochs")
    for site, dist in (
        ("paper-drift", "paper-drift-distributed"),
        ("paper-drift-0", "paper-drift-0-distributed"),
    ):
        assert _without(configs[site], *changed) == _without(configs[dist], *changed)
        assert configs[dist].fed.rounds * configs[dist].train.local_epochs == (
            configs[site].fed.rounds * configs[site].train.local_epochs / configs[site].dp.sample_rate
        )


def test_the_makefile_recipe_runs_every_paper_method_at_both_drifts() -> None:
    text = (ROOT / "Makefile").read_text()
    names = dict(re.findall(r"^(PAPER_\w+) := (.+)$", text, re.MULTILINE))
    lines = [
        shlex.split(m)
        for m in re.findall(
            r"^\t\$\(SWEEP\) (--config configs/paper-.+ --methods \$\(PAPER_.+)$", text, re.MULTILINE
        )
    ]
    assert len(lines) == 4
    for args in lines:
        opt = {args[i]: args[i + 1] for i in range(0, len(args) - 1, 2)}
        methods = names[opt["--methods"].strip("$()")].split(",")
        assert set(methods) <= set(lab_cells.METHODS) and opt["--seeds"] == "0,1,2"
        private = "distributed" in opt["--config"]
        assert opt["--epsilons"] == ("8" if private else "inf")
        if private:
            for method in methods:
                cfg = lab_cells.seed_config(load_config(ROOT / opt["--config"]), method, 8.0, 0)
                RunConfig.model_validate(cfg.model_dump())  # a DP variant exists
    wanted = {
        *lab_cells.PLAIN_BASELINES,
        "fedavg",
        "fedtar",
        "fedtar-no-gmm",
        "fedtar-no-temporal",
        "fedtar-convex",
    }
    assert wanted <= set(names["PAPER_METHODS"].split(","))


def test_the_committed_wall_time_estimate_is_what_the_records_give() -> None:
    """docs/results/paper-grid-time.json is benchmarks/paper_grid_time.py's table of the committed
    records and the Makefile's recipe; the estimate is each drift's cells at their kind's rate."""
    grid_time = load_script("benchmarks/paper_grid_time.py")
    committed = json.loads((ROOT / "docs" / "results" / "paper-grid-time.json").read_text())
    est = grid_time.estimate()
    fresh = grid_time.table(est, committed["source"]["commit"], committed["source"]["date"])
    assert fresh == committed, "stale: run python benchmarks/paper_grid_time.py --write"
    rates = est["rates"]
    assert rates["non_private"] == pytest.approx(65 / 60)  # the default benchmark: 12 methods x 5 seeds
    assert rates["site_private"] == pytest.approx(74.7 / 30)  # fedavg, fedtar x 5 ε x 3 seeds
    drift = next(t for t in est["targets"] if t["target"] == "results-paper-drift")
    assert drift["cells"] == 12 * 3 + 6 * 3
    assert est["j2_hours"] <= 8


def test_the_powered_recipe_runs_the_seeds_the_power_computation_asks_for_with_floor_and_ceiling() -> None:
    """Issue 63: paired SD ≈ 0.23 CIDEr asks for ≥ 6 seeds; base and central in the table; the
    private twin runs only methods with a distributed-DP variant; the visit-blind FedTAR beside it."""
    text = (ROOT / "Makefile").read_text()
    seeds = re.search(r"^PAPER_POWERED_SEEDS := (.+)$", text, re.MULTILINE).group(1).split(",")
    assert len(set(seeds)) >= 6
    lines = [
        shlex.split(m)
        for m in re.findall(
            r"^\t\$\(SWEEP\) (--config configs/paper-.+ --seeds \$\(PAPER_POWERED_SEEDS\) .+)$",
            text,
            re.MULTILINE,
        )
    ]
    assert len(lines) == 8
    by_out = {}
    for args in lines:
        opt = {args[i]: args[i + 1] for i in range(0, len(args) - 1, 2)}
        by_out[opt["-o"]] = opt
        private = "distributed" in opt["--config"]
        assert opt["--epsilons"] == ("8" if private else "inf")
        for method in opt["--methods"].split(","):
            assert method in lab_cells.METHODS
            if private:
                cfg = lab_cells.seed_config(load_config(ROOT / opt["--config"]), method, 8.0, 0)
                RunConfig.model_validate(cfg.model_dump())
    plain = by_out["runs/results-paper-powered"]
    assert {"base", "central", "fedavg-plain", "fedavg", "fedtar"} <= set(plain["--methods"].split(","))
    assert by_out["runs/results-paper-powered-distributed"]["--methods"] == "fedavg-plain,fedavg,fedtar"
    for out in (
        "runs/results-paper-powered-visit-blind",
        "runs/results-paper-powered-visit-blind-distributed",
    ):
        assert by_out[out]["--methods"] == "fedtar" and by_out[out]["--set"] == "model.visit_input=false"
    for out in ("runs/results-paper-powered-ablation", "runs/results-paper-powered-ablation-distributed"):
        assert by_out[out]["--methods"] == "fedtar-no-temporal"
    # the private FedTAR cells again at the sized C_α: the config the other private cells name, which
    # now carries benchmarks/alpha_clip.py's value
    aware = by_out["runs/results-paper-powered-calpha-distributed"]
    blind = by_out["runs/results-paper-powered-calpha-visit-blind-distributed"]
    assert aware["--methods"] == blind["--methods"] == "fedtar" and "--set" not in aware
    assert blind["--set"] == "model.visit_input=false"
    assert aware["--config"] == by_out["runs/results-paper-powered-distributed"]["--config"]
    assert load_config(ROOT / aware["--config"]).dp.alpha_clip == 0.01
