"""The sweep's summary is what RESULTS.md reports: mean ± sample std per (method, ε), paired
differences with a t interval, resumable cells, the privacy–utility plot and the HTML page."""

from __future__ import annotations

import contextlib
import json
import math
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from secure_fed.config import RunConfig
from secure_fed.data.cohort import _split_sizes
from secure_fed.data.sites import split_seed
from secure_fed.lab import cells as lab_cells
from secure_fed.lab import records as lab_records
from secure_fed.lab import references as lab_refs
from secure_fed.lab import statistics as lab_stats
from secure_fed.lab import sweep as sweep_module
from secure_fed.lab import tables as lab_tables
from secure_fed.lab.cells import t975
from secure_fed.lab.statistics import paired_differences, privacy_utility, summarise
from secure_fed.lab.tables import markdown_table, privacy_table, wall_table
from secure_fed.site.evaluation import METRIC_NAMES
from tests.conftest import DISTRIBUTED_DP
from tests.scripts import ROOT


@pytest.fixture(autouse=True)
def _one_base_model(monkeypatch):
    """Every sweep here runs on one base model; building the real one would pretrain it."""
    monkeypatch.setattr(sweep_module, "base_model_digest", lambda cfg: "base-a")


def _run(method, epsilon, value, seed=0, privacy=None):
    return {
        "method": method,
        "epsilon": epsilon,
        "seed": seed,
        "test": dict.fromkeys(METRIC_NAMES, value),
        "privacy": privacy,
    }


def test_summary_is_mean_and_sample_std_per_group():
    runs = [
        _run("fedtar", None, 1.0),
        _run("fedtar", None, 2.0),
        _run("fedtar", None, 3.0),
        _run("fedavg", None, 0.5),
        _run("fedtar", 4.0, 0.25, privacy={"epsilon": {"site0": {"rdp": 3.9}, "site1": {"rdp": 3.95}}}),
    ]
    rows = {(r["method"], r["epsilon"]): r for r in summarise(runs)}
    assert rows[("fedtar", None)]["n"] == 3
    assert rows[("fedtar", None)]["CIDEr"] == pytest.approx((2.0, 1.0))
    assert rows[("fedavg", None)]["CIDEr"] == (0.5, None)  # one run has no std
    assert rows[("fedtar", 4.0)]["epsilon_spent"] == pytest.approx(3.95)  # the worst site
    table = markdown_table(list(rows.values()))
    assert "| fedtar | ∞ | — | 3 | 2.000 ± 1.000" in table and "| fedtar | 4 | 3.950 | 1 |" in table
    assert "± 0" not in table.split("fedavg")[1].splitlines()[0]  # n = 1 prints the value alone


def test_nan_metrics_are_left_out_not_averaged_in():
    runs = [_run("fedtar", None, 1.0), _run("fedtar", None, math.nan)]
    row = summarise(runs)[0]
    assert row["BLEU-1"] == (1.0, None)


def test_cells_from_before_a_metric_existed_still_summarise():
    old = _run("fedtar", None, 1.0, seed=0)
    del old["test"]["CE-F1-micro"]
    runs = [
        old,
        _run("fedtar", None, 2.0, seed=1),
        _run("base", None, 0.5, seed=0),
        _run("base", None, 0.5, seed=1),
    ]
    row = next(r for r in summarise(runs) if r["method"] == "fedtar")
    assert row["CE-F1-micro"] == (2.0, None) and row["CIDEr"] == pytest.approx((1.5, math.sqrt(0.5)))
    (paired,) = paired_differences(runs, "base")
    assert paired["CE-F1-micro"] == (1.5, None) and paired["CIDEr"][1] is not None


def test_paired_interval_uses_per_seed_differences():
    # Both methods vary a lot across seeds, but fedavg is always 0.1 above base: the paired interval
    # is tight around +0.1 although the unpaired spreads overlap.
    base = [1.0, 3.0, 2.0, 5.0]
    runs = [_run("base", None, v, seed=s) for s, v in enumerate(base)]
    runs += [_run("fedavg", None, v + 0.1 + 0.01 * s, seed=s) for s, v in enumerate(base)]
    (row,) = paired_differences(runs, "base")
    d = np.array([0.1 + 0.01 * s for s in range(4)])
    mean, (lo, hi) = row["CIDEr"]
    half = t975(3) * d.std(ddof=1) / 2
    assert mean == pytest.approx(d.mean()) and (lo, hi) == pytest.approx((d.mean() - half, d.mean() + half))
    assert lo > 0


def test_interval_table_is_the_mean_and_its_t_interval_over_seeds():
    """For a mean set against a group it cannot be paired with: 3 seeds of 1, 2, 3 give mean 2 and
    2 ± 4.303 · 1 / √3; one seed gives its value alone; a missing metric is a dash."""
    runs = [_run("central", 4.0, v, seed=s) for s, v in enumerate((1.0, 2.0, 3.0))]
    runs.append(_run("fedavg", None, 0.5))
    del runs[-1]["test"]["CE-F1"]
    half = 4.303 / math.sqrt(3)
    lines = lab_tables.interval_table(runs, ("CIDEr", "CE-F1")).splitlines()
    assert lines[0] == "| method | ε | n | CIDEr [95 % CI] | CE-F1 [95 % CI] |"
    interval = f"2.000 [{2 - half:.3f}, {2 + half:.3f}]"
    assert lines[2:] == [f"| central | 4 | 3 | {interval} | {interval} |", "| fedavg | ∞ | 1 | 0.500 | — |"]


def test_wall_table_is_minutes_per_cell_per_method_and_epsilon():
    runs = [_run("base", None, 1.0, seed=s) | {"wall_s": 60.0} for s in (0, 1)]
    runs += [_run("fedavg", 8.0, 2.0, seed=s) | {"wall_s": w} for s, w in ((0, 600.0), (1, 840.0))]
    runs.append(_run("fedavg", None, 2.0))  # a cell from before wall times were kept: not counted
    table = wall_table(runs)
    assert "| base ε=∞ | 2 | 1.000 ± 0.000 | 1.0 |" in table
    assert "| fedavg ε=8 | 2 | 12.000 ± 2.828 | 14.0 |" in table
    assert "fedavg ε=∞" not in table


def test_share_of_gain_kept():
    runs = [_run("base", None, 1.0), _run("fedtar", None, 3.0), _run("fedtar", 4.0, 2.5)]
    kept = {r["epsilon"]: r["kept"] for r in privacy_utility(runs)}
    assert kept == pytest.approx({None: 1.0, 4.0: 0.75})
    # the pooled private central is the ceiling a federated method's share is read against
    runs += [_run("central", None, 5.0), _run("central", 4.0, 4.0)]
    shares = {(r["method"], r["epsilon"]): r["kept"] for r in privacy_utility(runs)}
    assert shares[("central", 4.0)] == pytest.approx(0.75) and shares[("fedtar", 4.0)] == pytest.approx(0.75)
    ce_f1 = privacy_table(privacy_utility(runs, "CE-F1"), "CE-F1")
    assert "| seeds | CE-F1 | share of gain kept |" in ce_f1
    # the site-fine-tuned variant's share: against its own non-private cell
    runs += [_run("fedavg-ft", None, 5.0), _run("fedavg-ft", 4.0, 4.6)]
    shares = {(r["method"], r["epsilon"]): r["kept"] for r in privacy_utility(runs)}
    assert shares[("fedavg-ft", 4.0)] == pytest.approx(0.9)


def test_share_of_gain_kept_is_paired_on_the_seeds_every_cell_has():
    """A partial grid: base on seeds 0-2, FedAvg without DP on 0-1, at ε = 8 on seed 0 only. Means
    over each cell's own seeds (1.0 vs 3.5 vs 2.0) would call the share 40 %; on seed 0, the
    cohort all three share, it is 50 %."""
    runs = [_run("base", None, v, seed=s) for s, v in enumerate((1.0, 0.0, 2.0))]
    runs += [_run("fedavg", None, v, seed=s) for s, v in enumerate((3.0, 4.0))]
    runs.append(_run("fedavg", 8.0, 2.0, seed=0))
    (private,) = [r for r in privacy_utility(runs) if r["epsilon"] == 8.0]
    assert private["n"] == 1 and private["kept"] == pytest.approx(0.5)
    (plain,) = [r for r in privacy_utility(runs) if r["epsilon"] is None]
    assert plain["n"] == 2 and plain["kept"] == pytest.approx(1.0)


def _record_cells(monkeypatch) -> list[tuple]:
    """Every cell a sweep runs, as (method, seed), each scoring 1.0 on every metric."""
    calls: list[tuple] = []

    def fake_cell(base, method, epsilon, seed, folder, say=None):
        calls.append((method, seed))
        return {"method": method, "epsilon": epsilon, "seed": seed, "test": dict.fromkeys(METRIC_NAMES, 1.0)}

    monkeypatch.setattr(sweep_module, "run_cell", fake_cell)
    return calls


@contextlib.contextmanager
def _held_by_another_sweep(folder: Path) -> Iterator[None]:
    """The cell's lock held as a running sweep holds it."""
    import fcntl

    with open(sweep_module.cell_lock(folder), "a") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield


def test_a_second_sweep_leaves_a_cell_another_sweep_is_running(tmp_path: Path, monkeypatch):
    """Two sweeps on one folder (a second terminal, a resumed `make results` while the first still
    runs): the second took the first's running cell for an interrupted one and renamed its folder
    away under the running process, its signed logs included. Now it leaves that cell alone."""
    calls = _record_cells(monkeypatch)
    cfg, out = RunConfig(), tmp_path / "sw"
    out.mkdir()
    running = lab_cells.cell_folder(out, "base", None, 0)
    (running / "audit").mkdir(parents=True)
    (running / "audit" / "server.jsonl").write_text("{}\n")  # the first sweep's cell, under way
    with _held_by_another_sweep(running):
        said: list[str] = []
        sweep_module.sweep(cfg, ["base"], [0, 1], [None], out, log=said.append)
    assert calls == [("base", 1)]
    assert (running / "audit" / "server.jsonl").read_text() == "{}\n"
    assert not list(out.glob("*.interrupted-*"))
    assert any("another sweep" in line and str(running) in line for line in said), said
    # once the first sweep is gone, its cell is an interrupted attempt like any other
    sweep_module.sweep(cfg, ["base"], [0, 1], [None], out, log=lambda _: None)
    assert calls == [("base", 1), ("base", 0)] and len(list(out.glob("*.interrupted-*"))) == 1


def test_a_fine_tuned_cell_waits_for_its_federated_cell_another_sweep_is_running(
    tmp_path: Path, monkeypatch, make_config
):
    """Two sweeps on one folder: the second reached `fedavg-ft` while the first still ran its
    `fedavg` cell, and fine-tuned whatever checkpoint that run had saved so far (a model of round
    r < R) into a table that says it is the final model fine-tuned. Now the fine-tuned cell is left
    for a later pass, and the fine-tuning itself refuses a federated cell that has not finished."""
    calls = _record_cells(monkeypatch)
    cfg, out = RunConfig(), tmp_path / "sw"
    out.mkdir()
    running = lab_cells.cell_folder(out, "fedavg", None, 0)
    (running / "checkpoint").mkdir(parents=True)  # the first sweep's cell, rounds under way
    with _held_by_another_sweep(running):
        said: list[str] = []
        sweep_module.sweep(cfg, ["fedavg-ft"], [0, 1], [None], out, log=said.append)
    assert calls == [("fedavg", 1), ("fedavg-ft", 1)], calls
    assert not (lab_cells.cell_folder(out, "fedavg-ft", None, 0) / "cell.json").exists()
    assert any(
        line.startswith("fedavg-ft seed 0: its federated cell") and str(running) in line for line in said
    ), said
    # the fine-tuning alone, handed an unfinished federated cell, says so instead of tuning it
    real = make_config()
    with pytest.raises(FileNotFoundError, match="cell.json"):
        lab_refs.evaluate_fine_tuned(real, running, tmp_path / "ft")


def test_a_sweep_that_fails_writing_its_tables_leaves_the_last_ones_whole(tmp_path: Path, monkeypatch):
    """Two sweeps on one folder write the tables as each ends, and a writer can die half way (a full
    disk, a kill): the tables on disk are the last whole ones, never a file cut short."""

    _record_cells(monkeypatch)
    out = tmp_path / "sw"
    sweep_module.sweep(RunConfig(), ["base"], [0], [None], out, log=lambda _: None)
    before = (out / "results.md").read_text()
    real = Path.write_text

    def dies_half_way(self: Path, text: str, *args, **kwargs):
        if "results.md" in self.name:
            real(self, text[: len(text) // 2], *args, **kwargs)
            raise OSError(28, "No space left on device")
        return real(self, text, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", dies_half_way)
    with pytest.raises(OSError, match="No space"):
        sweep_module.sweep(RunConfig(), ["base"], [0, 1], [None], out, log=lambda _: None)
    assert (out / "results.md").read_text() == before
    assert not list(out.glob(".*.tmp"))


def test_each_finished_cell_says_its_time_scores_and_epsilon(tmp_path: Path, monkeypatch):
    """A hospital cell runs for minutes; its end line is what a researcher reads back: the cell,
    its minutes, CIDEr and CE-F1, and the ε its ledger spent."""

    def fake_cell(base, method, epsilon, seed, folder, say=None):
        return {
            "method": method,
            "epsilon": epsilon,
            "seed": seed,
            "test": dict.fromkeys(METRIC_NAMES, 0.25) | {"CIDEr": 3.2475},
            "per_site": None,
            "privacy": {"epsilon": {"site0": {"rdp": 0.9999929}, "site1": {"rdp": 0.5}}} if epsilon else None,
        }

    monkeypatch.setattr(sweep_module, "run_cell", fake_cell)
    said: list[str] = []
    sweep_module.sweep(RunConfig(), ["fedavg"], [0], [None, 1.0], tmp_path / "sw", log=said.append)
    done = [line for line in said if "done in" in line]
    assert len(done) == 2, said
    assert done[0].startswith("fedavg seed 0: done in 0.0 min: CIDEr 3.248, CE-F1 0.250"), done
    assert "ε spent" not in done[0]
    assert done[1].startswith("fedavg ε=1 seed 0: done in") and done[1].endswith(
        "CIDEr 3.248, CE-F1 0.250, ε spent 1.000"
    ), done
    # a resumed sweep says the cell was there, not that it ran again
    said.clear()
    sweep_module.sweep(RunConfig(), ["fedavg"], [0], [1.0], tmp_path / "sw", log=said.append)
    assert not [line for line in said if "done in" in line] and any("done already" in line for line in said)


def test_sweep_resumes_and_writes_plot_and_html(tmp_path: Path, monkeypatch):
    calls: list[tuple] = []

    def fake_cell(base, method, epsilon, seed, folder, say=None):
        calls.append((method, epsilon, seed))
        value = {"base": 1.0, "fedtar": 2.0}[method] - (0.5 if epsilon else 0.0) + 0.1 * seed
        privacy = {"epsilon": {"site0": {"rdp": epsilon * 0.99}}} if epsilon else None
        return {
            "method": method,
            "epsilon": epsilon,
            "seed": seed,
            "test": dict.fromkeys(METRIC_NAMES, value),
            "per_site": {"site0": dict.fromkeys(METRIC_NAMES, value)} if method == "base" else None,
            "privacy": privacy,
        }

    monkeypatch.setattr(sweep_module, "run_cell", fake_cell)
    cfg = RunConfig()
    out = tmp_path / "sw"
    sweep_module.sweep(cfg, ["base", "fedtar"], [0, 1], [None, 4.0], out, log=lambda _: None)
    # base runs once per seed (not at ε = 4); fedtar at both ε
    assert sorted(calls, key=str) == sorted(
        [("base", None, 0), ("base", None, 1), ("fedtar", None, 0), ("fedtar", None, 1)]
        + [("fedtar", 4.0, 0), ("fedtar", 4.0, 1)],
        key=str,
    )
    calls.clear()
    results = sweep_module.sweep(cfg, ["base", "fedtar"], [0, 1, 2], [None], out, log=lambda _: None)
    assert calls == [("base", None, 2), ("fedtar", None, 2)]  # finished cells are skipped
    assert len(results["runs"]) == 8
    png = out / "privacy_utility.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (out / "results.html").read_text()
    assert "data:image/png;base64," in page and "fedtar" in page
    md = (out / "results.md").read_text()
    assert "| fedtar | 4 | 3.960 | 2 |" in md and "CIDEr per site" in md
    # gains 0.5 at ε = 4 against 1.0 without DP on both seeds that ran it: half, with no spread
    assert "| fedtar ε=4 | 3.960 | 2 | 50 % [50, 50] | 50 % [50, 50] |" in md
    saved = json.loads((out / "results.json").read_text())
    assert saved["paired_vs_base"][0]["CIDEr"][0] == pytest.approx(1.0)
    # another configuration in the same folder is refused, not mixed in
    other = cfg.model_copy(deep=True)
    other.fed.rounds = cfg.fed.rounds + 1
    with pytest.raises(ValueError, match="another configuration"):
        sweep_module.sweep(other, ["base"], [0], [None], out, log=lambda _: None)
    # a folder begun before an upgrade that added a setting (at its default) still resumes
    saved_config = out / "sweep-config.json"
    older = json.loads(saved_config.read_text())
    del older["data"]["synth"]["site_wording"]
    saved_config.write_text(json.dumps(older))
    calls.clear()
    sweep_module.sweep(cfg, ["base"], [0, 3], [None], out, log=lambda _: None)
    assert calls == [("base", None, 3)]
    older["fed"]["no_such_setting"] = 1  # one today's schema refuses is another benchmark
    saved_config.write_text(json.dumps(older))
    with pytest.raises(ValueError, match="another configuration"):
        sweep_module.sweep(cfg, ["base"], [0], [None], out, log=lambda _: None)


def test_unknown_method_is_refused_before_anything_runs(tmp_path: Path):
    with pytest.raises(ValueError, match="fedfoo"):
        sweep_module.sweep(RunConfig(), ["fedfoo"], [0], [None], tmp_path / "x", log=lambda _: None)
    assert not (tmp_path / "x").exists()


def _results_recipe() -> list[list[str]]:
    """The `make results` commands, with the Makefile's variables expanded (docs are executable:
    RESULTS.md names this target, so its commands must at least parse and name real things)."""
    text = (ROOT / "Makefile").read_text()
    variables = dict(
        line.split(" := ", 1) for line in text.splitlines() if " := " in line and not line.startswith("\t")
    )
    recipe = text.split("\nresults:", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    commands = []
    for line in recipe:
        for name, value in variables.items():
            line = line.replace(f"$({name})", value)
        commands.append(line.split())
    return commands


SWEEP_FLAGS = {"--config", "--methods", "--seeds", "--epsilons", "-o", "--out", "--rounds", "--cells-from"}


def _check_sweep_command(cmd: list[str]) -> None:
    from secure_fed.config import load_config

    assert cmd[0].endswith("secure-fed-lab") and cmd[1] == "sweep", cmd
    from secure_fed.cli.common import set_options

    pairs = list(zip(cmd[2::2], cmd[3::2], strict=True))
    args = {flag: value for flag, value in pairs if flag != "--set"}
    assert set(args) <= SWEEP_FLAGS
    if "--cells-from" in args:  # a kept record the repository holds, so the command can run on a fresh clone
        assert (ROOT / args["--cells-from"]).is_file(), args["--cells-from"]
    # read as the CLI reads them (a bare word such as `matched` is the string)
    overrides = set_options([value for flag, value in pairs if flag == "--set"])
    load_config(ROOT / args["--config"], overrides)
    assert set(args["--methods"].split(",")) <= set(lab_cells.METHODS)
    assert all(e == "inf" or float(e) > 0 for e in args["--epsilons"].split(","))
    assert all(int(x) >= 0 for x in args["--seeds"].split(","))


def _config(name: str) -> RunConfig:
    from secure_fed.config import load_config

    return load_config(ROOT / "configs" / f"{name}.toml")


def test_make_results_commands_name_real_methods_and_configs():
    commands = _results_recipe()
    assert len(commands) == 10
    for cmd in commands:
        _check_sweep_command(cmd)
    null = _config("results-null")
    assert null.data.synth.temporal_drift == 0 and null.data.synth.demographic_effect == 0
    small = _config("small-sites")
    default = _config("results")
    shared = _config("shared-wording")
    small_shared = _config("small-shared-wording")
    assert default.data.synth.site_wording == 1 and shared.data.synth.site_wording == 0
    # each shared-wording scenario differs from its own-wording twin in the wording knob only
    assert shared.model_copy(update={"data": default.data}) == default
    assert shared.data.synth.model_copy(update={"site_wording": 1.0}) == default.data.synth
    assert small_shared.data.synth.model_copy(update={"site_wording": 1.0}) == small.data.synth
    assert small_shared.data.model_copy(update={"synth": small.data.synth}) == small.data

    def sizes(c: RunConfig) -> tuple[int, int, int]:
        n = c.data.synth.patients
        n_val, n_test = _split_sizes(n, c.data.val_fraction, c.data.test_fraction)
        return n - n_val - n_test, n_val, n_test

    # the benchmark trains as a default run does and scores about four times its test patients
    embedded = RunConfig.model_validate({"out": "x"})
    (train, val, test), (e_train, e_val, e_test) = sizes(default), sizes(embedded)
    assert (train, val, test) == (36, 12, 47) and (e_train, e_val, e_test) == (36, 12, 12)
    assert default.model_copy(update={"data": embedded.data}) == embedded.model_copy(
        update={"train": default.train, "out": default.out}
    )
    # the larger-test scenario is the default benchmark now; the data-poor one has 8 training patients
    assert _config("large-test") == default
    assert sizes(small) == (8, 4, 8)
    # IID sites: the shared-wording scenarios with both site-difference knobs at 0, nothing else
    iid = _config("iid-sites")
    small_iid = _config("small-iid-sites")
    alike = {"scanner_shift": 0.0, "age_mix_shift": 0.0}
    assert shared.data.synth.model_copy(update=alike) == iid.data.synth
    assert small_shared.data.synth.model_copy(update=alike) == small_iid.data.synth
    assert iid.model_copy(update={"data": shared.data}) == shared
    assert small_iid.model_copy(update={"data": small_shared.data}) == small_shared
    # the training-noise sweep holds seed 0's data of the default benchmark, nothing else
    noise = _config("training-noise")
    assert noise.data.split_seed == 0 and noise.data.synth.seed == 0
    assert noise.model_copy(update={"data": default.data}) == default
    assert noise.data.model_copy(update={"split_seed": None}) == default.data


def test_a_held_split_makes_every_seed_train_on_the_same_data():
    default = _config("results")
    held = _config("training-noise")
    cells = [lab_cells.seed_config(held, m, None, s) for m in ("local", "fedavg") for s in (1, 2)]
    assert all(c.data.synth.seed == 0 and c.data.split_seed == 0 for c in cells)
    assert [c.seed for c in cells] == [1, 2, 1, 2]  # the training still follows the seed
    # without it, the seed draws the cohort and the split too (the default benchmark's pairing)
    free = lab_cells.seed_config(default, "local", None, 2)
    assert free.data.synth.seed == 2 and split_seed(free) == 2 and split_seed(cells[1]) == 0


def test_sweep_help_lists_every_method():
    from typer.testing import CliRunner

    from secure_fed.lab.cli import app

    result = CliRunner().invoke(app, ["sweep", "--help"], terminal_width=400)
    assert result.exit_code == 0
    assert all(m in result.output for m in lab_cells.METHODS)


def test_results_md_sweep_commands_are_valid():
    """The sweep commands docs/RESULTS.md shows, and those its tables' JSON name as their source,
    parse and name real things."""
    docs = ROOT / "docs"
    text = (docs / "RESULTS.md").read_text()
    commands = [ln.split() for ln in text.splitlines() if ln.startswith("secure-fed-lab sweep")]
    assert commands
    for path in sorted((docs / "results").glob("*.json")):
        record = json.loads(path.read_text())
        if "columns" not in record:  # a plot's points or a benchmark's raw output: not a table
            continue
        for part in record["source"]["command"].split(" && "):
            if part.startswith("secure-fed-lab sweep"):
                commands.append(part.split())
    for cmd in commands:
        _check_sweep_command(cmd)


@pytest.mark.slow  # a sweep's cells: make test-fast leaves it out
def test_fine_tuned_cell_starts_from_its_federated_cells_final_model(
    make_config, tmp_path: Path, monkeypatch, one_torch_thread
):
    # imported before the patch: a module that binds train_copies at import (the FedTAR learner)
    # would otherwise keep the spy for every later test in the process
    import secure_fed.algorithms.fedtar.learner  # noqa: F401
    from secure_fed.site import training

    cfg = make_config()
    out = tmp_path / "sw"
    starts: list[np.ndarray] = []
    real = training.train_copies

    def spy(model, start, groups, settings, seed, **kw):
        starts.append(np.concatenate([v.numpy().ravel() for v in start.values()]))
        assert settings.epochs == cfg.train.local_epochs  # one round's local work, not a whole run
        return real(model, start, groups, settings, seed, **kw)

    monkeypatch.setattr(training, "train_copies", spy)
    # asked for alone, the fine-tuned method brings its federated cell first
    said: list[str] = []
    results = sweep_module.sweep(cfg, ["fedavg-ft"], [0], [None], out, log=said.append)
    assert [r["method"] for r in results["runs"]] == ["fedavg", "fedavg-ft"]
    # the federated cell's rounds reach the sweep's console as they end (a real run's callback)
    rounds = [line for line in said if line.startswith("fedavg seed 0: round ")]
    assert len(rounds) == cfg.fed.rounds and rounds[-1].startswith(
        f"fedavg seed 0: round {cfg.fed.rounds}/{cfg.fed.rounds} after "
    ), said
    assert rounds[-1].endswith(", scoring")
    from secure_fed.server.checkpoint import load_checkpoint

    loaded = load_checkpoint(out / "fedavg-epsinf-seed0" / "checkpoint")
    assert loaded is not None and loaded[0] == cfg.fed.rounds
    fine_tune_starts = starts[-3:]  # one per site, after the federated run's own training
    assert all(np.allclose(s, loaded[1]) for s in fine_tune_starts)
    federated, tuned = results["runs"]
    assert set(tuned["per_site"]) == {"site0", "site1", "site2"}
    assert tuned["test"]["CIDEr"] != federated["test"]["CIDEr"]  # the sites' own epochs changed it
    md = (out / "results.md").read_text()
    assert "| fedavg-ft | ∞ |" in md


@pytest.mark.parametrize(("fine_tune_epochs", "expected"), [(None, "local_epochs"), (5, 5)])
def test_fine_tuned_reference_trains_for_its_configured_epochs(
    make_config, tmp_path: Path, monkeypatch, fine_tune_epochs, expected
):
    """`local` trains rounds × local_epochs; the fine-tuned reference one round's epochs unless
    `train.fine_tune_epochs` gives it its own budget (e.g. local's, for a like-for-like site)."""
    from secure_fed.model.setup import build_report_model
    from secure_fed.model.vectors import flatten
    from secure_fed.server.checkpoint import save_checkpoint
    from secure_fed.site import training

    cfg = make_config(train__fine_tune_epochs=fine_tune_epochs)
    federated = tmp_path / "fedavg-epsinf-seed0"
    start = flatten(build_report_model(cfg).trainable_state()).numpy()
    save_checkpoint(federated / "checkpoint", cfg.fed.rounds, start, {}, {})
    (federated / "cell.json").write_text("{}")
    epochs: list[int] = []

    def spy(model, start, groups, settings, seed, **kw):
        epochs.append(settings.epochs)
        raise StopIteration  # the epochs are what this test reads; scoring is tested above

    monkeypatch.setattr(training, "train_copies", spy)
    monkeypatch.setattr(lab_refs, "_score_sites", lambda cfg, out, state_for, note: state_for(object()))
    with pytest.raises(StopIteration):
        lab_refs.evaluate_fine_tuned(cfg, federated, tmp_path / "ft")
    want = cfg.train.local_epochs if expected == "local_epochs" else expected
    assert epochs == [want]


@pytest.mark.slow  # a sweep's cells: make test-fast leaves it out
def test_fine_tuned_cell_of_a_distributed_dp_sweep_scores_its_sites(
    make_config, tmp_path: Path, one_torch_thread
):
    """`fedavg-ft` on a `dp.noise = "distributed"` config: the sites score the fine-tuned model
    (nothing is released, so the scoring runtimes plan no noise share) instead of each refusing for
    want of SecAgg+ keys, which stopped the sweep with a traceback."""
    cfg = make_config(
        **DISTRIBUTED_DP,
        fed__method="fedavg",
    )
    out = tmp_path / "sw"
    results = sweep_module.sweep(cfg, ["fedavg-ft"], [0], [8.0], out, log=lambda _: None)
    federated, tuned = results["runs"]
    assert (federated["method"], tuned["method"]) == ("fedavg", "fedavg-ft")
    assert set(tuned["per_site"]) == {"site0", "site1", "site2"}
    assert all(math.isfinite(v["CIDEr"]) for v in tuned["per_site"].values())
    # the fine-tuned cell's ε is its federated cell's: the distributed release's own accounting
    assert tuned["privacy"] == federated["privacy"]
    assert federated["privacy"]["epsilon"]["site0"]["rdp"] == pytest.approx(8.0, rel=1e-3)


def _private(runs_eps: float, value: float, seed: int) -> dict:
    run = _run("fedtar", runs_eps, value, seed=seed, privacy={"epsilon": {"site0": {"rdp": runs_eps * 0.99}}})
    run["per_site"] = {"site0": dict.fromkeys(METRIC_NAMES, value)}
    return run


def test_private_cells_are_in_the_paired_and_per_site_tables_labelled_by_epsilon():
    runs = []
    for seed in (0, 1):
        for method, value in (("base", 1.0), ("fedtar", 2.0)):
            run = _run(method, None, value + 0.1 * seed, seed=seed)
            run["per_site"] = {"site0": dict.fromkeys(METRIC_NAMES, value)}
            runs.append(run)
        runs.append(_private(8.0, 1.5 + 0.1 * seed, seed))
    paired = paired_differences(runs, "base")
    assert [(r["method"], r["epsilon"]) for r in paired] == [("fedtar", None), ("fedtar", 8.0)]
    assert paired[1]["CIDEr"][0] == pytest.approx(0.5) and paired[1]["n"] == 2
    table = lab_tables.paired_table(paired)
    assert "| fedtar ε=∞ | 2 |" in table and "| fedtar ε=8 | 2 | +0.500" in table
    sites = lab_tables.per_site_table(runs)
    assert "| base ε=∞ |" in sites and "| fedtar ε=∞ |" in sites and "| fedtar ε=8 | 1.550 ± 0.071 |" in sites


def test_per_site_gains_over_local_are_paired_by_seed_with_intervals():
    """Item 5 of issue 30: each site's gain over training alone, seed by seed. site1's gain is
    +1.0 on both seeds (interval of width 0), site0's +0.5 and +1.5 (mean +1.0, t interval with
    12.706 × 0.707 / √2); a cell missing a site shows "—", and local is not compared with itself."""

    def cell(method: str, seed: int, site0: float, site1: float | None, eps: float | None = None) -> dict:
        run = _run(method, eps, site0, seed=seed)
        run["per_site"] = {"site0": {"CIDEr": site0}} | ({} if site1 is None else {"site1": {"CIDEr": site1}})
        return run

    runs = [
        cell("local", 0, 2.0, 1.0),
        cell("local", 1, 2.0, 2.0),
        cell("fedavg", 0, 2.5, 2.0),
        cell("fedavg", 1, 3.5, 3.0),
        cell("fedavg", 0, 2.0, None, eps=8.0),
    ]
    table = lab_tables.per_site_vs(runs, "local")
    rows = {line.split(" | ")[0].strip("| "): line for line in table.splitlines()[2:]}
    assert set(rows) == {"fedavg ε=∞", "fedavg ε=8"}
    half = 12.706 * 0.5**0.5 / 2**0.5  # t(1) × sample std of (0.5, 1.5) / √(2 seeds)
    expected = f"| 2 | +1.000 [{1 - half:+.3f}, {1 + half:+.3f}] | +1.000 [+1.000, +1.000] |"
    assert expected in rows["fedavg ε=∞"]
    assert rows["fedavg ε=8"].endswith("| 1 | +0.000 | — |")
    assert lab_tables.per_site_vs([r for r in runs if r["method"] != "local"], "local") == ""


def test_a_sweep_without_private_cells_still_plots(tmp_path: Path, monkeypatch):
    def fake_cell(base, method, epsilon, seed, folder, say=None):
        value = {"base": 1.0, "fedtar": 2.0}[method] + 0.1 * seed
        return {"method": method, "epsilon": None, "seed": seed, "test": dict.fromkeys(METRIC_NAMES, value)}

    monkeypatch.setattr(sweep_module, "run_cell", fake_cell)
    out = tmp_path / "inf"
    sweep_module.sweep(RunConfig(), ["base", "fedtar"], [0, 1], [None], out, log=lambda _: None)
    assert (out / "privacy_utility.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "data:image/png;base64," in (out / "results.html").read_text()


def test_a_long_cell_says_about_ten_round_lines_with_the_time_left():
    now = [0.0]
    said: list[str] = []
    progress = sweep_module.CellProgress("fedtar ε=8 seed 0", said.append, clock=lambda: now[0])
    for done in range(1, 51):
        now[0] = 30.0 * done  # 30 s a round
        progress(done, 50)
    assert len(said) == 10, said
    assert said[0] == "fedtar ε=8 seed 0: round 5/50 after 2.5 min, about 22.5 min of rounds left"
    assert said[-1] == "fedtar ε=8 seed 0: round 50/50 after 25.0 min, scoring"
    said.clear()
    short = sweep_module.CellProgress("fedavg seed 1", said.append, clock=lambda: 0.0)
    for done in range(1, 4):
        short(done, 3)
    assert [line.split(": round ")[1].split(" ")[0] for line in said] == ["1/3", "2/3", "3/3"]
    said.clear()
    now[0] = 0.0
    steps = sweep_module.CellProgress("central ε=8 seed 2", said.append, clock=lambda: now[0], unit="step")
    now[0] = 60.0
    steps(55, 550)
    assert said == ["central ε=8 seed 2: step 55/550 after 1.0 min, about 9.0 min of steps left"]
    said.clear()
    # sites differ in size: `local` counts them but promises no time left
    now[0] = 0.0
    sites = sweep_module.CellProgress(
        "local seed 0", said.append, clock=lambda: now[0], unit="site", estimate=False
    )
    now[0] = 60.0
    sites(1, 5)
    sites(5, 5)
    assert said == ["local seed 0: site 1/5 after 1.0 min", "local seed 0: site 5/5 after 1.0 min, scoring"]


def test_a_cell_writes_its_report(tmp_path: Path):
    from tests.verifier.conftest import build_run

    folder = tmp_path / "fedtar-eps8.0-seed0"
    build_run(folder)  # audit/*.jsonl and keys/ as a run's cell folder holds them
    page = sweep_module.write_cell_report(RunConfig(), folder)
    assert page == folder / "report.html" and page.exists()
    assert json.loads(page.with_suffix(".json").read_text())["verification"]["ok"]
    assert sweep_module.write_cell_report(RunConfig(), tmp_path / "no-logs") is None
    shutil.rmtree(folder / "keys")  # no keys to check with: still a report, saying so
    page = sweep_module.write_cell_report(RunConfig(), folder)
    assert page is not None and not json.loads(page.with_suffix(".json").read_text())["verification"]["ok"]


def test_an_interrupted_cell_is_set_aside_not_reused(tmp_path: Path, monkeypatch):
    """A cell stopped after its logs closed but before cell.json: the rerun starts in an empty
    folder (a closed log never reopens) and the first attempt's signed logs are kept beside it."""
    out = tmp_path / "sw"
    folder = lab_cells.cell_folder(out, "fedtar", None, 0)
    (folder / "audit").mkdir(parents=True)
    first_log = b'{"seq": 0, "event": "head"}\n'
    (folder / "audit" / "server.jsonl").write_bytes(first_log)
    seen: list[list[str]] = []

    def fake_cell(base, method, epsilon, seed, cell_dir, say=None):
        seen.append(sorted(p.name for p in cell_dir.iterdir()) if cell_dir.exists() else [])
        return {
            "method": method,
            "epsilon": epsilon,
            "seed": seed,
            "test": dict.fromkeys(METRIC_NAMES, 1.0),
            "per_site": None,
            "privacy": None,
        }

    monkeypatch.setattr(sweep_module, "run_cell", fake_cell)
    lines: list[str] = []
    sweep_module.sweep(RunConfig(), ["fedtar"], [0], [None], out, log=lines.append)
    assert seen == [[]]
    kept = list(out.glob(f"{folder.name}.interrupted-*"))
    assert len(kept) == 1 and (kept[0] / "audit" / "server.jsonl").read_bytes() == first_log
    assert any("unfinished attempt kept as" in line for line in lines)
    assert (folder / "cell.json").exists()


@pytest.mark.slow  # a sweep's cell: make test-fast leaves it out
def test_private_central_is_dp_sgd_on_the_pooled_patients_and_spends_its_target(
    tmp_path: Path, cache_dir: Path
):
    """`central` at a finite ε (issue 30's ceiling of private training): a real cell, not a skip
    and not the non-private central; ε is the ledger's price of the events that ran (histogram +
    Poisson-sampled DP-SGD over the pooled train patients), at most the target and near it; `local`
    still runs only at ε = ∞."""
    from tests.conftest import small_config

    cfg = small_config(cache_dir, tmp_path / "unused", fed__rounds=1, train__local_epochs=1)
    out = tmp_path / "sw"
    said: list[str] = []
    results = sweep_module.sweep(cfg, ["local", "central"], [0], [4.0], out, log=said.append)
    (cell,) = results["runs"]  # local ε=4 does not exist
    # its optimiser steps reach the sweep's console as they end (the training loop's own callback)
    steps = [line for line in said if line.startswith("central ε=4 seed 0: step ")]
    assert [line.split(": step ")[1].split(" ")[0] for line in steps] == ["1/4", "2/4", "3/4", "4/4"]
    assert steps[-1].endswith(", scoring")
    assert (cell["method"], cell["epsilon"]) == ("central", 4.0)
    privacy = cell["privacy"]
    spent = privacy["epsilon"]["pooled"]["rdp"]
    assert 0.9 * 4.0 <= spent <= 4.0 * 1.01
    assert privacy["noise_multiplier"] > 0 and privacy["histogram_noise_multiplier"] > 0
    # the pooled population: every site's train patients (3 sites × 8), one Poisson rate over them
    assert privacy["patients"] == 24 and privacy["steps"] == 4  # 1 epoch of 1/q = 4 steps
    assert 0.0 <= cell["test"]["CE-F1"] <= 1.0 and cell["test"]["CIDEr"] >= 0.0
    assert set(cell["per_site"]) == {"site0", "site1", "site2"}
    row = next(r for r in results["summary"] if r["method"] == "central")
    assert row["epsilon_spent"] == pytest.approx(spent)


@pytest.mark.slow  # a sweep's cells: make test-fast leaves it out
def test_local_and_central_report_their_training_as_it_goes(tmp_path: Path, cache_dir: Path):
    """`local` trains each site in turn and non-private `central` takes hundreds of steps on the
    pooled patients at hospital scale: each says how far it is (the sweep turns it into lines)."""
    from tests.conftest import small_config

    cfg = small_config(cache_dir, tmp_path / "unused", fed__rounds=1, train__local_epochs=1)
    heard: dict[str, list[tuple[int, int]]] = {"local": [], "central": []}
    for method, calls in heard.items():
        lab_refs.evaluate_reference(
            cfg, method, tmp_path / method, progress=lambda done, total, c=calls: c.append((done, total))
        )
    assert heard["local"] == [(1, 3), (2, 3), (3, 3)]  # one call a site, after its training
    steps = heard["central"]
    assert steps and steps == [(k, steps[-1][1]) for k in range(1, steps[-1][1] + 1)]


def _make_recipes(text: str, target: str) -> list[str]:
    """The command lines of a Makefile target."""
    return text.split(f"\n{target}:", 1)[1].split("\n\n", 1)[0].splitlines()[1:]


def _make_recipe(text: str, target: str) -> str:
    """The one command line of a Makefile target."""
    (line,) = _make_recipes(text, target)
    return line


@pytest.mark.parametrize(
    ("target", "site_methods", "site_epsilons", "distributed_methods", "distributed_epsilons"),
    [
        # the section at the configs' recipe: ε = 8 and the references (and, as a second site-mode
        # line, FedAvg and FedTAR without DP)
        ("results-hospital", ["base", "central", "central-clip"], ["inf", "8"], ["fedavg", "fedtar"], ["8"]),
        # the whole grid of issues 30 and 31, and FedAvg fine-tuned at each site, whose local epoch
        # releases nothing (the small sites' question)
        (
            "results-hospital-grid",
            ["base", "local", "central", "fedavg", "fedtar", "fedavg-ft", "fedtar-ft"],
            ["inf", "16", "8", "4", "2", "1"],
            ["fedavg", "fedtar", "fedavg-ft"],
            ["8", "4", "2", "1"],
        ),
    ],
)
def test_make_results_hospital_runs_on_the_hospital_configs(
    target, site_methods, site_epsilons, distributed_methods, distributed_epsilons
):
    """`make results-hospital` (and `-grid`): two resumable sweeps (site mode, distributed DP for
    issue 31) shared by two workers that `make -j2` runs at once, each one sweep then the other in
    opposite orders, and a last recipe that gathers both; the config is the 10,000-patient,
    5-unequal-site cohort; both targets share their folders, so their cells (< 1 s)."""
    text = (ROOT / "Makefile").read_text()

    def recipe(target: str) -> tuple[list[str], list[str]]:
        head, body = text.split(f"\n{target}:", 1)[1].split("\n\n", 1)[0].split("\n", 1)
        return head.split(), [line.split()[-1] for line in body.splitlines()]

    site, dist = f"{target}-site", f"{target}-distributed"
    worker = target.replace("results-", "") + "-worker"
    assert recipe(target) == ([f"{worker}-1", f"{worker}-2"], [site, dist])
    assert recipe(f"{worker}-1") == (["$(STAMP)"], [site, dist])
    assert recipe(f"{worker}-2") == (["$(STAMP)"], [dist, site])
    line, *more = _make_recipes(text, site)
    distributed = _make_recipe(text, dist)
    if target == "results-hospital":  # the methods' own non-private cells, into the same folder
        (own,) = more
        own_args = own.replace("$(SWEEP)", ".venv/bin/secure-fed-lab sweep").split()
        _check_sweep_command(own_args)
        own_opts = dict(zip(own_args[2::2], own_args[3::2], strict=True))
        assert own_opts["--methods"] == "fedavg,fedtar" and own_opts["--epsilons"] == "inf"
        assert (
            own_opts["-o"] == "runs/results-hospital"
            and own_opts["--config"] == "configs/hospital-scale.toml"
        )
    else:
        assert more == []
    cmd = line.replace("$(SWEEP)", ".venv/bin/secure-fed-lab sweep").split()
    _check_sweep_command(cmd)
    args = dict(zip(cmd[2::2], cmd[3::2], strict=True))
    assert args["--methods"].split(",") == site_methods
    assert args["--epsilons"].split(",") == site_epsilons
    assert args["-o"] == "runs/results-hospital"
    assert len(args["--seeds"].split(",")) >= 3
    synth = _config("hospital-scale").data.synth
    assert synth.site_patients is not None and sum(synth.site_patients) >= 10_000
    assert synth.sites >= 5 and len(set(synth.site_patients)) == synth.sites and synth.visits == 5
    # issue 31 at this scale: FedAvg and FedTAR with distributed DP on the same patients and recipe, its
    # one-step rounds the same private steps as site mode's rounds of 1/q steps
    cmd = distributed.replace("$(SWEEP)", ".venv/bin/secure-fed-lab sweep").split()
    _check_sweep_command(cmd)
    args = dict(zip(cmd[2::2], cmd[3::2], strict=True))
    assert args["--methods"].split(",") == distributed_methods
    assert args["--epsilons"].split(",") == distributed_epsilons
    assert args["-o"] == "runs/results-hospital-distributed"
    site, dist = _config("hospital-scale"), _config("hospital-scale-distributed")
    assert dist.dp.noise == "distributed" and site.dp.noise == "site"
    assert dist.data == site.data and dist.model == site.model
    assert (dist.dp.sample_rate, dist.dp.max_grad_norm, dist.dp.delta) == (
        site.dp.sample_rate,
        site.dp.max_grad_norm,
        site.dp.delta,
    )
    assert dist.fed.rounds == site.fed.rounds * site.train.local_epochs * round(1 / site.dp.sample_rate)
    # the tuned lr and averaging too (the Skellam sum is priced by RDP only: the accountant differs)
    assert (dist.train.lr, dist.train.average, dist.train.ema_decay) == (
        site.train.lr,
        site.train.average,
        site.train.ema_decay,
    )
    assert dist.dp.accountant == "rdp"


def test_a_kept_record_brings_a_lost_folders_cells_back_and_the_sweep_runs_only_the_rest(
    tmp_path: Path, monkeypatch
):
    """runs/ is not committed and can be lost with its machine; the kept record (configuration and
    finished cells, docs/results/sweeps/) restores them so a later sweep extends the same tables
    instead of running hours of cells again, and is refused on another configuration."""
    calls: list[tuple] = []

    def fake_cell(base, method, epsilon, seed, folder, say=None):
        calls.append((method, epsilon, seed))
        return _run(method, epsilon, 1.0 + seed + (2.0 if method == "central" else 0.0), seed)

    monkeypatch.setattr(sweep_module, "run_cell", fake_cell)
    cfg = RunConfig()
    first = tmp_path / "first"
    sweep_module.sweep(cfg, ["base", "central"], [0, 1], [None], first, log=lambda _: None)
    record = json.loads(json.dumps(lab_records.kept(first)))  # as committed and read back
    assert [(r["method"], r["seed"]) for r in record["runs"]] == [
        ("base", 0),
        ("base", 1),
        ("central", 0),
        ("central", 1),
    ]
    shutil.rmtree(first)  # the machine's runs/ is gone

    again = tmp_path / "again"
    written = lab_records.restore_cells(record, again)
    assert len(written) == 4 and lab_records.restore_cells(record, again) == []
    calls.clear()
    results = sweep_module.sweep(cfg, ["base", "central"], [0, 1, 2], [None], again, log=lambda _: None)
    assert calls == [("base", None, 2), ("central", None, 2)]
    assert lab_stats.results_of(record["runs"])["summary"] == summarise(record["runs"])
    assert [r["CIDEr"][0] for r in results["paired"]] == pytest.approx([2.0])  # central − base, 3 seeds

    assert record["base_model"] == "base-a" and {r["base_model"] for r in results["runs"]} == {"base-a"}

    other = cfg.model_copy(deep=True)
    other.fed.rounds = cfg.fed.rounds + 1
    elsewhere = tmp_path / "other"
    sweep_module.sweep(other, ["base"], [0], [None], elsewhere, log=lambda _: None)
    with pytest.raises(ValueError, match="another configuration"):
        lab_records.restore_cells(record, elsewhere)
    with pytest.raises(ValueError, match="no sweep-config.json"):
        lab_records.kept(tmp_path / "nothing")
    with pytest.raises(ValueError, match="do not name their base model"):
        lab_records.restore_cells(record | {"base_model": None}, tmp_path / "unnamed")
    assert not (tmp_path / "unnamed").exists()


def test_cells_of_another_base_model_are_not_mixed_in(tmp_path: Path, monkeypatch):
    """Machines of the same kind pretrain different bases from one recipe (RESULTS.md, Machines):
    a folder, or a kept record, of another machine's base is refused, not extended with cells that
    cannot be compared with it."""
    monkeypatch.setattr(sweep_module, "run_cell", lambda base, m, e, s, folder, say=None: _run(m, e, 1.0, s))
    cfg = RunConfig()
    there = tmp_path / "there"
    sweep_module.sweep(cfg, ["base"], [0], [None], there, log=lambda _: None)
    record = lab_records.kept(there)
    monkeypatch.setattr(sweep_module, "base_model_digest", lambda cfg: "base-b")  # another machine
    with pytest.raises(ValueError, match="base model base-a .* this machine's base is base-b"):
        sweep_module.sweep(cfg, ["base"], [0, 1], [None], there, log=lambda _: None)
    here = tmp_path / "here"
    assert len(lab_records.restore_cells(record, here)) == 1
    with pytest.raises(ValueError, match="this machine's base is base-b"):
        sweep_module.sweep(cfg, ["base"], [0, 1], [None], here, log=lambda _: None)
    assert not lab_cells.cell_folder(here, "base", None, 1).exists()


def test_sweep_cli_takes_finished_cells_from_a_kept_record(tmp_path: Path):
    """`secure-fed-lab sweep --cells-from` writes the kept cells into the folder and does not run them
    (a real sweep with nothing left to run); a file that is not a record is one line naming it."""
    from typer.testing import CliRunner

    from secure_fed.lab.cli import app

    cfg = RunConfig()
    cfg.fed.engine = "inprocess"  # what the sweep command runs
    record = {
        "config": cfg.model_dump(mode="json", exclude={"out"}),
        "base_model": "base-a",
        "runs": [_run("base", None, 0.25, seed) for seed in (0, 1)],
    }
    kept_file = tmp_path / "kept.json"
    kept_file.write_text(json.dumps(record))
    out = tmp_path / "sw"
    args = ["sweep", "--methods", "base", "--seeds", "0,1", "--cells-from", str(kept_file), "-o", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "2 finished cell(s)" in result.output and result.output.count("done already") == 2
    saved = json.loads((out / "results.json").read_text())
    assert [r["test"]["CIDEr"] for r in saved["runs"]] == [0.25, 0.25]

    kept_file.write_text("{}")
    result = CliRunner().invoke(app, [*args[:-2], "-o", str(tmp_path / "sw2")])
    assert result.exit_code == 2
    assert (
        result.output.count("\n") == 1
        and f"--cells-from {kept_file}: not a kept sweep record" in result.output
    )
