"""Every benchmark docs/BENCHMARKS.md times runs as a smoke run (`--quick`, or for upload_bytes.py a
small full run) and prints one JSON object.

The figures in BENCHMARKS.md come from the full commands given with each section (their JSON in
docs/results/bench-*.json); these runs only keep the scripts, their flags and the fields the
document quotes from drifting. (gpu.py, threads.py
and tokenizer_coverage.py run as documented in tests/model/test_gpu_benchmark.py.)
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.scripts import ROOT, load_script, run_script


def _tool(name: str) -> Any:
    return load_script(f"tools/{name}.py")


def _smoke(script: str, *args: str) -> Any:
    done = run_script(f"benchmarks/{script}", "--quick", *args)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout)  # the whole of stdout is one JSON object


@pytest.mark.bench
def test_dp_overhead_smoke_and_where_the_premium_goes(cache_dir: Path) -> None:
    out = _smoke(
        "dp_overhead.py",
        "--presets",
        "tiny",
        "--modes",
        "ew",
        "--no-memory",
        "--profile",
        "--cache",
        str(cache_dir),
    )
    (result,) = out["results"]
    assert out["target_ratio"] == 1.2 and result["fastest_dp_mode"] == "ew"
    # which step is faster is the machine's business (a loaded CI machine inverted it once); the
    # fields the docs quote are there and positive, and privatize is timed inside the DP step
    assert result["cpu"]["ratio_of_medians"]["dp_ew"] > 0
    assert 0 < result["dp_split"]["privatize_ms"] < result["dp_split"]["step_ms"]
    premium = result["dp_premium"]
    ops = {row["op"]: row for row in premium["top_ops"]}
    # ExpandedWeights computes each row's gradient in ops the non-private step never runs (its
    # forward op or its backward, whichever of the two a loaded machine's short profile ranks in)
    per_row = [op for op in ops if op.startswith("LinearPerSampleGrad")]
    assert per_row and all(ops[op]["calls"][0] == 0 for op in per_row)
    assert premium["profiled_ms_per_step"]["dp"] > 0 and premium["profiled_ms_per_step"]["non_private"] > 0


def test_ckks_smoke() -> None:
    out = _smoke("ckks.py")
    (row,) = out["per_t"]
    assert out["sites"] == 5 and row["T"] == 5 and row["ciphertext_bytes"] > 0
    # the encrypted round's sum matches the plain one to CKKS precision
    assert row["round_plain"]["max_abs_error"] == 0.0 and row["round_he"]["max_abs_error"] < 1e-6
    # docs/BENCHMARKS.md's CKKS table is this output shaped: every field it reads is still there
    table = _tool("bench_tables").shape("ckks", out, "cmd", "machine", None, "0" * 40)
    (shaped,) = table["rows"]
    assert shaped[:2] == [5, 5] and len(shaped) == len(table["columns"])


@pytest.mark.parametrize(
    "script",
    [
        pytest.param("secagg.py", marks=pytest.mark.slow),
        pytest.param("round_time.py", marks=pytest.mark.bench),
    ],
)
def test_smoke_runs(script: str) -> None:
    out = _smoke(script)
    assert out.get("results") or out.get("codec_baseline", {}).get("results"), list(out)
    if script == "round_time.py":  # --quick: plain rounds at T = 3, 2 and 3 sites
        table = _tool("bench_tables").shape("round-time", out, "cmd", "machine", None, "0" * 40)
        assert [r[0] for r in table["rows"]] == ["T = 3, 2 sites", "T = 3, 3 sites"]
        assert all(r[3:] == ["—", "—"] and float(r[1]) > 0 for r in table["rows"])


def _round_output(seconds: dict[tuple[int, int, str], list[float]]) -> dict[str, Any]:
    rows = [{"T": t, "sites": s, "mode": m, "round_s": xs} for (t, s, m), xs in seconds.items()]
    return {"results": rows}


def test_round_time_shapers_pool_runs_per_cell() -> None:
    """Two outputs of round_time.py are more runs of each cell: the median is over all of them."""
    bench_tables = _tool("bench_tables")
    first = _round_output({(5, 3, "plain"): [2.0, 2.2], (5, 3, "secagg"): [2.4], (5, 3, "secagg_he"): [2.6]})
    second = _round_output({(5, 3, "plain"): [3.0], (5, 3, "secagg"): [2.0, 3.0], (5, 3, "secagg_he"): [2.2]})
    he = bench_tables.shape("round-he", [first, second], "cmd", "machine", None, "0" * 40)
    # plain 2.0, 2.2, 3.0 -> 2.2; SecAgg+ 2.4, 2.0, 3.0 -> 2.4; with CKKS 2.6, 2.2 -> 2.4
    assert he["rows"] == [["T = 5, 3 sites", "2.200 (2.00–3.00)", "2.400", "2.400", "1.09"]]
    secagg = bench_tables.shape("round-time-secagg", [first, second], "cmd", "machine", None, "0" * 40)
    assert secagg["rows"] == [["T = 5, 3 sites", "2.20 → 2.40", "1.09"]]
    hardened = _round_output(
        {(5, 3, "plain"): [1.0, 1.2, 1.1], (5, 3, "dp"): [1.3], (5, 3, "dp_he"): [1.5, 1.3]}
    )
    hardened |= {"repeats": 3, "training": {"steps_per_epoch": 4, "batch_patients": 2}}
    table = bench_tables.shape("round-hardened", hardened, "cmd", "machine", None, "0" * 40)
    assert table["rows"] == [
        ["T = 5, 3 sites", "1.100 (1.00–1.20)", "1.300 (1.30–1.30)", "1.400 (1.30–1.50)", "1.27"]
    ]
    # a cell with no DP run reads as a dash, not as a zero
    plain = bench_tables.shape("round-time", first, "cmd", "machine", None, "0" * 40)
    assert plain["rows"] == [["T = 5, 3 sites", "2.10", "0.70", "—", "—"]]


@pytest.mark.bench
def test_upload_bytes_measures_its_rounds() -> None:
    # not --quick: the wire bytes come from running SecAgg+ rounds, which refuse unsigned sites
    # (the full command failed at every round while the payload-only smoke run passed)
    done = run_script("benchmarks/upload_bytes.py", "--presets", "tiny", "--T", "1")
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout)
    (row,) = out["results"]
    assert set(row["methods"]) == {"fedtar_T1", "pooled_adapters", "full_model_fedavg"}
    for case in row["methods"].values():
        for kind in ("plain", "secagg"):
            for encoding in ("codec", "flower_records"):
                # what a site sends holds at least its payload; SecAgg+ adds keys and shares
                assert case[kind][encoding]["wire_bytes_sent_per_site"] > case[kind]["payload_bytes"]
        assert case["secagg"]["codec"]["wire_bytes_received_per_site"] > 0
    # the doc's table is this output shaped (tools/bench_tables.py): its fields are still there
    table = _tool("bench_tables").shape("upload-bytes", out, "cmd", "machine", None, "0" * 40)
    labels = [r[1] for r in table["rows"]]
    assert labels == ["FedTAR, T = 1", "pooled adapters", "full-model FedAvg"]
    t1 = row["methods"]["fedtar_T1"]
    assert table["rows"][0][2:5] == [
        f"{n:,}" for n in (t1["values"], t1["plain"]["payload_bytes"], t1["secagg"]["payload_bytes"])
    ]


def test_benchmarks_md_has_no_hand_typed_table() -> None:
    """Every table in docs/BENCHMARKS.md is rendered from docs/results/bench-*.json, whose agreement
    with the page tests/test_docs_tables.py checks; a table typed into the page could drift."""
    doc_tables = _tool("doc_tables")
    text = (ROOT / "docs" / "BENCHMARKS.md").read_text(encoding="utf-8")
    refs = doc_tables.references(text)
    assert refs and all(re.fullmatch(r"results/bench-[a-z0-9-]+\.json", r) for r in refs), refs
    outside = doc_tables.TABLE_RE.sub("", text)
    assert not [ln for ln in outside.splitlines() if re.match(r"\|\s*-{3}", ln.strip())]


@pytest.mark.bench
def test_secagg_flower_smoke() -> None:
    results = _smoke("secagg_flower.py")["results"]
    assert set(results) == {"ours", "flower"}
    assert all(
        len(rows) == 1 and rows[0]["dim"] == 10_000 and rows[0]["sites"] == 3 for rows in results.values()
    )
    # docs/BENCHMARKS.md's table is this output shaped: Flower's round, ours with and without the broadcast
    out = {"runtime": "flwr simulation", "results": results}
    table = _tool("bench_tables").shape("secagg-flower", out, "cmd", "machine", None, "0" * 40)
    assert [r[1] for r in table["rows"]] == [
        "FedAvg round (`SecAggPlusWorkflow`)",
        "broadcast + secure sum",
        "secure sum after the broadcast",
    ]
    # and ours beside its floor round: SecAgg+'s phases after the broadcast, each timed
    (ours,) = results["ours"]
    after = {
        mode: {
            k.removeprefix(f"{mode}_phase_").removeprefix("floor_")
            for k in ours
            if k.startswith(f"{mode}_phase_") and k.endswith("_s_median") and "_train_" not in k
        }
        for mode in ("secagg", "floor", "pipelined")
    }
    assert (
        after["floor"]
        == after["secagg"]
        == {
            "secagg_shares_s_median",
            "secagg_masked_s_median",
            "secagg_unmask_s_median",
        }
    )
    # the pipelined floor: the masked vectors came on the broadcast's replies, then only the unmask
    assert after["pipelined"] == {"secagg_unmask_s_median"}
    assert ours["floor_over_plain"] > 0 and ours["secagg_over_floor"] > 0 and ours["pipelined_over_plain"] > 0
    floor_table = _tool("bench_tables").shape("secagg-flower-floor", out, "cmd", "machine", None, "0" * 40)
    assert [row[0] for row in floor_table["rows"]] == [3]


@pytest.mark.slow
def test_distributed_noise_smoke() -> None:
    out = _smoke("distributed_noise.py")
    (row,) = out["noise"]
    assert row["h"] == 3 and row["site_mode_std"] > 0
    for mode in ("c0", "c1"):
        measured = row[mode]
        # the released sum's noise is measured through encode_share/decode_sum, and is what the plan says
        assert abs(measured["std"] / measured["std_expected"] - 1) < 0.1
        assert abs(measured["epsilon"] - out["target"]["epsilon"]) <= 1e-3
        assert measured["ratio"] == measured["std"] / row["site_mode_std"]
    assert all(value > 0 for value in out["timing_ms"].values()) and out["encode_over_site_noise"] > 0


@pytest.mark.slow  # a benchmark script in a subprocess: make test-fast leaves it out
def test_distributed_survivors_smoke() -> None:
    out = _smoke("distributed_survivors.py")
    cases = {row["case"]: row for row in out["rows"]}
    assert set(cases) == {
        "unlayered, all five",
        "all five survive",
        "one dropout before masking",
        "one dropout after confirming",
    }
    for row in out["rows"]:
        # measured through encode_(layered_)share, remove_layers and decode_sum, as the plan says
        assert abs(row["std"] / row["std_expected"] - 1) < 0.1
        assert row["honest_floor_over_mu"] >= 1 - 1e-12
    assert cases["all five survive"]["std_expected"] < cases["unlayered, all five"]["std_expected"]
    assert all(value > 0 for value in out["timing_ms"].values())


@pytest.mark.bench
def test_hospital_cost_smoke(cache_dir: Path) -> None:
    """benchmarks/hospital_cost.py: the per-unit costs docs/BENCHMARKS.md quotes and the grid
    estimate built from them (~15 s on an idle machine)."""
    out = _smoke("hospital_cost.py", "--cache", str(cache_dir))
    train = out["train"]
    for variant in ("non_private_before", "non_private_after", "dp_before", "dp_after"):
        assert train[variant]["ms_per_patient_epoch"] > 0 and train[variant]["patients_per_epoch"] > 0
    assert train["non_private_after_over_before"] > 0 and out["eval"]["ms_per_report"] > 0
    # the encoder carries LoRA in its blocks: its visual tokens are not frozen (no token cache)
    assert out["encoder_trainable"]["lora_in_every_block"]
    # scoring's cached decoding gives the ids of recomputing the prefix, on the same batch
    decode = out["decode"]
    assert decode["same_ids"] and decode["reports"] > 0
    assert all(ms > 0 for ms in decode["ms_per_report"].values())
    grid = out["grid_estimate"]
    assert grid["train_patients"] == 7000 and grid["epochs"] == 10  # the config's 10 rounds of 1 epoch
    assert grid["cells"] == {
        "base": 3,
        "local, central, fedavg, fedtar at ε = ∞": 12,
        "central, fedavg, fedtar at 5 finite ε": 45,
    }
    assert grid["total_h"] > 0


@pytest.mark.bench
def test_dp_recipe_smoke(cache_dir: Path) -> None:
    """benchmarks/dp_recipe.py: C from public per-patient gradient norms, the rate from public site
    sizes, σ per ε from the sites' own split (~15 s on an idle machine)."""
    out = _smoke("dp_recipe.py", "--cache", str(cache_dir))
    choice = out["choice"]
    assert out["public_patients"] == 8 and out["per_patient_grad_norm"]["median"] > 0
    assert choice["max_grad_norm"] == float(f"{out['per_patient_grad_norm']['median']:.1g}")
    assert choice["expected_batch"]["smallest_site"] >= 20
    sigmas = [out["sigma_by_epsilon"][e]["sigma"] for e in ("1", "2", "4", "8", "16")]
    assert sigmas == sorted(sigmas, reverse=True) and sigmas[-1] > 0  # less noise at larger ε


@pytest.mark.bench
def test_distributed_cost_smoke(cache_dir: Path) -> None:
    """benchmarks/distributed_cost.py: one private step per mode and its share of a real SecAgg+
    sum (float updates in site mode, ring shares in distributed mode) at 5 sites (~30 s loaded)."""
    out = _smoke("distributed_cost.py", "--cache", str(cache_dir))
    (row,) = out["results"]
    # at 5 sites SecAgg+'s graph is complete, so h = K − 1 fits every site's neighbourhood
    assert row["sites"] == 5 and row["variant"] == "default" and row["honest_min"] == 4
    assert row["colluders"] == 1 and row["secagg_degree"] == {"site_mode": 4, "distributed": 4}
    assert out["model"]["trainable"] == row["plan"]["dim"] <= row["plan"]["padded_dim"]
    for clock in ("cpu", "wall"):
        timing = row[clock]
        for part in (
            "site_step",
            "distributed_step",
            "site_sum",
            "distributed_sum",
            "distributed_removal",
            "round_setup",
        ):
            assert timing[f"{part}_ms"] > 0
        # the ratio is the two totals', each a step plus a fifth of its mode's secure sum
        total = (
            timing["distributed_step_ms"]
            + (timing["distributed_sum_ms"] + timing["distributed_removal_ms"]) / 5
        )
        assert timing["distributed_total_ms"] == pytest.approx(total)
        assert timing["ratio"] == pytest.approx(timing["distributed_total_ms"] / timing["site_total_ms"])
        assert timing["ratio_with_round_setup"] > timing["ratio"]
    assert out["privacy"]["site_mode_sigma"] > 0 and row["plan"]["share_mu"] > 0


@pytest.mark.bench
def test_dp_passes_smoke(cache_dir: Path) -> None:
    """benchmarks/dp_passes.py: a private pooled step in one pass and in passes of 8 patients, each
    in its own process, and the adapters after them (~30 s on an idle machine)."""
    out = _smoke("dp_passes.py", "--cache", str(cache_dir))
    one, parted = out["results"]
    assert one["max_patients_per_pass"] is None and parted["max_patients_per_pass"] == 8
    assert one["max_abs_diff_vs_one_pass"] == 0.0 and parted["max_abs_diff_vs_one_pass"] <= 1e-5
    for row in out["results"]:
        assert row["peak_rss_gb"] >= row["rss_before_steps_gb"] > 0
        assert len(row["step_wall_s"]) == row["steps"] == 2
        assert row["peak_over_one_pass"] == round(row["peak_rss_gb"] / one["peak_rss_gb"], 3)


def test_dp_tune_matches_the_targets_noise_by_hand() -> None:
    """benchmarks/dp_tune.py's matching rule on numbers worked by hand: σ/(q·N) = 0.8/(0.1·7000)
    = 1/875 per unit of C at the target, whichever rule the emulation on M patients uses."""
    tune = load_script("benchmarks/dp_tune.py")
    # "rate": q_e = q = 0.1, σ_e = σ·M/N = 0.8·350/7000 = 0.04, batch 35
    same_rate = tune.matched_noise(0.1, 0.8, 7000, 350, "rate")
    assert same_rate.sample_rate == 0.1 and same_rate.noise_multiplier == pytest.approx(0.04)
    assert same_rate.expected_batch == pytest.approx(35)
    # "batch": q·N/M = 2 is capped at 1 (all 350 a step), so σ_e = 0.8·350/700 = 0.4
    capped = tune.matched_noise(0.1, 0.8, 7000, 350, "batch")
    assert capped.sample_rate == 1.0 and capped.noise_multiplier == pytest.approx(0.4)
    # below the cap the target's batch and σ: q_e = 0.1·7000/14000 = 0.05, σ_e = 0.8
    uncapped = tune.matched_noise(0.1, 0.8, 7000, 14000, "batch")
    assert uncapped.sample_rate == pytest.approx(0.05) and uncapped.noise_multiplier == pytest.approx(0.8)
    assert uncapped.expected_batch == pytest.approx(700)
    for emulation, m in ((same_rate, 350), (capped, 350), (uncapped, 14000)):
        assert emulation.noise_std_over_clip(m) == pytest.approx(1 / 875)
    with pytest.raises(ValueError, match="matching rule"):
        tune.matched_noise(0.1, 0.8, 7000, 350, "steps")


@pytest.mark.bench
def test_dp_tune_smoke(cache_dir: Path) -> None:
    """benchmarks/dp_tune.py --quick: every cell's settings, σ, emulated noise and score, and the
    choice is the best-scoring cell (~2 min on a loaded machine)."""
    out = _smoke("dp_tune.py", "--cache", str(cache_dir))
    target, emulation, grid = out["target"], out["emulation"], out["grid"]
    assert target["patients"] == 7000 and target["epsilon"] == 8.0 and emulation["rule"] == "rate"
    m = emulation["public_train_patients"]
    assert m == 12 and emulation["public_held_out_patients"] == 6
    runs = len(grid["rates"]) * len(grid["passes"]) * len(grid["lrs"]) * len(out["clip"]["factors"])
    cells = out["cells"]
    assert len(cells) == runs * (1 + len(grid["ema_horizons"])) == 8
    for cell in cells:
        q, sigma = cell["sample_rate"], cell["sigma"]
        assert cell["steps"] == cell["passes"] * math.ceil(1 / q) and sigma > 0
        emulated = cell["emulation"]
        # the noise on the averaged gradient is the target's: same rate, σ scaled by M/N
        assert emulated["sample_rate"] == q and emulated["expected_batch"] == pytest.approx(q * m)
        assert emulated["noise_std_over_C"] == pytest.approx(cell["target_noise_std_over_C"])
        assert emulated["noise_multiplier"] == pytest.approx(sigma * m / 7000, rel=1e-3)
        if cell["average"] == "ema":
            (h,) = grid["ema_horizons"]
            assert cell["ema_decay"] == pytest.approx(1 - 1 / (h * cell["steps"]), abs=1e-6)
        assert cell["val_loss"] > 0 and cell["train_wall_s"] >= 0
    # σ depends on (q, steps) only, and one run's averagings share it
    by_run: dict[int, set[float]] = {}
    for cell in cells:
        by_run.setdefault(cell["run"], set()).add(cell["sigma"])
    assert all(len(s) == 1 for s in by_run.values())
    best = min(cells, key=lambda c: (c["val_loss"], c["passes"]))
    choice = out["choice"]
    assert {k: choice[k] for k in best} == best
    assert choice["config"]["dp.sample_rate"] == best["sample_rate"]
    assert choice["config"]["train.lr"] == best["lr"] and choice["config"]["train.average"] == best["average"]
    assert out["base_val_loss"] > 0 and set(out["cider_held_out"]) >= {"base", "choice"}
    assert out["source"]["command"].startswith("python benchmarks/dp_tune.py")


def test_wire_codec_round_trips_exactly_and_reports_both_codecs() -> None:
    out = _smoke("wire_codec.py")
    assert [row["dtype"] for row in out["rows"]] == ["float64", "float32", "uint32"]
    for row in out["rows"]:  # the script raises unless every round trip came back exact
        assert set(row["ms_per_mb"]) == {"flower", "ours"} and row["ratio_ours_to_flower"] > 0


def test_secagg_flower_sites_keep_their_update_and_peer_keys_across_messages(monkeypatch: Any) -> None:
    """Flower's simulation hands each Ray actor the ClientApp anew with every message, the script's
    functions by value: a site's update and its peers' public keys must be made once per process,
    or every SecAgg+ phase pays again for what a real site holds in memory (issue 53: ~16 ms a
    phase a site for the update, where the floor and Flower's SecAgg+ paid it once a round)."""
    import cloudpickle

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    bench = load_script("benchmarks/secagg_flower.py")
    cloudpickle.register_pickle_by_value(bench)
    try:

        def per_message(fn: Any) -> Any:  # what an actor holds after unpickling one message's app
            return cloudpickle.loads(cloudpickle.dumps(fn))

        first, second = (per_message(bench.site_vector)(7, 1_000) for _ in range(2))
        assert first is second and first.dtype == np.float32 and first.shape == (1_000,)
        one, other = (per_message(bench.bench_identity)(1).peer_public_keys["site2"] for _ in range(2))
        assert one is other
    finally:
        cloudpickle.unregister_pickle_by_value(bench)


def test_secagg_flower_floor_sets_our_rounds_beside_the_floor_with_each_phase() -> None:
    cell = {
        "sites": 100,
        "dim": 1_000_000,
        "plain_round_s_median": 2.0,
        "secagg_round_s_median": 7.0,
        "floor_round_s_median": 5.0,
        "pipelined_round_s_median": 3.0,
        "secagg_phase_train_s_median": 2.5,
        "secagg_phase_secagg_masked_s_median": 4.5,
        "floor_phase_train_s_median": 2.0,
        "floor_phase_floor_secagg_masked_s_median": 3.0,
        "pipelined_phase_train_s_median": 2.5,
        "pipelined_phase_floor_secagg_unmask_s_median": 0.5,
    }
    out = {"runtime": "flwr simulation", "results": {"ours": [cell]}}
    table = _tool("bench_tables").shape("secagg-flower-floor", out, "cmd", "machine", None, "0" * 40)
    assert table["rows"] == [[100, "2.000", "7.000", "5.000", "3.000", "2.5", "1.5", "3.5", "1.40"]]
    assert table["notes"][1] == (
        "100 sites, median seconds per phase: SecAgg+: train 2.500, secagg_masked 4.500; "
        "floor: train 2.000, secagg_masked 3.000; pipelined floor: train 2.500, secagg_unmask 0.500."
    )


def test_secagg_flower_against_sets_ours_beside_flowers_at_each_site_count() -> None:
    cell = {"plain_round_s_median": 0.5, "secagg_round_s_median": 1.5}
    out = {
        "runtime": "flwr simulation",
        "results": {
            "ours": [{"sites": 10, **cell}, {"sites": 100, **cell}],  # Flower's ran at 10 only
            "flower": [{"sites": 10, "plain_round_s_median": 0.4, "secagg_round_s_median": 3.0}],
        },
    }
    table = _tool("bench_tables").shape("secagg-flower-against", out, "cmd", "machine", None, "0" * 40)
    assert table["rows"] == [
        [10, "plain round", "0.500", "0.400", "1.25"],
        [10, "SecAgg+ round", "1.500", "3.000", "0.50"],
    ]


@pytest.mark.bench
def test_fedtar_release_noise_smoke(cache_dir: Path) -> None:
    """benchmarks/fedtar_release_noise.py --quick: the fields docs/BENCHMARKS.md's table and notes
    read (tools/bench_tables.py shapes them) are there, and each ratio is its own effective noises'."""
    out = _smoke("fedtar_release_noise.py", "--cache", str(cache_dir))
    table = _tool("bench_tables").shape("fedtar-release-noise", out, "cmd", "machine", None, "0" * 40)
    assert [r[0] for r in table["rows"]] == ["uniform", "peaked on visit 1", "peaked on visit 3"]
    for row in out["rows"]:
        for key in ("copies", "one_vector"):
            ratio = row[key]["effective_noise"] / row["fedavg"]["effective_noise"]
            assert math.isclose(row[key]["over_fedavg"], ratio)
        assert 0 < row["one_vector"]["sketch_share_median"] < 1
    assert out["noise"]["one-vector"]["padded_dim"] == out["noise"]["fedavg"]["padded_dim"]


@pytest.mark.bench
@pytest.mark.slow  # a benchmark script in a subprocess: make test-fast leaves it out
def test_alpha_clip_smoke(cache_dir: Path) -> None:
    """benchmarks/alpha_clip.py --quick: the emulated private FedTAR run on public patients, each
    measured round's norms, the target's noise matched on the averaged step, and C_α by the median
    rule to one digit (2 rounds of the tests' small shape, no pretraining)."""
    out = _smoke("alpha_clip.py", "--cache", str(cache_dir))
    assert out["release"] == "one-vector" and out["method"] == "fedtar"
    noise, public, target = out["noise"], out["public"], out["target"]
    assert public["train_patients"] == 12 and public["held_out_patients"] == 6
    # the rate rule: the same std on the averaged step, from the sum's std times M/N
    assert noise["emulated_step_std"] == pytest.approx(noise["target_step_std"])
    assert noise["emulated_sum_std"] == pytest.approx(
        noise["target_sum_std"] * public["train_patients"] / target["train_patients"]
    )
    assert [r["round"] for r in out["rounds"]] == out["measured_rounds"] == [1, 2]
    for found in out["rounds"]:
        q = found["quantiles"]
        assert 0 < q["p10"] <= q["p25"] <= q["p50"] == found["median"] <= q["p75"] <= q["p90"]
        assert abs(sum(found["alpha"]) - 1) < 1e-3 and 0 <= found["clipped_at_current_C_alpha"] <= 1
    assert out["pooled"]["norms"] == 2 * public["held_out_patients"]
    assert out["alpha_clip"] == float(f"{out['pooled']['median']:.1g}") > 0
    assert out["source"]["command"].startswith("python benchmarks/alpha_clip.py")


@pytest.mark.slow  # a benchmark script in a subprocess: make test-fast leaves it out
def test_alpha_shares_smoke() -> None:
    out = _smoke("alpha_shares.py")
    cases = {row["case"]: row for row in out["cases"]}
    assert set(cases) == {"before", "after"} and out["quick"]
    # through the real CKKS protocol: each site's own σ_α sums to √5, shares for 5 of c = 1 to √(5/4)
    for case in cases.values():
        assert abs(case["std_over_unit"] - case["expected"]) <= 5 * case["standard_error"], case
    assert all(
        case["encrypt_ms_per_round"] > 0 and case["decrypt_ms_per_round"] > 0 for case in cases.values()
    )
