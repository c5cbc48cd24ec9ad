"""`secure-fed-lab`: the research harness's command line (sweeps of methods × seeds × ε, their
tables), outside the code a hospital approves: nothing in the rest of the package imports
secure_fed.lab, and the FAB leaves it out (tests/test_layers.py, tests/test_fab.py)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Annotated

import typer

# the lab borrows the package CLI's parsing and its one-line errors; the package never borrows back
from secure_fed.cli.common import (
    Commands,
    console,
    fail,
    read_config,
    real_data,
    say,
    set_options,
    stop_signals,
    stopped,
)

app = typer.Typer(
    cls=Commands,
    no_args_is_help=True,
    add_completion=False,
    # A crash report must not print local variables: they can hold key material and patient data.
    pretty_exceptions_show_locals=False,
    help="The research harness: privacy-utility sweeps and their tables (not in a site's approved code).",
)


@app.callback()
def _lab() -> None:
    """Keeps `sweep` a named command: a one-command Typer app would otherwise run it bare."""


def _restore_cells(record_file: Path, out: Path) -> None:
    from secure_fed.lab.records import restore_cells

    try:
        record = json.loads(record_file.read_text(encoding="utf-8"))
        written = restore_cells(record, out)
    except OSError as err:
        fail(f"--cells-from {record_file}: cannot read it ({err.strerror}); name a kept sweep record")
        raise
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        fail(
            f"--cells-from {record_file}: not a kept sweep record ({err}); "
            "name one of docs/results/sweeps/*.json"
        )
        raise
    except ValueError as err:
        fail(f"--cells-from {record_file}: {err}")
        raise
    say(f"{len(written)} finished cell(s) from {record_file} written into {out}")


def _grid(epsilons: str, seeds: str) -> tuple[list[float | None], list[int]]:
    """--epsilons and --seeds as the sweep's ε (None: no DP) and seeds, each ε checked to be a budget
    here, not when the sweep reaches its cell: the earlier cells may take hours."""
    try:
        eps = [None if e.strip() in ("inf", "∞") else float(e) for e in epsilons.split(",")]
        seed_list = [int(s) for s in seeds.split(",")]
    except ValueError as err:
        fail(f"--epsilons/--seeds: {err}; pass comma-separated numbers, e.g. --seeds 0,1,2 --epsilons inf,8")
        raise
    bad = [e for e in eps if e is not None and not (0 < e < math.inf)]
    if bad:
        fail(f"--epsilons: {bad[0]:g} is not a privacy budget; each ε must be positive (or 'inf' for no DP)")
    return eps, seed_list


@app.command()
def sweep(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="TOML file (RunConfig tree)")] = None,
    methods: Annotated[
        str,
        typer.Option(
            help="comma-separated methods: base (pretrained base, no training), local (each site alone), "
            "central (pooled, non-private), fedtar, fedtar-no-gmm, fedtar-no-temporal, fedavg, fedprox, "
            "fedadam, scaffold, drfa; fedavg-plain, fedprox-plain, scaffold-plain, fedadam-plain, "
            "drfa-plain (the baseline with a plain adapter, no patient hyper-LoRA: the FedTAR paper's "
            "protocol); fedtar-convex, fedtar-no-gmm-convex, fedtar-no-temporal-convex (FedTAR's temporal "
            "step as the full convex combination of the snapshots); fedavg-ft, fedtar-ft (that method's "
            "final model fine-tuned at each site for one round's local epochs: personalised FL); "
            "central-clip, fedavg-clip, fedtar-clip (the private recipe's sampling and clipping with no "
            "noise: NOT private, ε = ∞ only)"
        ),
    ] = "fedtar,fedavg",
    seeds: Annotated[
        str, typer.Option(help="comma-separated seeds (each fixes cohort, split and run)")
    ] = "0,1,2",
    epsilons: Annotated[str, typer.Option(help="comma-separated ε targets; 'inf' = no DP")] = "inf",
    rounds: Annotated[int | None, typer.Option(help="federated rounds")] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="sweep folder")] = Path("runs/sweep"),
    cells_from: Annotated[
        Path | None,
        typer.Option(
            "--cells-from",
            help="a kept record of a sweep's finished cells (docs/results/sweeps/NAME.json): they are "
            "written into the folder first and not run again",
        ),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="KEY=VALUE: one config key for every cell, over the --config file (repeatable; VALUE "
            "read as TOML), e.g. --set dp.sample_rate=0.02",
        ),
    ] = None,
) -> None:
    """Methods × seeds × ε on the same data, paired by seed; finished cells are skipped, so a sweep
    resumes where it stopped. Writes results.json, results.md (mean ± std, paired CIs, per-site
    tables), results.html and privacy_utility.png.

    Example: secure-fed-lab sweep --methods base,fedtar,fedavg --seeds 0,1,2 --epsilons inf,8,4,1
    -o runs/sweep
    """
    from secure_fed.launch.console import quiet_frameworks

    quiet_frameworks()  # a sweep trains and scores as `run` does: the operator's console, not the libraries'
    from secure_fed.lab.sweep import sweep as run_sweep
    from secure_fed.site.guard import Refusal

    overrides = set_options(set_ or [])
    if "fed.engine" in overrides:
        fail("--set fed.engine: a sweep runs its cells in process; drop that --set")
    if rounds is not None:
        overrides["fed.rounds"] = rounds
    cfg = read_config(config, {**overrides, "fed.engine": "inprocess"})
    eps, seed_list = _grid(epsilons, seeds)
    if any(e is not None for e in eps) and cfg.dp.ledger_dir is None:
        if real_data(cfg):
            fail(
                "--epsilons: DP cells on real patients' data need dp.ledger_dir (the folder that keeps "
                "their ledger across runs): every cell is charged there"
            )
        say("lifetime ledger: none (synthetic benchmark, [dp] ledger_dir unset): each cell's ε is its own")
    if cells_from is not None:
        _restore_cells(cells_from, out)
    try:
        with stop_signals():
            results = run_sweep(
                cfg, [m.strip() for m in methods.split(",")], seed_list, eps, out, log=console.print
            )
    except ValueError as err:
        fail(str(err))
        raise
    except Refusal as err:
        fail(
            f"a site refused the running cell ({err.code}): {err}; the cells finished so far are kept "
            f"in {out}, and the same command, once that is fixed, goes on from them"
        )
    except KeyboardInterrupt as err:
        stopped(
            err,
            f"the cells finished so far are kept in {out}. The same `secure-fed-lab sweep` command goes on: "
            "finished cells are skipped, the one that was running is set aside and run again",
        )
    # Plain stdout, not rich: a markdown table wider than the terminal must not be re-wrapped.
    sys.stdout.write((out / "results.md").read_text())
    console.print(
        f"wrote {out / 'results.json'}, results.md, results.html ({len(results['runs'])} cells); "
        f"this call took {results['wall_s_this_call'] / 60:.1f} min"
    )


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        # `sweep` says how to go on itself; this is a stop before it started
        console.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()
