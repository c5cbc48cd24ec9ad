"""The results a researcher reads first stay short and current: README's results section fits one
screen and renders its table from JSON; docs/RESULTS.md is a reference of what holds today (at most
1,000 lines, no issue numbers: the history is in docs/experiments/ and git). Reads files only."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ISSUE = re.compile(r"\bissues?\s*#?\s*\d+", re.IGNORECASE)


def readme_results_section(text: str) -> list[str]:
    """README's "## Results at a glance" up to the next "## " heading, trailing blank lines dropped."""
    lines = text.splitlines()
    start = lines.index("## Results at a glance")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    section = lines[start:end]
    while section and not section[-1].strip():
        section.pop()
    return section


def test_readme_results_section_is_one_screen_with_its_table_from_json():
    section = readme_results_section((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(section) <= 25, f"README's results section is {len(section)} lines; at most 25"
    joined = "\n".join(section)
    assert re.search(r"<!-- table: results/[^ ]+\.json( bare)? -->", joined), "no table rendered from JSON"
    assert "](docs/RESULTS.md#" in joined  # the reader is sent on to the reference


def test_results_md_is_a_short_reference_without_issue_numbers():
    text = (ROOT / "docs" / "RESULTS.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 1000, (
        f"docs/RESULTS.md has {len(text.splitlines())} lines; at most 1,000"
    )
    found = [m[0] for m in ISSUE.finditer(text)]
    assert not found, f"docs/RESULTS.md names issues (history belongs in docs/experiments/): {found}"


def test_the_checks_catch_what_they_guard():
    assert ISSUE.search("## Hospital scale (issue 30)") and ISSUE.search("see Issue #31")
    assert not ISSUE.search("the issue of noise") and not ISSUE.search("tissue 3")
    long = "## Results at a glance\n" + "line\n" * 30 + "\n## Quick start\n"
    assert len(readme_results_section(long)) == 31


def test_every_experiment_is_linked_from_results_or_benchmarks():
    """A study in docs/experiments/ is found from the reference it explains."""
    experiments = sorted((ROOT / "docs" / "experiments").glob("*.md"))
    assert len(experiments) >= 10
    docs = "".join(
        (ROOT / "docs" / name).read_text(encoding="utf-8") for name in ("RESULTS.md", "BENCHMARKS.md")
    )
    for path in experiments:
        assert f"](experiments/{path.name})" in docs, (
            f"neither RESULTS.md nor BENCHMARKS.md links {path.name}"
        )


def test_the_results_index_names_every_json_and_only_json_that_exists():
    """docs/results/README.md groups the JSON by benchmark: a file added without an entry, or an
    entry whose file moved or went, fails here."""
    results = ROOT / "docs" / "results"
    index = (results / "README.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`([\w.-]+\.json)`", index))
    present = {p.name for p in results.glob("*.json")} | {p.name for p in (results / "sweeps").glob("*.json")}
    assert present - named == set(), f"docs/results/README.md does not list: {sorted(present - named)}"
    assert named - present == set(), f"docs/results/README.md lists missing files: {sorted(named - present)}"
