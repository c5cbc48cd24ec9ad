"""A benchmark's JSON output (benchmarks/*.py prints one object) shaped into the table docs/BENCHMARKS.md
renders (docs/results/bench-NAME.json, the format of tools/doc_tables.py).

    .venv/bin/python benchmarks/upload_bytes.py > out.json
    python tools/bench_tables.py upload-bytes out.json \\
        --command ".venv/bin/python benchmarks/upload_bytes.py" --machine "..." --wall "40 s"
    python tools/doc_tables.py --write

Several outputs of one command are several runs: each cell is the median over them (round_time.py,
ckks.py), or each run is a column (threads.py). A committed raw output (docs/results/distributed-*.json:
the script's object under "output", beside its "source") is shaped as it stands, and its source
gives the command, commit, date and machine unless flags override them:

    python tools/bench_tables.py distributed-noise docs/results/distributed-noise.json
    python tools/bench_tables.py distributed-noise-accounting docs/results/distributed-noise.json
    python tools/bench_tables.py distributed-survivors docs/results/distributed-survivors.json

secagg.py and dp_overhead.py have no shaper yet: their tables in the docs were
transcribed, and their notes say how they were combined.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import json
import statistics
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from doc_tables import git_head  # noqa: E402  (a sibling script, not a package)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"

UPLOAD_CASES = {"pooled_adapters": "pooled adapters", "full_model_fedavg": "full-model FedAvg"}
UPLOAD_COLUMNS = [
    "preset",
    "upload",
    "values",
    "plain float64 (bytes)",
    "SecAgg+ (uint32, bytes)",
    "plain wire, Flower (bytes)",
    "SecAgg+ wire, Flower (bytes)",
    "plain / full-model FedAvg",
]
TOKENIZER_COLUMNS = [
    "tokenizer (`data.tokenizer`)",
    "vocab",
    "real-looking: `<unk>`",
    "tokens/report mean (max)",
    "synthetic: `<unk>`",
    "tokens/report mean (max)",
]


def _int(n: int) -> str:
    return f"{n:,}"


def upload_rows(out: dict[str, Any]) -> list[list[Any]]:
    rows: list[list[Any]] = []
    for result in out["results"]:
        for key, case in result["methods"].items():
            # fedtar_T<n>, one per --T value, in the script's order
            label = UPLOAD_CASES.get(key) or f"FedTAR, T = {key.removeprefix('fedtar_T')}"
            rows.append(
                [
                    result["preset"],
                    label,
                    _int(case["values"]),
                    _int(case["plain"]["payload_bytes"]),
                    _int(case["secagg"]["payload_bytes"]),
                    _int(case["plain"]["flower_records"]["wire_bytes_sent_per_site"]),
                    _int(case["secagg"]["flower_records"]["wire_bytes_sent_per_site"]),
                    f"{case['plain_over_full_model_plain']:.2f}",
                ]
            )
    return rows


def upload_notes(out: dict[str, Any]) -> list[str]:
    notes = []
    for result in out["results"]:
        p = result["parameters"]
        share = 100 * p["adapters"] / p["total"]
        notes.append(
            f"{result['preset']}: {_int(p['total'])} parameters, {_int(p['adapters'])} trainable per "
            f"adapter copy ({share:.1f} %)."
        )
        received = result["methods"]["pooled_adapters"]["secagg"]["codec"]["wire_bytes_received_per_site"]
        notes.append(
            f"{result['preset']}: a SecAgg+ site also receives {_int(received)} bytes of keys and "
            f"shares (pooled adapters, byte codec, {out['sites']} sites)."
        )
    return notes


def _pct(rate: float) -> str:
    return "0 %" if rate == 0 else f"{100 * rate:.1f} %"


def tokenizer_rows(out: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for kind, real in out["real_looking"].items():
        if not isinstance(real, dict):  # "reports": how many were measured
            continue
        synth = out["synthetic"][kind]
        rows.append(
            [
                f"`{kind}`",
                real["vocab_size"],
                _pct(real["unk_rate"]),
                f"{real['tokens_per_report_mean']:.1f} ({real['tokens_per_report_max']})",
                _pct(synth["unk_rate"]),
                f"{synth['tokens_per_report_mean']:.1f} ({synth['tokens_per_report_max']})",
            ]
        )
    return rows


def _one(outs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    if len(outs) != 1:
        raise ValueError(f"this table is one run's output; {len(outs)} given")
    return outs[0]


def _cell_label(t: int, sites: int) -> str:
    return f"T = {t}, {sites} sites"


def _round_cells(outs: Sequence[dict[str, Any]]) -> dict[tuple[int, int, str], list[float]]:
    # every run of every output, pooled per (T, sites, mode): several outputs are more runs per cell
    cells: dict[tuple[int, int, str], list[float]] = {}
    for out in outs:
        for r in out["results"]:
            cells.setdefault((r["T"], r["sites"], r["mode"]), []).extend(r["round_s"])
    return cells


def round_time_rows(outs: Sequence[dict[str, Any]]) -> list[list[Any]]:
    cells = _round_cells(outs)
    rows = []
    for t, sites in sorted({(t, s) for t, s, _ in cells}):
        row: list[Any] = [_cell_label(t, sites)]
        for mode in ("plain", "dp"):
            runs = cells.get((t, sites, mode))
            median = statistics.median(runs) if runs else None
            row += [f"{median:.2f}", f"{median / sites:.2f}"] if median is not None else ["—", "—"]
        rows.append(row)
    return rows


def round_time_secagg_rows(outs: Sequence[dict[str, Any]]) -> list[list[Any]]:
    cells = _round_cells(outs)
    rows = []
    for t, sites in sorted({(t, s) for t, s, m in cells if m == "secagg"}):
        plain = statistics.median(cells[(t, sites, "plain")])
        secagg = statistics.median(cells[(t, sites, "secagg")])
        rows.append([_cell_label(t, sites), f"{plain:.2f} → {secagg:.2f}", f"{secagg / plain:.2f}"])
    return rows


def round_he_rows(outs: Sequence[dict[str, Any]]) -> list[list[Any]]:
    cells = _round_cells(outs)
    rows = []
    for t, sites in sorted({(t, s) for t, s, m in cells if m == "secagg_he"}):
        plain = cells[(t, sites, "plain")]
        medians = {m: statistics.median(cells[(t, sites, m)]) for m in ("plain", "secagg", "secagg_he")}
        rows.append(
            [
                _cell_label(t, sites),
                f"{medians['plain']:.3f} ({min(plain):.2f}–{max(plain):.2f})",
                f"{medians['secagg']:.3f}",
                f"{medians['secagg_he']:.3f}",
                f"{medians['secagg_he'] / medians['plain']:.2f}",
            ]
        )
    return rows


def round_hardened_rows(outs: Sequence[dict[str, Any]]) -> list[list[Any]]:
    cells = _round_cells(outs)
    rows = []
    for t, sites in sorted({(t, s) for t, s, m in cells if m == "dp_he"}):
        runs = {m: cells[(t, sites, m)] for m in ("plain", "dp", "dp_he")}
        medians = {m: statistics.median(v) for m, v in runs.items()}
        rows.append(
            [_cell_label(t, sites)]
            + [f"{medians[m]:.3f} ({min(runs[m]):.2f}–{max(runs[m]):.2f})" for m in ("plain", "dp", "dp_he")]
            + [f"{medians['dp_he'] / medians['plain']:.2f}"]
        )
    return rows


def threads_columns(outs: Sequence[dict[str, Any]]) -> list[str]:
    runs = [f"median s/step (run {i}, {out['steps']} steps)" for i, out in enumerate(outs, 1)]
    return ["busy cores", "threads", *runs]


def threads_rows(outs: Sequence[dict[str, Any]]) -> list[list[Any]]:
    per_run = [{(c["busy_cores"], c["threads"]): c["median_s"] for c in out["cells"]} for out in outs]
    return [[b, n, *(f"{run[(b, n)]:.3f}" for run in per_run)] for b, n in per_run[0]]


def _sci(x: float) -> str:
    mantissa, exponent = f"{x:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def ckks_rows(outs: Sequence[dict[str, Any]]) -> list[list[Any]]:
    # several outputs with the same --sites are runs of one cell: each figure is their median
    cells: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for out in outs:
        for row in out["per_t"]:
            cells.setdefault((out["sites"], row["T"]), []).append(row)
    rows = []
    for (sites, t), runs in sorted(cells.items()):

        def med(get: Callable[[dict[str, Any]], float], runs: list[dict[str, Any]] = runs) -> float:
            return statistics.median(get(r) for r in runs)

        def client(phase: str, runs: list[dict[str, Any]] = runs) -> float:
            return statistics.median(r["round_he"]["client_ms"][phase]["median"] for r in runs)

        rows.append(
            [
                sites,
                t,
                f"{med(lambda r: r['encrypt_ms']):.1f}",
                f"{med(lambda r: r['add_ms_per_ciphertext']):.2f}",
                f"{med(lambda r: r['decrypt_ms']):.2f}",
                f"{med(lambda r: r['round_he']['wall_ms']):.1f}",
                f"{med(lambda r: r['round_plain']['wall_ms']):.2f}",
                f"{client('he_keys'):.2f}",
                f"{client('he_encrypt'):.1f}",
                f"{client('he_decrypt'):.1f}",
                _int(int(med(lambda r: r["round_he"]["bytes_sent_per_site"]))),
                _int(int(med(lambda r: r["round_he"]["bytes_received_by_decryptor"]))),
                _sci(med(lambda r: r["round_he"]["max_abs_error"])),
            ]
        )
    return rows


def ckks_notes(outs: Sequence[dict[str, Any]]) -> list[str]:
    first = outs[0]
    params = first["params"]
    sizes = sorted(row["ciphertext_bytes"] for out in outs for row in out["per_t"])
    return [
        f"Contexts: poly modulus degree {params['poly_modulus_degree']}, coefficient moduli "
        f"{params['coeff_mod_bit_sizes']}, scale 2^{params['scale_bits']}; public context "
        f"{_int(first['public_context_bytes'])} bytes, secret context {_int(first['secret_context_bytes'])}.",
        f"Ciphertext {_int(sizes[0])}–{_int(sizes[-1])} bytes whatever T; {len(outs)} output(s) combined.",
    ]


CKKS_COLUMNS = [
    "sites",
    "T",
    "encrypt (ms)",
    "add (ms / ct)",
    "decrypt (ms)",
    "HE round (ms)",
    "plain round (ms)",
    "client `he_keys` (ms)",
    "client `he_encrypt` (ms)",
    "client `he_decrypt` (ms)",
    "bytes sent / site",
    "bytes received by the decryptor",
    "max abs error",
]


def _first_dim(outs: Sequence[dict[str, Any]]) -> int:
    return next(cell["dim"] for cells in _one(outs)["results"].values() for cell in cells)


def secagg_flower_rows(outs: Sequence[dict[str, Any]]) -> list[list[Any]]:
    results = _one(outs)["results"]
    try:
        flower = f"Flower {importlib.metadata.version('flwr').rsplit('.', 1)[0]}"
    except importlib.metadata.PackageNotFoundError:
        flower = "Flower"
    parts = [
        (flower, "FedAvg round (`SecAggPlusWorkflow`)", "flower", "round"),
        ("ours", "broadcast + secure sum", "ours", "round"),
        ("ours", "secure sum after the broadcast", "ours", "sum"),
    ]
    rows = []
    for label, what, name, kind in parts:
        for cell in results.get(name, []):
            plain, secagg = cell[f"plain_{kind}_s_median"], cell[f"secagg_{kind}_s_median"]
            rows.append(
                [label, what, cell["sites"], f"{plain:.3f} → {secagg:.3f}", f"{cell[f'{kind}_ratio']:.1f}"]
            )
    return rows


def secagg_flower_against_rows(outs: Sequence[dict[str, Any]]) -> list[list[Any]]:
    """Ours against Flower's own at each site count both ran: plain round and SecAgg+ round."""
    results = _one(outs)["results"]
    theirs = {cell["sites"]: cell for cell in results.get("flower", [])}
    rows = []
    for cell in results.get("ours", []):
        other = theirs.get(cell["sites"])
        if other is None:
            continue
        for mode, label in (("plain", "plain round"), ("secagg", "SecAgg+ round")):
            ours, flower = cell[f"{mode}_round_s_median"], other[f"{mode}_round_s_median"]
            rows.append([cell["sites"], label, f"{ours:.3f}", f"{flower:.3f}", f"{ours / flower:.2f}"])
    return rows


def secagg_flower_floor_rows(outs: Sequence[dict[str, Any]]) -> list[list[Any]]:
    """Our plain and SecAgg+ rounds beside the floor round (SecAgg+'s phases, the masks' arithmetic
    only) and the pipelined floor (the same in two message phases), at each site count ours ran."""
    rows = []
    for cell in _one(outs)["results"].get("ours", []):
        plain, secagg, floor, pipelined = (
            cell[f"{mode}_round_s_median"] for mode in ("plain", "secagg", "floor", "pipelined")
        )
        rows.append(
            [
                cell["sites"],
                f"{plain:.3f}",
                f"{secagg:.3f}",
                f"{floor:.3f}",
                f"{pipelined:.3f}",
                f"{floor / plain:.1f}",
                f"{pipelined / plain:.1f}",
                f"{secagg / plain:.1f}",
                f"{secagg / floor:.2f}",
            ]
        )
    return rows


def secagg_flower_floor_notes(outs: Sequence[dict[str, Any]]) -> list[str]:
    """Each phase's median wall time, SecAgg+ against the two floor rounds, at each site count."""
    notes = [f"{_one(outs)['runtime']}; {_int(_first_dim(outs))} float32 values."]
    labels = {"secagg": "SecAgg+", "floor": "floor", "pipelined": "pipelined floor"}
    for cell in _one(outs)["results"].get("ours", []):
        parts = []
        for mode, label in labels.items():
            prefix = f"{mode}_phase_"
            phases = [
                (key[len(prefix) : -len("_s_median")], value)
                for key, value in cell.items()
                if key.startswith(prefix) and key.endswith("_s_median")
            ]
            shown = ", ".join(f"{name.removeprefix('floor_')} {value:.3f}" for name, value in phases)
            parts.append(f"{label}: {shown}")
        notes.append(f"{cell['sites']} sites, median seconds per phase: " + "; ".join(parts) + ".")
    return notes


def _output(out: dict[str, Any]) -> dict[str, Any]:
    # docs/results/distributed-*.json commit the script's output under "output", beside the
    # "source" it was run with; either form shapes alike
    inner = out.get("output")
    return inner if isinstance(inner, dict) and "source" in out else out


def distributed_noise_rows(outs: Sequence[dict[str, Any]]) -> list[list[Any]]:
    out = _output(_one(outs))
    rows = []
    for cell in out["noise"]:
        for c in ("c0", "c1"):
            run = cell[c]
            rows.append(
                [
                    f"h = {cell['h']}, c = {c[1:]}",
                    f"{cell['site_mode_std']:.3f}",
                    f"{run['std']:.3f}",
                    f"{run['ratio']:.3f}",
                    f"{cell['goal_ratio']:.3f}",
                    "yes" if run["ratio_le_goal"] else "no",
                    f"{run['honest_goal_ratio']:.3f}",
                    f"{run['epsilon']:.3f}",
                ]
            )
    return rows


def distributed_noise_notes(outs: Sequence[dict[str, Any]]) -> list[str]:
    out = _output(_one(outs))
    t = out["target"]
    runs = [cell[c] for cell in out["noise"] for c in ("c0", "c1")]
    multipliers = sorted({f"{r['skellam_noise_multiplier']:.4f}" for r in runs})
    inflation = max(r["rounding_inflation"] for r in runs)
    wraps = sorted(r["wrap_bound_sites"] for r in runs)
    ms = out["timing_ms"]
    return [
        f"Both modes calibrated to ε = {t['epsilon']}, δ = {t['delta']}, q = {t['sample_rate']}, "
        f"{t['steps']} steps, C = {t['clip']}: site mode's Gaussian σ = {out['site_mode_sigma']:.4f} "
        f"(Opacus' RDP accountant), the Skellam plan's noise multiplier {' / '.join(multipliers)}.",
        "Std per coordinate of (released sum − true sum) over the coordinates, measured on h sites' "
        "encoded vectors; c = 1 sizes each share for h − 1 honest sites.",
        "The plans' own ratio (std from the plan over site mode's) is 1/√(h − c) × "
        f"{min(r['ratio_expected'] / r['honest_goal_ratio'] for r in runs):.4f}–"
        f"{max(r['ratio_expected'] / r['honest_goal_ratio'] for r in runs):.4f} "
        "(the Skellam correction and the rounding); the measured ratio differs from it by the "
        "std estimate's sampling error over d coordinates.",
        f"Ring of {out['bits']} bits, d = {_int(out['dim'])} (padded to {_int(out['padded_dim'])} for "
        f"the rotation); the rounding inflates the sensitivity by at most {100 * inflation:.3f} % "
        f"(in the accounting); each plan's sum stays inside the ring up to {wraps[0]}–{_int(wraps[-1])} "
        "sites.",
        f"Noise stage alone at d = {_int(out['timing_dim'])}, medians of {out['repeats']} interleaved "
        f"repeats: encode_share {ms['encode_share']:.2f} ms (rotation {ms['rotation']:.2f}, rounding "
        f"{ms['rounding']:.2f}, Skellam draw {ms['skellam_noise']:.2f}) vs site mode's Gaussian noise "
        f"{ms['site_noise']:.2f} ms ({out['encode_over_site_noise']:.1f}×).",
    ]


def distributed_survivors_rows(outs: Sequence[dict[str, Any]]) -> list[list[Any]]:
    out = _output(_one(outs))

    def revealing(row: dict[str, Any]) -> int:
        # a site confirming m = h frees no layer: it reveals an empty list
        return row["revealing"] if row["confirmed_survivors"] > out["honest_min"] else 0

    return [
        [
            row["case"],
            f"{row['sites_in_sum']} ({revealing(row)} reveal a layer)",
            row["confirmed_survivors"],
            f"{row['ratio_prv']:.3f}",
            f"{row['ratio_prv_expected']:.3f}",
            f"{row['ratio_rdp']:.3f}",
            f"{row['ratio_rdp_expected']:.3f}",
            f"{row['honest_floor_over_mu']:.3f}",
        ]
        for row in out["rows"]
    ]


def skellam_gdp_rows(outs: Sequence[dict[str, Any]]) -> list[list[Any]]:
    out = _output(_one(outs))
    return [
        [
            row["accountant"],
            row["sound"],
            f"{row['z']:.4f}",
            f"{row['epsilon_of_running_plan']:.2f}",
            f"{row['ratio_all_five']:.3f}",
        ]
        for row in out["rows"]
    ]


def skellam_gdp_notes(outs: Sequence[dict[str, Any]]) -> list[str]:
    out = _output(_one(outs))
    return [
        f"Plan: {out['config']} (ε = {out['epsilon']:g} with the GMM histogram, δ = {out['delta']:g}, "
        f"q = {out['sample_rate']:g}, {out['steps']} steps), d = {_int(out['dim'])}, {out['sites']} sites, "
        f"h = {out['honest_min']}, c = {out['colluders']}: mu_total = {out['mu_total']:.4g}, "
        f"Δ₂ = {out['l2_sensitivity']:.6g}, rounding inflation {100 * out['inflation']:.3f} %.",
        f"z = √mu / Δ₂ meeting the target; ε of the running (RDP-calibrated) plan under each; released std "
        f"with all five surviving over the curator's σ = {out['curator_sigma_prv']:.4f} (PRV): "
        "√(5/4)·z·(1 + inflation)/σ, as the survivors table's expected column.",
        f"Centre step at this mu: M·√mu − 1 = {out['centre_step_excess']:.2g}, so the route's pair is the "
        "Gaussian of the Skellam's variance to that precision.",
    ]


def distributed_survivors_notes(outs: Sequence[dict[str, Any]]) -> list[str]:
    out = _output(_one(outs))
    sigma, ms = out["curator_sigma"], out["timing_ms"]
    return [
        f"Plan: {out['config']} (ε = {out['epsilon']:g}, δ = {out['delta']:g}, "
        f"q = {out['sample_rate']:g}, {out['steps']} steps, C = {out['clip']:g}, {out['amplification']} "
        f"RDP bound), {out['sites']} sites, "
        f"h = {out['honest_min']}, c = {out['colluders']}: Skellam noise multiplier "
        f"{out['skellam_noise_multiplier']:.4f}, {out['removable_layers']} removable layer(s) per share.",
        f"Curator's σ: the pooled DP-SGD σ at the same (ε, δ, q, steps) and histogram share, "
        f"{sigma['prv']:.4f} with the PRV accountant (issue 64's reference), {sigma['rdp']:.4f} with RDP.",
        "Measured: std per coordinate of (released − true sum) over d = "
        f"{_int(out['dim'])} coordinates, from real encode_share / encode_layered_share, remove_layers "
        "and decode_sum; expected: from the kept variances of the plan (no sampling error).",
        "Honest floor: what the honest shares keep when the c colluders are the shares that keep the "
        "most, over the mu_total the ledger charges (the guarantee: ≥ 1).",
        f"Time at d = {_int(out['dim'])}, medians of {out['repeats']} interleaved repeats: encode_share "
        f"{ms['encode_share']:.1f} ms, encode_layered_share {ms['encode_layered_share']:.1f} ms, the "
        f"server's removal of one site's revealed layers {ms['remove_one_sites_layers']:.1f} ms.",
    ]


ACCOUNTING_COLUMNS = [
    "setting",
    "site mode σ (exact)",
    "Skellam plan (std / C)",
    "penalty (plan / exact)",
    "distributed / site",
    "1/√(h − c)",
    "goal 1/√h",
    "distributed releases",
    "general bound: plan",
    "general bound: penalty",
    "general bound: distributed / site",
]


def distributed_accounting_rows(outs: Sequence[dict[str, Any]]) -> list[list[Any]]:
    return [
        [
            row["setting"],
            f"{row['site_sigma_exact']:.4f}",
            f"{row['skellam_plan']:.4f}",
            f"{row['penalty']:.3f}",
            f"{row['ratio']:.3f}",
            f"{row['honest_ratio']:.3f}",
            f"{row['goal_ratio']:.3f}",
            "less noise" if row["distributed_releases_less"] else "more noise",
            f"{row['skellam_plan_general']:.4f}",
            f"{row['penalty_general']:.2f}",
            f"{row['ratio_general']:.3f}",
        ]
        for row in _output(_one(outs))["accounting"]
    ]


def distributed_accounting_notes(outs: Sequence[dict[str, Any]]) -> list[str]:
    out = _output(_one(outs))
    rows = out["accounting"]
    hospital = [r for r in rows if r["histogram"]]
    penalty = [r["penalty"] for r in rows]
    eps = [abs(r["epsilon_accounted"] - r["epsilon"]) / r["epsilon"] for r in rows]
    shapes = sorted({(r["h"], r["c"]) for r in rows})
    sites = ", ".join(f"h = {h}, c = {c}" for h, c in shapes)
    notes = [
        "Site mode's Gaussian σ (Opacus' sampled-Gaussian RDP, `dp.calibration`) against the Skellam "
        "plan's released std over C from h − c honest shares (rounding included), planned with the "
        "symmetric Poisson-subsampling bound (`dp.amplification`, the default; proof in "
        "docs/THREAT_MODEL.md). Penalty: plan / σ.",
        f"The penalty lies in {min(penalty):.3f}–{max(penalty):.3f}: the Skellam correction term, the "
        "rounding and integer-only orders; the subsampling bound itself is the sampled Gaussian's.",
        f"distributed / site: the released sum's noise std for 5 sites at the config defaults ({sites}), "
        "z / (σ·√(h − c)), the same for any number of survivors; 1/√(h − c) is its floor with shares "
        "sized for h − c honest sites; goal 1/√h is issue 31's.",
        "General bound: the same plan under Zhu & Wang's bound for any mechanism (2019, Thm. 6: a "
        "factor 3 on the terms of order ≥ 3), what distributed runs before the symmetric bound "
        "were planned with (docs/RESULTS.md's kept distributed sweeps).",
    ]
    if hospital:
        first = hospital[0]
        passes = sorted({round(r["steps"] * r["sample_rate"], 6) for r in hospital})
        notes.append(
            f"Hospital rows: configs/hospital-scale.toml in distributed mode, one DP step a round: its "
            f"{first['steps']} steps at q = {first['sample_rate']:g} and the same "
            f"{' / '.join(f'{p:g}' for p in passes)} passes over the patients at other rates (steps = "
            f"passes / q), C = {first['clip']:g}, δ = {out['target']['delta']:g}, its GMM histogram at "
            f"{100 * first['gmm_fraction']:g} % of ε composed in every column, "
            f"d = {_int(out['accounting_dim'])}; site mode's σ is `dp/distributed/run.site_mode_sigma`, "
            "the figure the run's warning compares with. Benchmark row: the first table's point, "
            "no other release."
        )
    notes.append(f"Every plan's ε as the ledger accounts it is its target within {max(eps):.0e} (relative).")
    return notes


DISTRIBUTED_GRAPHS = {
    "default": "default graph",
    "complete_graph": "complete graph",
    "secagg_plus_graph": "SecAgg+ graph",
}


def distributed_cost_rows(outs: Sequence[dict[str, Any]]) -> list[list[Any]]:
    out = _output(_one(outs))
    rows = []
    for r in out["results"]:
        cpu, wall, degree = r["cpu"], r["wall"], r["secagg_degree"]
        graph = DISTRIBUTED_GRAPHS.get(r["variant"], r["variant"].replace("_", " "))
        rows.append(
            [
                f"{r['sites']} sites, {graph}",
                f"{r['honest_min']} ({r['colluders']})",
                f"{degree['site_mode']} / {degree['distributed']}",
                f"{cpu['site_total_ms']:.1f}",
                f"{cpu['distributed_total_ms']:.1f}",
                f"{r['ratio_cpu']:.2f}",
                f"{r['ratio_wall']:.2f}",
                f"{cpu['round_setup_ms']:.1f}",
                f"{cpu['ratio_with_round_setup']:.2f}",
                f"{wall['ratio_with_round_setup']:.2f}",
            ]
        )
    return rows


def distributed_cost_notes(outs: Sequence[dict[str, Any]]) -> list[str]:
    out = _output(_one(outs))
    m, b, p = out["model"], out["batch"], out["privacy"]
    return [
        f"Target: ratio ≤ {out['target_ratio']}. A step is {m['preset']} preset, {m['method']} "
        f"({_int(m['trainable'])} trainable values), one fixed batch of {b['patients']} patients "
        f"({b['rows']} rows); site mode's σ = {p['site_mode_sigma']:.4f} for ε = {p['epsilon']}, "
        f"δ = {p['delta']}, q = {p['sample_rate']}, {p['rounds']} rounds.",
        f"Per site: step + the SecAgg+ round's time / sites; medians of {out['repeats']} interleaved "
        f"repeats, {out['torch_threads']} torch thread; ratios on process CPU time and on wall time.",
        "Round setup, kept copy: what a distributed site does before its one step every round "
        "(ClippedSum.prepare: the start state loaded into the model copy it keeps, gradients cleared, "
        "the round's keystream handed to the engine); the last two columns charge it to the "
        "distributed step. The copy and engine are built once, in a site's first round: "
        f"{_joined(r['cpu']['build_ms'] for r in out['results'])} ms CPU (median per row).",
        f"Site mode rebuilds per round too (a model copy, an engine and an AdamW: "
        f"{_joined(r['cpu']['site_round_setup_ms'] for r in out['results'])} ms CPU per row), spread "
        f"over its {p['site_mode_steps_per_round']} local steps at q = {p['sample_rate']}; charging each "
        "mode its own per-step share of its round's setup gives CPU ratios "
        + _joined((r["cpu"]["ratio_with_both_setups"] for r in out["results"]), "{:.2f}")
        + ".",
    ]


def dp_passes_rows(outs: Sequence[dict[str, Any]]) -> list[list[Any]]:
    out = _output(_one(outs))
    rows = []
    for r in out["results"]:
        k = r["max_patients_per_pass"]
        rows.append(
            [
                "one pass" if k is None else f"{k} patients",
                f"{r['peak_rss_gb']:.2f}",
                f"{r['steps_memory_gb']:.2f}",
                f"{r['peak_over_one_pass']:.2f}",
                f"{r['median_wall_s_after_first']:.1f}",
                f"{r['median_cpu_s_after_first']:.1f}",
                f"{r['wall_over_one_pass']:.2f}",
                "(reference)" if k is None else f"{r['max_abs_diff_vs_one_pass']:.1e}",
            ]
        )
    return rows


def dp_passes_notes(outs: Sequence[dict[str, Any]]) -> list[str]:
    out = _output(_one(outs))
    r = out["results"][0]
    return [
        f"The pooled train cohort of {out['config']} (scale {out['scale']}): "
        f"{_int(r['pooled_train_patients'])} patients, about {r['rows_per_step']:.0f} report rows a "
        f"step at its Poisson rate; {r['steps']} steps of the real loop (train_copies with "
        "DPGradients, one adapter copy, tiny preset, one torch thread) per variant, each variant in "
        "a process of its own, with the same patients and noise.",
        "Peak RSS: the process's peak resident memory; the steps' share is that peak minus the peak "
        "before the steps (cohort loaded, model built). Step times: medians over the steps after the "
        "first.",
        "Adapters: the largest difference after the steps from the one-pass variant's.",
    ]


def _joined(values: Iterable[float], fmt: str = "{:.1f}") -> str:
    return " / ".join(fmt.format(v) for v in values)


def _spread(stats: dict[str, float]) -> str:
    return f"{stats['median']:.2f} ({stats['min']:.2f}–{stats['max']:.2f})"


def wire_codec_rows(outs: Sequence[dict[str, Any]]) -> list[list[Any]]:
    return [
        [
            row["dtype"],
            f"{row['megabytes']:.1f}",
            _spread(row["ms_per_mb"]["flower"]),
            _spread(row["ms_per_mb"]["ours"]),
            f"{row['ratio_ours_to_flower']:.2f}",
        ]
        for row in _one(outs)["rows"]
    ]


Outs = Sequence[dict[str, Any]]
# name -> (title, columns (or a function of the outputs), rows, notes)
RELEASE_COLUMNS = [
    "α",
    "FedAvg: effective noise",
    "FedTAR, T copies: effective noise",
    "copies / FedAvg",
    "FedTAR, one vector: effective noise",
    "one vector / FedAvg",
    "first design, one κ / FedAvg",
    "one vector's weights, no sketch / FedAvg",
    "sketch's median share of a patient's norm",
]


def fedtar_release_rows(outs: Sequence[dict[str, Any]]) -> list[list[Any]]:
    out = _output(_one(outs))
    rows = []
    for cell in out["rows"]:
        fedavg = cell["fedavg"]["effective_noise"]
        rows.append(
            [
                cell["alpha"],
                f"{fedavg:.3f}",
                f"{cell['copies']['effective_noise']:.3f}",
                f"{cell['copies']['effective_noise'] / fedavg:.2f}",
                f"{cell['one_vector']['effective_noise']:.3f}",
                f"{cell['one_vector']['effective_noise'] / fedavg:.2f}",
                f"{cell['one_kappa']['effective_noise'] / fedavg:.2f}",
                f"{cell['weights_alone']['effective_noise'] / fedavg:.2f}",
                f"{cell['one_vector']['sketch_share_median']:.2f}",
            ]
        )
    return rows


def fedtar_release_notes(outs: Sequence[dict[str, Any]]) -> list[str]:
    out = _output(_one(outs))
    noise = out["noise"]
    uniform = out["rows"][0]
    plan = {name: found["std_plan_all_survive"] for name, found in noise.items()}
    return [
        f"{out['config']}, {out['site']} ({out['patients']} training patients, T = {out['visits']}, "
        f"{_int(out['trainable'])} adapter values), all of them (q = 1) through the real clipped-sum "
        f"path from the round-1 global state; the plan of {out['sites']} sites at ε = {out['epsilon']:g}, "
        f"δ = {out['delta']:g}, q = {out['sample_rate']:g}, {out['rounds']} rounds, C = {out['clip']:g}.",
        "Signal: the norm of the mean clipped per-patient contribution to the model update (the copies: "
        "Σ_t c_t of each copy's block, c the chain's weights). Effective noise: the released noise std "
        "per coordinate in that update (the copies: √Σc_t² × theirs) over the signal. Noise std, the "
        f"plan's with all {out['sites']} sites surviving: FedAvg {plan['fedavg']:.4f} "
        f"(d = {_int(noise['fedavg']['dim'])}), one vector {plan['one-vector']:.4f} "
        f"(d = {_int(noise['one-vector']['dim'])}, the same padded size), copies "
        f"{plan['copies']:.4f} (d = {_int(noise['copies']['dim'])}); measured on the "
        "decoded ring sum of the sites' encoded zero vectors: "
        f"{noise['fedavg']['std_measured']:.4f}, {noise['one-vector']['std_measured']:.4f}, "
        f"{noise['copies']['std_measured']:.4f}.",
        f"One vector: k = {out['sketch_dim']} sketch rows, sketch share ρ = {out['sketch_share']:g} "
        f"(κ = ρ/√(1 − ρ²)), visit t's sketch weighed by κ·ω_t; 'one κ' weighs every sketch by κ (the "
        "first design); 'no sketch' is Σ_t ω_t g_t alone (α could not learn), what the weighting costs "
        "apart from the sketch's share of the clip norm. Patients clipped: FedAvg "
        f"{100 * uniform['fedavg']['clipped_fraction']:.0f} %, one vector "
        f"{100 * uniform['one_vector']['clipped_fraction']:.0f} % (uniform α).",
        f"Target: one vector ≤ {out['target_over_fedavg']}× FedAvg's effective noise at uniform α; "
        f"measured {uniform['one_vector']['over_fedavg']:.3f}× "
        f"(copies {uniform['copies']['over_fedavg']:.3f}×). "
        "The rule written before the hospital figures were read (the default of `train.fedtar_release` "
        "under distributed DP: one vector if it meets the target and is below the copies at every α) "
        f"gives {'one-vector' if out['one_vector_default'] else 'copies'}; the first design (one κ) "
        f"reads {uniform['one_kappa']['over_fedavg']:.3f}× and was changed after its hospital run "
        "(docs/experiments/fedtar-one-vector-release.md).",
    ]


def alpha_clip_columns(outs: Sequence[dict[str, Any]]) -> list[str]:
    before = {_output(out)["target"]["alpha_clip_now"] for out in outs}
    if len(before) != 1:
        raise ValueError(f"the outputs ran at different C_α: {sorted(before)}")
    return [
        "preset: rounds",
        "α at the round",
        "patients",
        "10 %",
        "25 %",
        "median",
        "75 %",
        "90 %",
        f"above C_α = {before.pop():g}",
        "C_α (the rule)",
    ]


def _preset(out: dict[str, Any]) -> str:
    return Path(out["config"]).stem


def _quantile_cells(q: dict[str, float]) -> list[str]:
    return [f"{q[f'p{p}']:.4f}" for p in (10, 25, 50, 75, 90)]


def alpha_clip_rows(outs: Sequence[dict[str, Any]]) -> list[list[Any]]:
    """benchmarks/alpha_clip.py, one output per preset: each measured round's per-patient norms of
    the α scalars, then the rounds pooled, whose median gives C_α."""
    rows = []
    for out in map(_output, outs):
        name = _preset(out)
        for found in out["rounds"]:
            q = found["quantiles"]
            rows.append(
                [
                    f"{name}: round {found['round']}",
                    "[" + ", ".join(f"{a:.3f}" for a in found["alpha"]) + "]",
                    out["public"]["held_out_patients"],
                    *_quantile_cells(q),
                    f"{100 * found['clipped_at_current_C_alpha']:.0f} %",
                    "",
                ]
            )
        pooled = out["pooled"]
        q = pooled["quantiles"]
        above = statistics.fmean(found["clipped_at_current_C_alpha"] for found in out["rounds"])
        rows.append(
            [
                f"{name}: pooled",
                "",
                pooled["norms"],
                *_quantile_cells(q),
                f"{100 * above:.0f} %",
                f"{out['alpha_clip']:g}",
            ]
        )
    return rows


def alpha_clip_notes(outs: Sequence[dict[str, Any]]) -> list[str]:
    notes = [
        "Per-patient L2 norm of the T-vector of α hypergradient scalars (each validation patient's sum "
        "over its reports, as a site releases it) of the public held-out patients, in an emulated "
        "private FedTAR run (the one-vector release) on fresh public patients: the real site path "
        "(Poisson sample, the one vector from the round's α, clipped to C), Gaussian noise matched to "
        "the target's std on the averaged step, the real server path (Adam step, surrogate snapshots, "
        "the chain's directions), the scalars at the round's model, and ψ's step on an emulated α "
        "release at the C_α the config had before this sizing (the column 'above'). α is ψ's at the "
        "round's start.",
    ]
    for out in map(_output, outs):
        t, noise, pub, src = out["target"], out["noise"], out["public"], out["source"]
        notes.append(
            f"{out['config']} at ε = {t['epsilon']:g} (δ = {t['delta']:g}): {t['sites']} sites, "
            f"N = {_int(t['train_patients'])} training and {_int(t['val_patients'])} validation patients, "
            f"q = {t['sample_rate']:g}, {t['rounds']} rounds, C = {t['max_grad_norm']:g}, "
            f"lr {t['lr']:g}. Emulated on M = {pub['train_patients']} public training patients and "
            f"{pub['held_out_patients']} held-out patients ({pub['held_out_reports']} reports); noise "
            f"per coordinate of the averaged step {noise['target_step_std']:.4g} (the target's; the sum's "
            f"{noise['target_sum_std']:.4g} × M/N); the α release's summed σ_α {noise['alpha_sum_sigma']:g} "
            f"× M_val/N_val. Rounds measured and pooled: "
            f"{', '.join(str(found['round']) for found in out['rounds'])} of {t['rounds']}. "
            f"`{src['command']}`; commit {src['commit']} ({src['date']}); {src['machine']}; "
            f"wall {out['wall_s'] / 60:.0f} min.",
        )
    notes.append(f"The rule, fixed before any measurement: C_α = {_output(outs[0])['rule']}.")
    return notes


SHAPERS: dict[str, tuple[str, Any, Callable[[Outs], list[list[Any]]], Callable[[Outs], list[str]]]] = {
    "upload-bytes": (
        "Upload per site per round: values and bytes",
        UPLOAD_COLUMNS,
        lambda outs: upload_rows(_one(outs)),
        lambda outs: upload_notes(_one(outs)),
    ),
    "tokenizer-coverage": (
        "Tokenizers on real-looking and synthetic reports",
        TOKENIZER_COLUMNS,
        lambda outs: tokenizer_rows(_one(outs)),
        lambda outs: [],
    ),
    "round-time": (
        "FedTAR round time (s), tiny preset, plain vs DP-SGD + SecAgg+",
        ["T, sites", "plain round (s)", "per site (s)", "DP + SecAgg+ round (s)", "per site (s)"],
        round_time_rows,
        lambda outs: ["Median over the runs per cell (`round_s`), after a discarded warm-up run."],
    ),
    "round-time-secagg": (
        "FedTAR round time (s), tiny preset, plain vs SecAgg+ (DP off)",
        ["T, sites", "plain → SecAgg+ (s)", "ratio"],
        round_time_secagg_rows,
        lambda outs: ["Medians over the runs per cell (`round_s`); ratio of medians."],
    ),
    "round-he": (
        "A FedTAR round with SecAgg+ and CKKS against a plain round (tiny preset)",
        [
            "T, sites",
            "plain round (s, median (range))",
            "SecAgg+ (s)",
            "SecAgg+ + CKKS (s)",
            "SecAgg+ + CKKS / plain",
        ],
        round_he_rows,
        lambda outs: ["Medians over the runs per mode (`round_s`); ratio of medians."],
    ),
    "round-hardened": (
        "The fully hardened FedTAR round (DP-SGD + SecAgg+ + CKKS) against a plain round doing the same "
        "training work (tiny preset; modes interleaved run by run)",
        [
            "T, sites",
            "plain (s, median (range))",
            "DP + SecAgg+ (s)",
            "DP + SecAgg+ + CKKS (s)",
            "DP + SecAgg+ + CKKS / plain",
        ],
        round_hardened_rows,
        lambda outs: [
            f"{_one(outs)['repeats']} runs per mode; every mode takes the DP round's optimizer steps on the "
            f"same rows ({_one(outs)['training']['steps_per_epoch']} steps an epoch of "
            f"{_one(outs)['training']['batch_patients']} patients); ratio of medians."
        ],
    ),
    "threads": (
        "One training step of the tiny model on 1 and 2 torch threads, with a core busy or not",
        threads_columns,
        threads_rows,
        lambda outs: [],
    ),
    "secagg-flower": (
        "SecAgg+ in Flower's simulation runtime, ours and Flower's own (medians of the timed pairs)",
        ["implementation", "what is timed", "sites", "plain → SecAgg+ (s)", "ratio"],
        secagg_flower_rows,
        lambda outs: [f"{_one(outs)['runtime']}; {_int(_first_dim(outs))} float32 values."],
    ),
    "secagg-flower-against": (
        "Our rounds against Flower's own in its simulation runtime (1 M float32 values, medians of the timed "
        "pairs)",
        ["sites", "round", "ours (s)", "Flower's (s)", "ours / Flower's"],
        secagg_flower_against_rows,
        lambda outs: [
            f"{_one(outs)['runtime']}; our plain round is one message phase (each site's vector on its "
            "training reply), Flower's plain round its default fit workflow."
        ],
    ),
    "secagg-flower-floor": (
        "Our SecAgg+ round against its floor in Flower's simulation runtime: SecAgg+'s message phases "
        "with only the masks' arithmetic, and the same in two phases a round (pipelined) (medians of the "
        "timed rounds)",
        [
            "sites",
            "plain round (s)",
            "SecAgg+ round (s)",
            "floor round (s)",
            "pipelined floor (s)",
            "floor / plain",
            "pipelined floor / plain",
            "SecAgg+ / plain",
            "SecAgg+ / floor",
        ],
        secagg_flower_floor_rows,
        secagg_flower_floor_notes,
    ),
    "ckks": (
        "CKKS sum of the α scalars (masked protocol, signed mask keys), per round",
        CKKS_COLUMNS,
        ckks_rows,
        ckks_notes,
    ),
    "distributed-noise": (
        "Noise std per coordinate of the released sum, distributed DP (Skellam shares) vs site mode, "
        "same (ε, δ)",
        [
            "h, c",
            "site mode std",
            "distributed std",
            "distributed / site",
            "goal 1/√h",
            "goal met",
            "1/√(h − c)",
            "ε (distributed, accounted)",
        ],
        distributed_noise_rows,
        distributed_noise_notes,
    ),
    "distributed-survivors": (
        "Released noise std over the curator's σ·C, distributed DP at the hospital settings, shares sized "
        "for the confirmed survivors",
        [
            "case",
            "shares in the sum",
            "confirmed m",
            "released / curator (PRV σ)",
            "expected (PRV σ)",
            "released / curator (RDP σ)",
            "expected (RDP σ)",
            "honest floor / mu_total",
        ],
        distributed_survivors_rows,
        distributed_survivors_notes,
    ),
    "skellam-gdp": (
        "The Skellam sum's accountant at the hospital settings: RDP against the PLD route on the "
        "centre step's Gaussian pair",
        [
            "accountant",
            "sound",
            "z for ε = 8",
            "ε of the running plan",
            "released / curator (PRV σ), all five",
        ],
        skellam_gdp_rows,
        skellam_gdp_notes,
    ),
    "distributed-noise-accounting": (
        "Where distributed DP's noise goes: noise multipliers at the same (ε, δ, q, steps) and the "
        "released noise against site mode's",
        ACCOUNTING_COLUMNS,
        distributed_accounting_rows,
        distributed_accounting_notes,
    ),
    "dp-passes": (
        "A private step of the pooled hospital-scale cohort in one forward/backward pass and in passes "
        "of at most k patients (`dp.max_patients_per_pass`)",
        [
            "patients a pass",
            "peak RSS (GiB)",
            "of which the steps (GiB)",
            "peak / one pass",
            "step wall (s)",
            "step CPU (s)",
            "wall / one pass",
            "max abs difference of the adapters",
        ],
        dp_passes_rows,
        dp_passes_notes,
    ),
    "wire-codec": (
        "An array into a Flower message and out again, per megabyte: Flower's np.save/np.load and ours",
        ["dtype", "MB", "Flower's Array (ms/MB, median (min–max))", "ours, raw (ms/MB)", "ours / Flower"],
        wire_codec_rows,
        lambda outs: [
            f"{_one(outs)['values']:,} values an array; {_one(outs)['repeats']} interleaved repeats after "
            "a warm-up; each round trip checked exact."
        ],
    ),
    "alpha-clip": (
        "C_α sized on public patients: each validation patient's α-scalar norm in an emulated private "
        "FedTAR run (one-vector release, distributed DP)",
        alpha_clip_columns,
        alpha_clip_rows,
        alpha_clip_notes,
    ),
    "fedtar-release-noise": (
        "FedTAR's distributed-DP release against FedAvg's: effective noise of the model update, same plan "
        "(ε = 8)",
        RELEASE_COLUMNS,
        fedtar_release_rows,
        fedtar_release_notes,
    ),
    "distributed-cost": (
        "One private step plus its share of a SecAgg+ sum: distributed DP vs site mode (tiny preset)",
        [
            "sites, masking graph",
            "h (c)",
            "SecAgg+ degree (site / distributed)",
            "site mode (CPU ms)",
            "distributed (CPU ms)",
            "ratio, CPU",
            "ratio, wall",
            "round setup, kept copy (CPU ms)",
            "ratio with setup, CPU",
            "ratio with setup, wall",
        ],
        distributed_cost_rows,
        distributed_cost_notes,
    ),
}


def shape(
    name: str,
    outs: dict[str, Any] | Sequence[dict[str, Any]],
    command: str,
    machine: str,
    wall: str | None,
    commit: str | None = None,
    date: str | None = None,
) -> dict[str, Any]:
    """docs/results/bench-NAME.json from one benchmark output (or several runs of it)."""
    runs = [outs] if isinstance(outs, dict) else list(outs)
    title, columns, rows, notes = SHAPERS[name]
    return {
        "title": title,
        "source": {
            "command": command,
            "commit": commit or git_head(),
            "date": date or dt.date.today().isoformat(),
            "machine": machine,
            "wall": wall,
        },
        "columns": columns(runs) if callable(columns) else columns,
        "rows": rows(runs),
        "notes": notes(runs),
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("benchmark", choices=sorted(SHAPERS))
    p.add_argument("outputs", type=Path, nargs="+", help="the benchmark's JSON output (several: runs)")
    # a committed raw output ({"source": ..., "output": ...}) states these itself
    p.add_argument("--command", default=None, help="the exact command that printed it")
    p.add_argument("--machine", default=None, help="the machine it ran on")
    p.add_argument("--wall", default=None, help="its wall time")
    p.add_argument("--commit", default=None, help="the commit it ran at (default: HEAD)")
    p.add_argument("--results", type=Path, default=RESULTS, help="where bench-NAME.json is written")
    args = p.parse_args(argv)
    try:
        outs = [json.loads(path.read_text(encoding="utf-8")) for path in args.outputs]
        stated = outs[0].get("source") if len(outs) == 1 and isinstance(outs[0].get("source"), dict) else {}
        command, machine = args.command or stated.get("command"), args.machine or stated.get("machine")
        if not command or not machine:
            print(
                f"{args.outputs[0]}: states no command or machine; give --command and --machine",
                file=sys.stderr,
            )
            return 2
        data = shape(
            args.benchmark,
            outs,
            command,
            machine,
            args.wall or stated.get("wall"),
            args.commit or stated.get("commit"),
            stated.get("date"),
        )
    except (AttributeError, OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        names = " ".join(map(str, args.outputs))
        print(f"{names}: not {args.benchmark}'s output ({exc!r}); rerun the benchmark", file=sys.stderr)
        return 1
    target = args.results / f"bench-{args.benchmark}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {target}; then: python tools/doc_tables.py --write")
    return 0


if __name__ == "__main__":
    sys.exit(main())
