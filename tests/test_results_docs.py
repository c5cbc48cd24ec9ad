"""The results a researcher reads first stay short and current: README's results section fits one
screen and renders its table from JSON; docs/RESULTS.md is a reference of what holds today (at most
1,000 lines, no issue numbers: the history is in docs/experiments/ and git). Reads files only."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

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


# What makes a DP recipe (docs/RESULTS.md, Hospital scale): the sampling, the clipping bound, the step
# size and the averaging of the iterates; a run at other values of any of them is another recipe's.
RECIPE = (
    ("dp", "sample_rate"),
    ("dp", "max_grad_norm"),
    ("train", "lr"),
    ("train", "average"),
    ("train", "ema_decay"),
)
SWEEP = re.compile(r"secure-fed-lab sweep (?P<args>[^&`]+)")
FIGURE = re.compile(r"<!-- figure: results/(?P<name>[\w.-]+\.json)#row=(?P<row>.+?),col=(?P<col>[^>]+?) -->")
TABLE = re.compile(r"<!-- table: results/(?P<name>[\w.-]+\.json)(?: bare)? -->")
CELL = re.compile(r"^(?P<method>[\w-]+) ε=(?P<eps>∞|[\d.]+)$")
# the section's one row from another recipe must be named as such, with this phrase
REFERENCE_NOT_RUN = "has not run at this recipe"
Recipe = tuple[Any, ...]
Group = tuple[str, str, float | None]  # (kept record, method, ε)


def recipe_of(config: dict[str, Any]) -> Recipe:
    return tuple(config.get(section, {}).get(key) for section, key in RECIPE)


def sweep_recipe(args: str) -> Recipe:
    """The recipe a `secure-fed-lab sweep` runs today: its --config with its --set overrides."""
    words = shlex.split(args)
    config = tomllib.loads((ROOT / words[words.index("--config") + 1]).read_text(encoding="utf-8"))
    for index, word in enumerate(words[:-1]):
        if word == "--set":
            key, _, value = words[index + 1].partition("=")
            section, _, leaf = key.partition(".")
            config.setdefault(section, {})[leaf] = tomllib.loads(f"v = {value}")["v"]
    return recipe_of(config)


def kept_cells() -> tuple[dict[Group, dict[int, float]], dict[str, Recipe]]:
    """Every kept record's CIDEr per seed, by (record, method, ε), and each record's recipe: where
    a figure's cells really come from (a JSON's source names the commands of its day's configs)."""
    groups: dict[Group, dict[int, float]] = {}
    recipes = {}
    for path in sorted((ROOT / "docs" / "results" / "sweeps").glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        recipes[path.name] = recipe_of(record["config"])
        for run in record["runs"]:
            if run["test"].get("CIDEr") is not None:
                key = (path.name, run["method"], run["epsilon"])
                groups.setdefault(key, {})[run["seed"]] = run["test"]["CIDEr"]
    return groups, recipes


def _mean(values: list[float]) -> str:
    return f"{sum(values) / len(values):.3f}"


def figure_groups(label: str, shown: str, groups: dict[Group, dict[int, float]]) -> list[set[Group]]:
    """The kept cells a row's CIDEr can be the mean of (a score "m [lo, hi]" of `method ε=X`: one
    group; a paired "Δ [lo, hi]": two groups at the same ε, paired by seed), every candidate."""
    mean = shown.split(" ")[0].lstrip("+")
    cell = CELL.match(label)
    if cell:
        eps = None if cell["eps"] == "∞" else float(cell["eps"])
        return [
            {g}
            for g, seeds in groups.items()
            if g[1:] == (cell["method"], eps) and _mean([*seeds.values()]) == mean
        ]
    found = []
    for a, first in groups.items():
        for b, second in groups.items():
            seeds = sorted(set(first) & set(second))
            if a != b and a[2] == b[2] and len(seeds) >= 2:
                if _mean([first[k] - second[k] for k in seeds]).lstrip("+") == mean:
                    found.append({a, b})
    return found


def test_every_readme_result_traces_to_one_recipe():
    """README's results are one recipe's, the one its commands run today: each table row and figure
    of the section is traced to the kept cells (docs/results/sweeps/) it is the mean of, and every
    one of them ran the configs' recipe, but for a row the section says has not run at it; and no
    plot of another recipe's grid stands in the section."""
    section = "\n".join(readme_results_section((ROOT / "README.md").read_text(encoding="utf-8")))
    configs = ("hospital-scale.toml", "hospital-scale-distributed.toml")
    today = {sweep_recipe(f"--config configs/{name}") for name in configs}
    assert len(today) == 1, today  # site mode's and distributed DP's configs share the recipe
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "make -j2 results-hospital" in section
    for target in ("results-hospital-site", "results-hospital-distributed"):
        lines = re.search(rf"^{target}:.*\n((?:\t.+\n?)+)", makefile, flags=re.M)
        assert lines, target
        ran = {
            sweep_recipe(m["args"])
            for line in lines[1].splitlines()
            for m in SWEEP.finditer(line.replace("$(SWEEP)", "secure-fed-lab sweep"))
        }
        assert ran == today, target
    # the sweeps' command is the lab's: an old `secure-fed sweep` line would go unchecked (and fails)
    assert "secure-fed sweep " not in section
    for given in SWEEP.finditer(section):  # a command the section gives beside make's
        assert {sweep_recipe(given["args"])} == today, given[0]
    groups, recipes = kept_cells()
    shown: list[tuple[str, str, str]] = []  # (JSON, row, CIDEr as shown) of every row a figure rests on
    for found in [*TABLE.finditer(section), *FIGURE.finditer(section)]:
        data = json.loads((ROOT / "docs" / "results" / found["name"]).read_text(encoding="utf-8"))
        scores = next((i for i, c in enumerate(data["columns"]) if re.match(r"(Δ )?CIDEr \[", c)), None)
        if scores is None:  # no scores: the time of the section's command, at the configs' recipe
            assert "`make -j2 results-hospital`" in data["title"], found[0]
            assert "the configs' recipe" in data["title"], found[0]
            continue
        rows = data["rows"]
        if "row" in found.groupdict():  # a figure: its row (by label, or by index as doc_tables reads it)
            labels = [r[0] for r in rows]
            row = rows[labels.index(found["row"])] if found["row"] in labels else rows[int(found["row"])]
            # a share of central's gain rests on the reference rows as well
            share = "share" in found["col"]
            rows = [row, *(r for r in rows if share and r[0] in ("base ε=∞", "central ε=∞"))]
        shown += [(found["name"], row[0], row[scores]) for row in rows]
    assert shown, "no figure from JSON"
    other = []
    for name, label, value in shown:
        traced = figure_groups(label, value, groups)
        assert traced, f"{name}: {label} ({value}) is the mean of no kept cells"
        if label.startswith("base "):
            continue  # the pretrained base: no training, no recipe
        if not any({recipes[record] for record, *_ in cells} == today for cells in traced):
            other.append(label)
    for label in sorted(set(other)):
        assert f"`{label}` row" in section and REFERENCE_NOT_RUN in section, (
            f"README's {label} comes from another recipe's cells, and the section does not say so"
        )
    assert "![" not in section, "a plot in README's results: the section's figures are one recipe's"
