"""The report's headline ε names its accountant (the run's) and the mechanism table explains itself."""

from __future__ import annotations

import dataclasses
from html import escape as html_escape
from pathlib import Path

from secure_fed.audits.keys import load_public_keys
from secure_fed.verifier.report import MECHANISM_WORDS, write_report
from secure_fed.verifier.report_data import _as_reported, _run_accountant, collect
from secure_fed.verifier.verdict import population_words
from secure_fed.verifier.verify import verify_logs

from .conftest import SITES, Run


def test_headline_is_the_runs_accountant_and_the_max_over_groups(pristine: Run, tmp_path: Path) -> None:
    verification = verify_logs(pristine.all_paths, load_public_keys(pristine.keys_dir))
    data = collect(pristine.all_paths, verification)
    assert data.accountant == "rdp"  # the run_config names none: the budget guard's default
    for g in data.guarantees:
        last = {row.population: row for row in data.mechanisms if row.site == g.site}
        assert g.accountant == "RDP" and g.epsilon == max(row.epsilon_rdp for row in last.values())
    html, _, _ = write_report(pristine.all_paths, tmp_path / "r.html", load_public_keys(pristine.keys_dir))
    text = html.read_text()
    from .test_report_truth import site_table

    table = {row["site"]: row for row in site_table(text)}
    for g in data.guarantees:
        assert set(table) == set(SITES) and table[g.site]["accountant"] == "RDP"
        assert table[g.site]["ε this run"] == f"{g.epsilon:.3g} ({population_words(g.population)})"
    for mechanism in {row.mechanism for row in data.mechanisms}:
        assert html_escape(MECHANISM_WORDS[mechanism]) in text  # each mechanism in words
    assert "<th>patient group</th><th>group size</th>" in text


def test_prv_runs_report_prv_where_logged_and_rdp_elsewhere(pristine: Run) -> None:
    assert _run_accountant([{"dp": {"accountant": "rdp"}}, {"dp": {"accountant": "prv"}}]) == "prv"
    assert _run_accountant([{"dp": {"enabled": True}}]) == "rdp"
    row = collect(pristine.all_paths, None).mechanisms[0]
    with_prv = dataclasses.replace(row, epsilon_rdp=2.0, epsilon_prv=1.5, budget=1.8)
    assert _as_reported(with_prv, "prv").epsilon_reported == 1.5
    assert _as_reported(with_prv, "prv").within_budget is True
    assert _as_reported(with_prv, "rdp").epsilon_reported == 2.0
    assert _as_reported(with_prv, "rdp").within_budget is False  # the guard's own accountant decides
    no_prv = dataclasses.replace(with_prv, epsilon_prv=None)
    assert _as_reported(no_prv, "prv").epsilon_reported == 2.0
