"""The report reads in a minute at 3 sites or 20: the verdict first, one table row per site, words
said once for the run, and prose only for the sites that differ from the rest.

The runs are the DP + SecAgg+ + CKKS logs of test_report_truth's writer (the real AuditLog API and
the records the parties write), each with one site that declines its last round for its budget and
one that drops out in round 2, so that the exceptions are exercised at both sizes.
"""

from __future__ import annotations

import csv
import html as htmllib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from secure_fed.audits.keys import load_public_keys
from secure_fed.verifier.report import write_report
from secure_fed.verifier.verdict import population_words

from .test_report_truth import Scenario, site_table, write_run

SITE_NAME = re.compile(r"\bsite\d+\b")


def _render(root: Path, sites: int) -> tuple[str, dict[str, Any], list[dict[str, str]]]:
    written = write_run(root, Scenario(dp=True, he=True, sites=sites, drop="site2", decline="site1"))
    page, json_path, csv_path = write_report(
        written.paths, root / "report.html", load_public_keys(written.keys)
    )
    rows = list(csv.DictReader(csv_path.open(encoding="utf-8")))
    return page.read_text(encoding="utf-8"), json.loads(json_path.read_text(encoding="utf-8")), rows


def _text(fragment: str) -> str:
    """Text as shown: a block's end breaks the line, inline markup does not."""
    spaced = re.sub(r"</(?:p|li|ul|caption|h\d|t[dhr])>", " ", fragment)
    return " ".join(htmllib.unescape(re.sub(r"<[^>]+>", "", spaced)).split())


def _prose(page: str) -> str:
    """The summary as a reader reads it, less its table."""
    block = re.search(r'<div class="summary" id="summary">(.*?)</div>', page, re.DOTALL)
    assert block, "no summary"
    return _text(re.sub(r"<table id='sites'>.*?</table>", " ", block.group(1), flags=re.DOTALL))


def _sentences(prose: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=\.)\s+", prose) if s.strip()]


@pytest.fixture(scope="module")
def reports(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[int, tuple[str, dict[str, Any], list[dict[str, str]]]]:
    return {n: _render(tmp_path_factory.mktemp(f"sites{n}"), n) for n in (3, 20)}


@pytest.mark.slow
@pytest.mark.parametrize("sites", [3, 20])
def test_the_verdict_is_the_first_line(reports: dict, sites: int) -> None:
    page, data, _ = reports[sites]
    word = "VERIFIED WITH A DROPOUT"
    assert data["verdict"]["word"] == word and data["verdict"]["exit_code"] == 3
    assert re.search(r"<title>([^<]*)</title>", page).group(1).startswith(f"{word} — ")  # type: ignore[union-attr]
    body = page[page.index("<body>") :]
    lines = [line for line in (_text(part) for part in re.split(r"</(?:h1|p)>", body)) if line]
    # integrity and privacy together: the dropout, and ε against the budget
    assert lines[0].startswith(f"{word} — every site within budget: max ε "), lines[0]
    assert lines[1].startswith(f"{word}: site2 in round 2 left the run, as the server's signed log says")


@pytest.mark.slow
@pytest.mark.parametrize("sites", [3, 20])
def test_one_table_row_per_site_and_the_same_rows_in_json_and_csv(reports: dict, sites: int) -> None:
    page, data, rows = reports[sites]
    table = site_table(page)
    names = [f"site{index}" for index in range(sites)]
    assert [row["site"] for row in table] == names
    assert [row["site"] for row in data["site_table"]] == names == [row["site"] for row in rows]
    for shown, kept, written in zip(table, data["site_table"], rows, strict=True):
        assert f"{kept['epsilon_run']:.3g}" == f"{float(written['epsilon_run']):.3g}"
        whose = population_words(kept["epsilon_population"])
        assert shown["ε this run"] == f"{kept['epsilon_run']:.3g} ({whose})"
        assert written["epsilon_population"] == kept["epsilon_population"]
        assert shown["patients (train / validation)"] == "32-63 / 8-15"
        assert written["patients_train"] == kept["patients_train"] == "32-63"
        assert shown["what left the site: protection"].startswith(
            "model updates: DP-SGD + SecAgg+; α scalars: DP + CKKS"
        )
        assert written["released"] == shown["what left the site: protection"]
    by_site = {row["site"]: row for row in table}
    assert (
        by_site["site1"]["refusals"] == "declined round 3"
        and by_site["site1"]["rounds taken part in"] == "1–2"
    )
    assert by_site["site2"]["rounds taken part in"] == "1–2 (left in 2)"
    assert "test-set scores" not in by_site["site2"]["what left the site: protection"]


@pytest.mark.slow
@pytest.mark.parametrize("sites", [3, 20])
def test_no_per_site_sentence_repeats_and_terms_are_explained_once(reports: dict, sites: int) -> None:
    page, _, _ = reports[sites]
    prose = _prose(page)
    shapes = [SITE_NAME.sub("SITE", sentence) for sentence in _sentences(prose)]
    repeated = {shape for shape in shapes if shapes.count(shape) > 1}
    assert not repeated, repeated
    # only the sites that differ are named in the prose: site1 declined, site2 dropped out
    assert set(SITE_NAME.findall(prose)) == {"site1", "site2"}
    for term in (
        "ε (epsilon) bounds",
        "δ is the small chance",
        "SecAgg+ (secure aggregation)",
        "CKKS: homomorphic",
    ):
        assert prose.count(term) == 1, term
    assert "site1 declined round 3: the round would exceed the site's privacy budget." in prose
    assert "site2 dropped out in round 2" in prose and "site2 released no test-set scores" in prose


@pytest.mark.slow
def test_twenty_sites_read_as_long_as_three_plus_their_rows(reports: dict) -> None:
    three, twenty = _prose(reports[3][0]), _prose(reports[20][0])
    assert len(twenty) <= 1.2 * len(three), (len(three), len(twenty))
    assert len(site_table(reports[20][0])) - len(site_table(reports[3][0])) == 17


# The report's column: its body's max-width (px). A plot wider than it is shrunk, and its text with it.
REPORT_COLUMN_PX = 1100


@pytest.mark.slow
@pytest.mark.parametrize("sites", [6, 20])
def test_the_epsilon_plot_is_never_shrunk_below_its_set_text_size(tmp_path: Path, sites: int) -> None:
    """At 6 sites the panels side by side made a figure 3x the column: its text showed at ~5 px. The
    panels wrap into rows instead, so the figure fits the column and its text is drawn as set."""
    from secure_fed.verifier.report import plot_svg
    from secure_fed.verifier.report_data import collect

    written = write_run(tmp_path, Scenario(dp=True, sites=sites))
    svg = plot_svg(collect(written.paths, None))
    size = re.search(r'<svg[^>]*\bwidth="([\d.]+)pt"[^>]*\bheight="([\d.]+)pt"', svg)
    assert size, svg[:300]
    width_px, height_px = (float(value) * 96 / 72 for value in size.groups())
    assert width_px <= REPORT_COLUMN_PX, width_px
    assert height_px >= (sites // 2) * 3 * 96  # a row of panels for every two sites, each still tall
