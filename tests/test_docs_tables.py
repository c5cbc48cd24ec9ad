"""The docs' tables and figures are the committed JSON's (tools/doc_tables.py), and the project
carries no writing-period labels. Each test reads files only and takes well under a second; the
sweep round trip also imports the lab (secure_fed.lab; torch: about 30 s alone on a loaded
2-core machine, already paid by tests/test_sweep.py in a suite run)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("doc_tables", ROOT / "tools" / "doc_tables.py")
assert _spec is not None and _spec.loader is not None
doc_tables = importlib.util.module_from_spec(_spec)
sys.modules["doc_tables"] = doc_tables
_spec.loader.exec_module(doc_tables)

# Built from parts so this file does not match its own pattern.
_WORD = "[Ss]" + "ession"
LABEL = re.compile(rf"\b{_WORD} \d+|\b{_WORD}s? \d+[–-]\d+")
LABEL_PATHS = ("docs", "configs", "secure_fed", "tests", "benchmarks", "examples", "README.md", "Makefile")


def _table_json(
    path: Path, cells: list[list[str | float]], command: str = "secure-fed sweep -o runs/x"
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "title": "A table",
                "source": {
                    "command": command,
                    "commit": "0123456789abcdef",
                    "date": "2026-12-01",
                    "machine": "2-core CPU",
                    "wall": "3 min",
                },
                "columns": ["method", "CIDEr"],
                "rows": cells,
                "notes": ["a note"],
            }
        ),
        encoding="utf-8",
    )


def test_every_block_in_the_docs_matches_its_json():
    stale = doc_tables.check(doc_tables.doc_files())
    assert not stale, "stale blocks (fix: python tools/doc_tables.py --write):\n" + "\n".join(map(str, stale))


def test_every_json_the_docs_name_exists_and_gives_its_command():
    refs = {
        ref for f in doc_tables.doc_files() for ref in doc_tables.references(f.read_text(encoding="utf-8"))
    }
    for ref in refs:
        data = doc_tables.load_table(doc_tables.DOCS / ref)  # raises on a missing file or field
        assert data["source"]["command"].strip(), ref
    # RESULTS.md's tables are all backed by JSON (the other docs adopt blocks as they are rewritten)
    results_md = (doc_tables.DOCS / "RESULTS.md").read_text(encoding="utf-8")
    assert doc_tables.references(results_md), "docs/RESULTS.md has no table block"


def test_results_md_has_no_hand_typed_table():
    """Every markdown table in RESULTS.md is rendered from JSON: a hand-typed one could drift."""
    text = (doc_tables.DOCS / "RESULTS.md").read_text(encoding="utf-8")
    outside = doc_tables.TABLE_RE.sub("", text)
    hand = [ln for ln in outside.splitlines() if re.match(r"\|\s*-{3}", ln.strip())]
    assert not hand, f"hand-typed tables in docs/RESULTS.md: {len(hand)}"


def test_an_edited_cell_is_found_and_rewritten(tmp_path):
    docs = tmp_path / "docs"
    _table_json(docs / "results" / "t.json", [["fedavg", "0.123 ± 0.004"], ["fedtar", 0.5]])
    doc = docs / "X.md"
    doc.write_text(
        "# X\n\n<!-- table: results/t.json -->\n<!-- /table -->\n\n"
        "FedTAR reaches <!-- figure: results/t.json#row=fedtar,col=CIDEr --><!-- /figure --> CIDEr.\n",
        encoding="utf-8",
    )
    assert len(doc_tables.write([doc], docs)) == 2
    assert doc_tables.check([doc], docs) == []
    text = doc.read_text(encoding="utf-8")
    assert "| fedavg | 0.123 ± 0.004 |" in text and "| fedtar | 0.5 |" in text
    assert "--><!-- /figure --> " not in text and "-->0.5<!-- /figure -->" in text
    assert "`secure-fed sweep -o runs/x`" in text and "- a note" in text

    doc.write_text(text.replace("0.123 ± 0.004", "0.125 ± 0.004"), encoding="utf-8")
    stale = doc_tables.check([doc], docs)
    assert [(s.kind, s.json_path, s.line) for s in stale] == [("table", "results/t.json", 3)]
    doc.write_text(text.replace("-->0.5<", "-->0.6<"), encoding="utf-8")
    assert [s.kind for s in doc_tables.check([doc], docs)] == ["figure"]
    doc_tables.write([doc], docs)
    assert doc.read_text(encoding="utf-8") == text


def test_a_figure_names_a_repeated_method_by_its_first_two_cells():
    """A sweep's summary repeats the method once per ε: a figure names its row "method | ε", which
    stays on its row when rows are added above it (an index would move to another)."""
    data = {"columns": ["method", "ε", "CIDEr"], "rows": [["fedavg", "∞", 3.7], ["fedavg", "8", 2.5]]}
    assert doc_tables.lookup(data, "fedavg | 8", "CIDEr") == "2.5"
    grown = {**data, "rows": [["base", "∞", 0.8], *data["rows"]]}
    assert doc_tables.lookup(grown, "fedavg | 8", "CIDEr") == "2.5"
    with pytest.raises(doc_tables.TableError, match="names 2 rows.*first two cells"):
        doc_tables.lookup(data, "fedavg", "CIDEr")
    with pytest.raises(doc_tables.TableError, match="no row 'fedavg | 16'"):
        doc_tables.lookup(data, "fedavg | 16", "CIDEr")


def test_a_real_doc_with_a_changed_figure_fails_the_check(tmp_path):
    results_md = (doc_tables.DOCS / "RESULTS.md").read_text(encoding="utf-8")
    m = doc_tables.TABLE_RE.search(results_md)
    assert m is not None
    rows = [ln for ln in m["body"].splitlines() if ln.startswith("| ") and "---" not in ln]
    first_data = rows[1]
    edited = first_data.replace(" | ", " | 9", 1)
    copy = tmp_path / "RESULTS.md"
    copy.write_text(results_md.replace(first_data, edited, 1), encoding="utf-8")
    assert doc_tables.check([copy]) and not doc_tables.check([doc_tables.DOCS / "RESULTS.md"])


def test_a_bare_block_holds_the_table_alone_and_a_malformed_block_is_refused(tmp_path):
    docs = tmp_path / "docs"
    _table_json(docs / "results" / "t.json", [["fedavg", "0.1"]])
    doc = docs / "X.md"
    doc.write_text("<!-- table: results/t.json bare -->\n<!-- /table -->\n", encoding="utf-8")
    doc_tables.write([doc], docs)
    assert doc.read_text(encoding="utf-8") == (
        "<!-- table: results/t.json bare -->\n"
        "| method | CIDEr |\n| --- | --- |\n| fedavg | 0.1 |\n<!-- /table -->\n"
    )
    # no closing marker: the block would otherwise be skipped and never checked
    doc.write_text("<!-- table: results/t.json -->\n| method | CIDEr |\n", encoding="utf-8")
    with pytest.raises(doc_tables.TableError, match="malformed"):
        doc_tables.check([doc], docs)
    doc.write_text(
        "<!-- figure: results/t.json#row=nobody,col=CIDEr -->x<!-- /figure -->\n", encoding="utf-8"
    )
    with pytest.raises(doc_tables.TableError, match="no row 'nobody'"):
        doc_tables.check([doc], docs)
    _table_json(docs / "results" / "t.json", [["fedavg", "0.1"], ["fedavg", "0.2"]])
    doc.write_text(
        "<!-- figure: results/t.json#row=fedavg,col=CIDEr -->x<!-- /figure -->\n", encoding="utf-8"
    )
    with pytest.raises(doc_tables.TableError, match="names 2 rows"):
        doc_tables.check([doc], docs)
    doc.write_text("<!-- figure: results/t.json#row=1,col=1 -->x<!-- /figure -->\n", encoding="utf-8")
    doc_tables.write([doc], docs)
    assert (
        doc.read_text(encoding="utf-8") == "<!-- figure: results/t.json#row=1,col=1 -->0.2<!-- /figure -->\n"
    )


def test_check_cli_names_the_stale_block_and_the_fix(tmp_path):
    docs = tmp_path / "docs"
    _table_json(docs / "results" / "t.json", [["fedavg", "0.1"]])
    doc = docs / "X.md"
    doc.write_text("<!-- table: results/t.json -->\n| old |\n<!-- /table -->\n", encoding="utf-8")
    run = [sys.executable, str(ROOT / "tools" / "doc_tables.py"), "--docs", str(docs)]
    out = subprocess.run([*run, "--check", str(doc)], capture_output=True, text=True)
    assert out.returncode == 1
    assert "X.md:1: table from results/t.json" in out.stdout
    assert "python tools/doc_tables.py --write" in out.stdout
    assert subprocess.run([*run, "--write", str(doc)], capture_output=True).returncode == 0
    assert subprocess.run([*run, "--check", str(doc)], capture_output=True).returncode == 0


def test_a_json_without_its_command_or_a_missing_json_is_refused(tmp_path):
    docs = tmp_path / "docs"
    _table_json(docs / "results" / "t.json", [["fedavg", "0.1"]], command="")
    doc = docs / "X.md"
    doc.write_text("<!-- table: results/t.json -->\n<!-- /table -->\n", encoding="utf-8")
    with pytest.raises(doc_tables.TableError, match="source.command"):
        doc_tables.check([doc], docs)
    doc.write_text("<!-- table: results/gone.json -->\n<!-- /table -->\n", encoding="utf-8")
    with pytest.raises(doc_tables.TableError, match="gone.json: no such file"):
        doc_tables.check([doc], docs)


def test_from_sweep_renders_the_sweeps_own_table(tmp_path):
    from secure_fed.lab import statistics as lab_stats

    runs = [
        {"method": m, "epsilon": None, "seed": s, "test": {"CIDEr": v + s / 100}, "wall_s": 60.0}
        for m, v in (("base", 0.1), ("fedavg", 0.3), ("fedtar", 0.4))
        for s in range(3)
    ]
    rows = lab_stats.summarise(runs)
    paired = lab_stats.paired_differences(runs, "fedtar")
    results = {"runs": runs, "summary": rows, "paired": paired, "wall_s_all_cells": 540.0}
    (tmp_path / "results.json").write_text(json.dumps(results), encoding="utf-8")
    data = doc_tables.from_sweep(tmp_path, "summary", "T", "make results", "laptop", only=["fedtar"])
    assert data["columns"][:4] == ["method", "ε", "ε spent", "n"]
    assert data["rows"] == [["fedtar", "∞", "—", "3", "0.410 ± 0.010", "—", "—", "—", "—", "—"]]
    assert data["source"]["wall"].startswith("9.0 min")
    table = doc_tables.from_sweep(tmp_path, "paired", "T", "make results", "laptop")
    assert [r[0] for r in table["rows"]] == ["base ε=∞", "fedavg ε=∞"]
    assert table["rows"][1][2].startswith("-0.100 [")


def test_paired_between_sets_one_sweep_against_another_seed_by_seed(tmp_path):
    """Distributed DP against site mode: two sweep folders of one cohort, the same (method, ε)
    paired on the seeds both have (seed 2 ran in one only), its interval from those differences."""
    from secure_fed.lab import cells as lab_cells

    def sweep_folder(name: str, values: dict[int, float]) -> Path:
        cells = values.items()
        runs = [{"method": "fedavg", "epsilon": 8.0, "seed": s, "test": {"CIDEr": v}} for s, v in cells]
        folder = tmp_path / name
        folder.mkdir()
        (folder / "results.json").write_text(json.dumps({"runs": runs}), encoding="utf-8")
        return folder

    ours = sweep_folder("distributed", {0: 3.0, 1: 3.5, 2: 9.0})
    theirs = sweep_folder("site", {0: 2.0, 1: 2.0})
    names = ("d", "s")
    data = doc_tables.from_sweep(ours, "paired-between", "T", "cmd", "laptop", against=theirs, names=names)
    assert data["columns"][:2] == ["d − s, same method and ε", "n"]
    ((label, n, cider, *_),) = data["rows"]
    half = lab_cells.t975(1) * float(np.std([1.0, 1.5], ddof=1)) / np.sqrt(2)
    assert (label, n) == ("fedavg ε=8: d − s", "2")
    assert cider == f"+1.250 [{1.25 - half:+.3f}, {1.25 + half:+.3f}]"
    with pytest.raises(doc_tables.TableError, match="--against"):
        doc_tables.from_sweep(ours, "paired-between", "T", "cmd", "laptop")


def test_per_site_vs_local_takes_local_from_the_sweep_given_against(tmp_path):
    """A distributed-DP sweep has no `local` cells of its own (local training releases nothing, so
    it is the site-mode sweep's, on the same cohort): --against names the folder that holds them;
    a sweep with its own `local` keeps it, and without either there is nothing to render."""

    def sweep_folder(name: str, cells: list[tuple[str, float | None, int, float]]) -> Path:
        runs = [
            {"method": m, "epsilon": e, "seed": s, "test": {"CIDEr": v}, "per_site": {"site4": {"CIDEr": v}}}
            for m, e, s, v in cells
        ]
        folder = tmp_path / name
        folder.mkdir()
        (folder / "results.json").write_text(json.dumps({"runs": runs}), encoding="utf-8")
        return folder

    ours = sweep_folder("distributed", [("fedavg-ft", 8.0, 0, 5.0), ("fedavg-ft", 8.0, 1, 6.0)])
    theirs = sweep_folder(
        "site",
        [("local", None, 0, 4.0), ("local", None, 1, 4.0), ("fedavg", 8.0, 0, 1.0), ("fedavg", 8.0, 1, 1.0)],
    )
    data = doc_tables.from_sweep(ours, "cider-per-site-vs-local", "T", "cmd", "laptop", against=theirs)
    assert data["columns"] == ["method (Δ CIDEr vs local)", "n", "site4"]
    ((label, n, delta),) = data["rows"]  # the other sweep's own methods are not borrowed
    assert (label, n) == ("fedavg-ft ε=8", "2") and delta.startswith("+1.500 [")
    with pytest.raises(doc_tables.TableError, match="no `local` cells .* --against"):
        doc_tables.from_sweep(ours, "cider-per-site-vs-local", "T", "cmd", "laptop")


def test_paired_methods_compares_two_methods_of_one_sweep_at_each_epsilon(tmp_path):
    """FedTAR against FedAvg: at each ε both ran, paired on the seeds both have; an ε only one ran
    has no row, and a method the sweep did not run is refused naming the ones it did."""
    from secure_fed.lab import cells as lab_cells

    cells = [("fedtar", None, 0, 3.0), ("fedtar", None, 1, 3.2), ("fedavg", None, 0, 2.0),
             ("fedavg", None, 1, 2.6), ("fedtar", 8.0, 0, 1.5), ("fedavg", 8.0, 0, 2.5),
             ("fedavg", 4.0, 0, 2.0)]  # fmt: skip
    runs = [{"method": m, "epsilon": e, "seed": s, "test": {"CIDEr": v}} for m, e, s, v in cells]
    (tmp_path / "results.json").write_text(json.dumps({"runs": runs}), encoding="utf-8")
    data = doc_tables.from_sweep(tmp_path, "paired-methods", "T", "cmd", "laptop", names=("fedtar", "fedavg"))
    assert data["columns"][:2] == ["fedtar − fedavg, same ε", "n"]
    assert [r[:2] for r in data["rows"]] == [["fedtar − fedavg, ε=∞", "2"], ["fedtar − fedavg, ε=8", "1"]]
    half = lab_cells.t975(1) * float(np.std([1.0, 0.6], ddof=1)) / np.sqrt(2)
    assert data["rows"][0][2] == f"+0.800 [{0.8 - half:+.3f}, {0.8 + half:+.3f}]"
    assert data["rows"][1][2] == "-1.000"
    with pytest.raises(doc_tables.TableError, match="two methods of the sweep.*fedavg, fedtar"):
        doc_tables.from_sweep(tmp_path, "paired-methods", "T", "cmd", "laptop", names=("fedtar", "drfa"))


def test_no_writing_period_labels_in_the_project():
    files = subprocess.run(
        ["git", "ls-files", "--", *LABEL_PATHS], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    hits = []
    for name in files:
        path = ROOT / name
        if not path.is_file():
            continue
        raw = path.read_bytes()
        if b"\0" in raw:
            continue
        for i, line in enumerate(raw.decode("utf-8", errors="replace").splitlines(), 1):
            if LABEL.search(line):
                hits.append(f"{name}:{i}: {line.strip()[:80]}")
    assert not hits, f"{len(hits)} writing-period label(s); give a date or commit instead:\n" + "\n".join(
        hits[:40]
    )


def test_a_kept_sweep_record_renders_the_same_table_as_its_folder(tmp_path):
    """--keep commits a sweep's cells (docs/results/sweeps/FOLDER.json); --from-sweep on that file
    renders what the folder did, so a table can be remade and extended after runs/ is gone."""
    from secure_fed.config import RunConfig
    from secure_fed.lab import cells as lab_cells
    from secure_fed.lab import records as lab_records
    from secure_fed.lab import statistics as lab_stats

    folder = tmp_path / "results-x"
    runs = [
        {"method": m, "epsilon": e, "seed": s, "test": {"CIDEr": v + s / 10}, "wall_s": 60.0}
        for m, e, v in (("base", None, 1.0), ("central", None, 3.0), ("central", 8.0, 2.0))
        for s in range(3)
    ]
    for cell in runs:
        path = lab_cells.cell_folder(folder, cell["method"], cell["epsilon"], cell["seed"]) / "cell.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(cell), encoding="utf-8")
    (folder / "sweep-config.json").write_text(
        json.dumps(RunConfig().model_dump(mode="json", exclude={"out"}))
    )
    (folder / "results.json").write_text(
        json.dumps(lab_stats.results_of(lab_records.load_cells(folder))), encoding="utf-8"
    )
    docs = tmp_path / "docs"
    argv = ["--from-sweep", str(folder), "--table", "privacy-utility", "--name", "t", "--command", "c"]
    assert doc_tables.main([*argv, "--machine", "m", "--keep", "--docs", str(docs)]) == 0
    kept = docs / "results" / "sweeps" / "results-x.json"
    from_folder = doc_tables.from_sweep(folder, "privacy-utility", "T", "c", "m")
    from_kept = doc_tables.from_sweep(kept, "privacy-utility", "T", "c", "m")
    assert from_kept["rows"] == from_folder["rows"] and from_kept["rows"]
    assert from_kept["source"]["wall"] == from_folder["source"]["wall"] == "9.0 min (all cells in results-x)"
    with pytest.raises(doc_tables.TableError, match="not a kept sweep record"):
        doc_tables.from_sweep(docs / "results" / "t.json", "summary", "T", "c", "m")


def test_paired_between_against_one_method_sets_each_method_against_central(tmp_path):
    """Distributed DP's goal is the private pooled `central` of the site-mode sweep at the same ε:
    --against-method pairs every method of one sweep with that method of the other, seed by seed."""
    from secure_fed.lab import cells as lab_cells

    def sweep_folder(name: str, cells: list[tuple[str, float, int, float]]) -> Path:
        runs = [{"method": m, "epsilon": e, "seed": s, "test": {"CIDEr": v}} for m, e, s, v in cells]
        folder = tmp_path / name
        folder.mkdir()
        (folder / "results.json").write_text(json.dumps({"runs": runs}), encoding="utf-8")
        return folder

    ours = sweep_folder(
        "distributed", [("fedavg", 4.0, 0, 3.0), ("fedavg", 4.0, 1, 3.5), ("fedavg", 8.0, 0, 9.0)]
    )
    theirs = sweep_folder(
        "site", [("central", 4.0, 0, 4.0), ("central", 4.0, 1, 4.0), ("fedavg", 4.0, 0, 1.0)]
    )
    args = [
        "--from-sweep",
        str(ours),
        "--table",
        "paired-between",
        "--against",
        str(theirs),
        "--names",
        "d,s",
    ]
    docs = tmp_path / "docs"
    assert (
        doc_tables.main(
            [
                *args,
                "--against-method",
                "central",
                "--name",
                "t",
                "--command",
                "c",
                "--machine",
                "m",
                "--docs",
                str(docs),
            ]
        )
        == 0
    )
    data = json.loads((docs / "results" / "t.json").read_text())
    assert data["columns"][:2] == ["d − central (s), same ε", "n"]
    ((label, n, cider, *_),) = data["rows"]  # ε = 8 has no central to pair with
    half = lab_cells.t975(1) * float(np.std([-1.0, -0.5], ddof=1)) / np.sqrt(2)
    assert (label, n) == ("fedavg ε=4 (d) − central (s)", "2")
    assert cider == f"-0.750 [{-0.75 - half:+.3f}, {-0.75 + half:+.3f}]"
