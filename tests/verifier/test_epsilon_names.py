"""Every ε the report and `audit verify` print names its population and its accountant, and the
headline is one accountant's ε over every population that trained, at the worst site (issue 64
item 4).

The logs are a real run's (in process, distributed DP, FedTAR, 2 rounds): the training step is a
Skellam sum (RDP only) and the validation patients' α scalars are Gaussian, logged with a PRV ε as
well. A record of such a run once said `epsilon = {rdp: 8.00, prv: 7.39}`, where 7.39 was the
validation patients' ε alone: a PRV figure that is no site's, beside an RDP one that does not say
whose it is."""

from __future__ import annotations

import html as htmllib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from secure_fed.cli import app
from secure_fed.verifier.report import _refused_epsilon
from secure_fed.verifier.report_data import _as_reported, _guarantees, collect
from secure_fed.verifier.verdict import privacy_words
from secure_fed.verifier.verify import verify_logs

runner = CliRunner()
WORDS = {"train": "training patients", "validation": "validation patients"}


def _config(path: Path, cache_dir: Path) -> Path:
    path.write_text(
        "seed = 0\n[data.synth]\nsites = 3\npatients = 16\nvisits = 3\n"
        "[data]\nmax_visits = 3\nval_fraction = 0.25\ntest_fraction = 0.25\n"
        f'[model]\ncache_dir = "{cache_dir}"\npretrain_steps = 150\n'
        "[train]\nbatch_size = 8\nthreads = 1\nlocal_epochs = 1\n"
        '[fed]\nrounds = 2\nengine = "inprocess"\nmethod = "fedtar"\n'
        '[dp]\nenabled = true\ntarget_epsilon = 8.0\nsample_rate = 0.5\nnoise = "distributed"\n'
        "honest_min = 3\n"
    )
    return path


@pytest.fixture(scope="module")
def distributed_run(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Path:
    root = tmp_path_factory.mktemp("distributed")
    out = root / "out"
    ran = runner.invoke(app, ["run", "-c", str(_config(root / "run.toml", cache_dir)), "-o", str(out)])
    assert ran.exit_code == 0, ran.output
    return out


def _logs(out: Path) -> list[str]:
    return [str(path) for path in sorted((out / "audit").glob("*.jsonl"))]


def _last_epsilon(out: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """{site: {population: its last privacy record's ε}} from the sites' own logs."""
    last: dict[str, dict[str, dict[str, Any]]] = {}
    for path in _logs(out):
        for line in Path(path).read_text().splitlines():
            record = json.loads(line)
            if record["event"] == "privacy" and record["party"] == record["payload"]["site"]:
                payload = record["payload"]
                last.setdefault(payload["site"], {})[payload["population"]] = payload["epsilon"]
    return last


def _worst(out: Path) -> tuple[str, str, float]:
    """(site, population, ε): the largest RDP ε over every site's every population."""
    last = _last_epsilon(out)
    return max(
        ((site, pop, eps["rdp"]) for site, pops in sorted(last.items()) for pop, eps in pops.items()),
        key=lambda item: item[2],
    )


def _one_line(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.slow  # one whole run in process (~1 min)
def test_the_headline_names_its_site_population_and_one_accountant(distributed_run: Path) -> None:
    out = distributed_run
    last = _last_epsilon(out)
    # the mixed case: the training step has no PRV ε, the validation patients' α scalars have one
    assert all(
        pops["train"]["prv"] is None and pops["validation"]["prv"] is not None for pops in last.values()
    )
    site, population, eps = _worst(out)
    keys = str(out / "keys")
    verified = runner.invoke(app, ["audit", "verify", *_logs(out), "--keys", keys])
    assert verified.exit_code == 0, verified.output
    said = _one_line(verified.output)
    headline = f"max ε {eps:.3g} of 8 at {site}, {WORDS[population]}"
    assert headline in said, said
    assert "RDP over its training and validation patients" in said, said
    # no PRV figure is any site's headline: PRV covers only the validation patients
    for pops in last.values():
        assert f"{pops['validation']['prv']:.3g}" not in said, said

    report = out / "r" / "report.html"
    made = runner.invoke(app, ["audit", "report", *_logs(out), "-o", str(report), "--keys", keys])
    assert made.exit_code == 0, made.output
    assert headline in _one_line(made.output), made.output
    written = json.loads(report.with_suffix(".json").read_text())
    assert headline in written["verdict"]["privacy"]
    run = written["run"]
    assert (run["site"], run["population"], run["accountant"]) == (site, population, "RDP"), run
    assert run["max_epsilon"] == pytest.approx(eps)
    for g in written["guarantees"]:
        own = last[g["site"]]
        # every population's figure is the RDP one: one accountant over the populations that trained
        assert g["accountant"] == "RDP" and g["populations"] == pytest.approx(
            {pop: eps["rdp"] for pop, eps in own.items()}
        ), g
        assert g["population"] == max(own, key=lambda pop: own[pop]["rdp"]), g
    page = report.read_text(encoding="utf-8")
    table = re.search(r"<table id='sites'>(.*?)</table>", page, re.DOTALL)
    assert table is not None
    cells = htmllib.unescape(re.sub(r"<[^>]+>", "|", table.group(1)))
    for row in written["site_table"]:
        whose = WORDS[row["epsilon_population"]]
        assert f"{row['epsilon_run']:.3g} ({whose})" in cells, cells
        assert row["accountant"] == "RDP", row


@pytest.mark.slow
def test_a_prv_run_never_mixes_a_populations_prv_with_anothers_rdp(distributed_run: Path) -> None:
    """The same real records read as a PRV run: the training patients have no PRV ε, so the site's
    ε is RDP's over both populations, never the validation patients' PRV beside the training RDP."""
    paths = _logs(distributed_run)
    data = collect(paths, verify_logs(paths, None))
    rows = [_as_reported(row, "prv") for row in data.mechanisms]
    last = _last_epsilon(distributed_run)
    for g in _guarantees(rows, "prv"):
        own = last[g.site]
        assert g.accountant == "RDP", g
        assert g.populations == pytest.approx({pop: eps["rdp"] for pop, eps in own.items()}), g
        assert g.epsilon == pytest.approx(max(eps["rdp"] for eps in own.values())), g


@pytest.mark.slow
def test_verify_names_whose_epsilon_a_mismatch_is(distributed_run: Path, tmp_path: Path) -> None:
    """A privacy record whose ε does not match its mechanism: the problem says which accountant's ε
    it is and whose patients it prices."""
    paths = _logs(distributed_run)
    site_log = next(Path(p) for p in paths if Path(p).name == "site0.jsonl")
    lines = site_log.read_text().splitlines()
    index = next(
        i
        for i, line in enumerate(lines)
        if json.loads(line)["event"] == "privacy"
        and json.loads(line)["payload"]["population"] == "validation"
    )
    record = json.loads(lines[index])
    record["payload"]["epsilon"]["rdp"] *= 0.5
    lines[index] = json.dumps(record)
    forged = tmp_path / "site0.jsonl"
    forged.write_text("\n".join(lines) + "\n")
    result = verify_logs([str(forged)], None)
    reasons = [problem.reason for problem in result.problems]
    assert any("RDP epsilon" in reason and "site0's validation patients" in reason for reason in reasons), (
        reasons
    )


def _facts(**extra: Any) -> dict[str, Any]:
    return {
        "dp": True,
        "max_epsilon": 8.3,
        "budget": 8.0,
        "site": "site1",
        "population": "validation",
        "populations": ["train", "validation"],
        "accountant": "RDP",
        "delta": 1e-5,
        **extra,
    }


def test_a_prv_run_shown_by_rdp_says_why_and_that_its_guard_held_the_budget() -> None:
    """A PRV run one of whose populations has no PRV ε: the headline is RDP's over both, says why,
    and an RDP figure above the budget the guard held by PRV is not worded as within it."""
    said, good = privacy_words(_facts(prv_missing=[["site0", "train"], ["site1", "train"]]))
    assert said.startswith("every site within budget by its guard's PRV ε per population: max ε 8.3 of 8"), (
        said
    )
    assert "at site1, validation patients, RDP over its training and validation patients" in said, said
    assert "the run's accountant is PRV, but site0's training patients and 1 more have no PRV ε" in said, said
    assert good


def test_a_refused_rounds_epsilon_names_whose_and_which_accountant() -> None:
    signed = {"epsilon_after": 8.31, "population": "validation", "accountant": "prv"}
    assert _refused_epsilon(signed, "prv") == "8.31 (validation patients, PRV)"
    # written before the site signed its accountant: what its guard used, said as such
    unsigned = {"epsilon_after": 8.31, "population": "train"}
    assert _refused_epsilon(unsigned, "rdp") == "8.31 (training patients, RDP)"
    assert _refused_epsilon(unsigned, "prv") == "8.31 (training patients, PRV, or RDP where it had none)"
