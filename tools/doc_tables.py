"""Tables and figures in the docs, rendered from committed JSON so text and data cannot drift.

In README.md, docs/*.md and docs/experiments/*.md a block

    <!-- table: results/NAME.json -->
    ...
    <!-- /table -->

holds the markdown rendered from docs/results/NAME.json (the path is relative to docs/, from any
document), and an inline ``<!-- figure: results/NAME.json#row=LABEL,col=COLUMN -->value<!-- /figure -->``
holds one cell of it. The JSON:

    {"title": str,
     "source": {"command": str, "commit": str, "date": "YYYY-MM-DD", "machine": str, "wall": str | null},
     "columns": [str, ...], "rows": [[cell, ...], ...], "notes": [str, ...]}

Cells are strings or numbers, rendered as given (store "0.123 ± 0.004" as a string).

    python tools/doc_tables.py --check     # exit 1, naming each stale block, when a doc and its JSON differ
    python tools/doc_tables.py --write     # rewrite the stale blocks from their JSON
    python tools/doc_tables.py --from-sweep runs/results --table summary --name NAME \\
        --command "secure-fed-lab sweep ..." --machine "..."   # docs/results/NAME.json from a sweep folder
    # --keep also commits the folder's cells (docs/results/sweeps/), which --from-sweep reads in its place
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

TABLE_RE = re.compile(
    r"(?P<open><!-- table: (?P<path>[^\s#]+\.json)(?P<bare> bare)? -->)\n"
    r"(?P<body>.*?)(?P<close><!-- /table -->)",
    re.DOTALL,
)
FIGURE_RE = re.compile(
    r"(?P<open><!-- figure: (?P<path>[^\s#]+\.json)#row=(?P<row>.+?),col=(?P<col>[^>]+?) -->)"
    r"(?P<body>.*?)(?P<close><!-- /figure -->)",
    re.DOTALL,
)
SOURCE_KEYS = ("command", "commit", "date", "machine", "wall")


class TableError(ValueError):
    """A JSON file or a block that cannot be rendered; the message names the file and the fix."""


@dataclass
class Stale:
    doc: Path
    line: int
    json_path: str
    kind: str  # "table" or "figure"

    def __str__(self) -> str:
        rel = self.doc.relative_to(ROOT) if self.doc.is_relative_to(ROOT) else self.doc
        return f"{rel}:{self.line}: {self.kind} from {self.json_path} differs from its JSON"


def doc_files(root: Path = ROOT) -> list[Path]:
    """The documents whose blocks are rendered: README.md, every docs/*.md and docs/experiments/*.md."""
    docs = [*sorted((root / "docs").glob("*.md")), *sorted((root / "docs" / "experiments").glob("*.md"))]
    return [p for p in [root / "README.md", *docs] if p.is_file()]


def load_table(path: Path) -> dict[str, Any]:
    """The JSON at ``path``, checked for the fields a doc needs (a table without its command is
    a figure nobody can reproduce)."""
    if not path.is_file():
        raise TableError(f"{path}: no such file; write it (python tools/doc_tables.py --from-sweep ...)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise TableError(f"{path}: not valid JSON ({exc}); fix the file") from exc
    if not isinstance(data, dict):
        raise TableError(f"{path}: the top level must be an object with title, source, columns, rows")
    for key, kind in (("title", str), ("source", dict), ("columns", list), ("rows", list)):
        if not isinstance(data.get(key), kind):
            raise TableError(f"{path}: key '{key}' missing or not a {kind.__name__}; add it")
    source = data["source"]
    if not isinstance(source.get("command"), str) or not source["command"].strip():
        raise TableError(f"{path}: source.command missing; give the command that produced these figures")
    for key in SOURCE_KEYS[1:]:
        if key not in source:
            raise TableError(f"{path}: source.{key} missing; add it (wall may be null)")
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(source["date"])):
        raise TableError(f"{path}: source.date must be YYYY-MM-DD")
    width = len(data["columns"])
    for i, row in enumerate(data["rows"]):
        if not isinstance(row, list) or len(row) != width:
            raise TableError(f"{path}: row {i} must be a list of {width} cells, one per column")
        for cell in row:
            if not isinstance(cell, str | int | float) or isinstance(cell, bool):
                raise TableError(f"{path}: row {i} has a cell that is neither a string nor a number")
    notes = data.get("notes", [])
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise TableError(f"{path}: notes must be a list of strings")
    return data


def format_cell(cell: str | int | float) -> str:
    # json.dumps keeps a number as JSON wrote it (1.0 stays 1.0); a pipe would split the cell
    text = cell if isinstance(cell, str) else json.dumps(cell)
    return text.replace("|", "\\|").replace("\n", " ")


def render_source(source: dict[str, Any]) -> str:
    commit = str(source["commit"])[:10]
    wall = source.get("wall")
    parts = [f"`{source['command']}`", f"commit {commit} ({source['date']})", str(source["machine"])]
    if wall:
        parts.append(f"wall time {wall}")
    return "Source: " + "; ".join(parts) + "."


def render_table(data: dict[str, Any], bare: bool = False) -> str:
    """The markdown for one table block (without its markers): caption, table, source, notes."""
    cols = [format_cell(c) for c in data["columns"]]
    lines = ["| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
    lines += ["| " + " | ".join(format_cell(c) for c in row) + " |" for row in data["rows"]]
    if bare:
        return "\n".join(lines) + "\n"
    out = [f"**{data['title']}**", "", *lines, "", render_source(data["source"])]
    notes = data.get("notes") or []
    if notes:
        out.append("")
        out += [f"- {n}" for n in notes]
    return "\n".join(out) + "\n"


def lookup(data: dict[str, Any], row: str, col: str, where: str = "") -> str:
    """One cell: ``row`` is the text of a row's first cell, or of its first two joined by " | "
    (``fedavg | 8`` where the first cell repeats), or its 0-based index; ``col`` a column's name
    (or its 0-based index); both may be %-encoded. A label stays on its row when rows are added
    above it, an index does not."""
    row, col = unquote(row), unquote(col)
    labels = [str(r[0]) for r in data["rows"]]
    pairs = [f"{r[0]} | {r[1]}" if len(r) > 1 else str(r[0]) for r in data["rows"]]
    if labels.count(row) > 1:
        raise TableError(
            f"{where}row '{row}' names {labels.count(row)} rows; name it by its first two cells "
            "('first | second') or give its 0-based index as row="
        )
    if row in labels:
        r = labels.index(row)
    elif pairs.count(row) == 1:
        r = pairs.index(row)
    elif row.isdigit() and int(row) < len(labels):
        r = int(row)
    else:
        raise TableError(f"{where}no row '{row}' (rows: {', '.join(labels)}); fix the figure's row=")
    names = [str(c) for c in data["columns"]]
    if col in names:
        c = names.index(col)
    elif col.isdigit() and int(col) < len(names):
        c = int(col)
    else:
        raise TableError(f"{where}no column '{col}' (columns: {', '.join(names)}); fix the figure's col=")
    cell = data["rows"][r][c]
    return cell if isinstance(cell, str) else json.dumps(cell)


def _json_for(ref: str, docs: Path, cache: dict[Path, dict[str, Any]], where: str) -> dict[str, Any]:
    path = (docs / ref).resolve()
    if path not in cache:
        try:
            cache[path] = load_table(path)
        except TableError as exc:
            raise TableError(f"{where}{exc}") from exc
    return cache[path]


def update_text(text: str, doc: Path, docs: Path = DOCS) -> tuple[str, list[Stale]]:
    """``text`` with every block re-rendered from its JSON, and the blocks that changed."""
    cache: dict[Path, dict[str, Any]] = {}
    stale: list[Stale] = []
    for marker, pattern in (("<!-- table:", TABLE_RE), ("<!-- figure:", FIGURE_RE)):
        # a marker the pattern does not match would be skipped silently, and its figure could drift
        if text.count(marker) != len(pattern.findall(text)):
            raise TableError(
                f"{doc}: a '{marker} ...' block is malformed; write it as in tools/doc_tables.py's docstring"
            )

    def figure(m: re.Match[str]) -> str:
        line = text.count("\n", 0, m.start()) + 1
        value = lookup(
            _json_for(m["path"], docs, cache, f"{doc}:{line}: "), m["row"], m["col"], f"{doc}:{line}: "
        )
        if value != m["body"]:
            stale.append(Stale(doc, line, m["path"], "figure"))
        return f"{m['open']}{value}{m['close']}"

    # figures first, on the text as written (a figure holds no newline, so no line moves)
    with_figures = FIGURE_RE.sub(figure, text)

    def table(m: re.Match[str]) -> str:
        line = with_figures.count("\n", 0, m.start()) + 1
        body = render_table(_json_for(m["path"], docs, cache, f"{doc}:{line}: "), bare=bool(m["bare"]))
        if body != m["body"]:
            stale.append(Stale(doc, line, m["path"], "table"))
        return f"{m['open']}\n{body}{m['close']}"

    new = TABLE_RE.sub(table, with_figures)
    stale.sort(key=lambda s: s.line)
    return new, stale


def references(text: str) -> list[str]:
    """Every JSON path (relative to docs/) a document's blocks name."""
    return [m["path"] for m in TABLE_RE.finditer(text)] + [m["path"] for m in FIGURE_RE.finditer(text)]


def check(files: Sequence[Path], docs: Path = DOCS) -> list[Stale]:
    stale: list[Stale] = []
    for f in files:
        stale += update_text(f.read_text(encoding="utf-8"), f, docs)[1]
    return stale


def write(files: Sequence[Path], docs: Path = DOCS) -> list[Stale]:
    changed: list[Stale] = []
    for f in files:
        text = f.read_text(encoding="utf-8")
        new, stale = update_text(text, f, docs)
        if stale:
            f.write_text(new, encoding="utf-8")
            changed += stale
    return changed


# --- from a sweep folder -------------------------------------------------------------------------

SWEEP_TABLES = (
    "summary",
    "intervals",
    "paired",
    "paired-base",
    "paired-local",
    "cider-per-site",
    "ce-f1-per-site",
    "ce-f1-micro-per-site",
    "cider-per-site-vs-local",
    "ce-f1-per-site-vs-local",
    "privacy-utility",
    "privacy-utility-ce-f1",
    "wall",
    "paired-between",
    "paired-methods",
    "share-kept",
    "share-kept-cider-per-site",
    "share-kept-ce-f1-per-site",
    "share-of-central",
    "share-of-central-cider-per-site",
    "share-of-central-ce-f1-per-site",
    "scores-and-share-of-central",
    "paper",
    "paper-differences",
    "privacy-cost",
)


def _parse_markdown(md: str) -> tuple[list[str], list[list[str]]]:
    lines = [ln.strip() for ln in md.strip().splitlines() if ln.strip().startswith("|")]
    split = [[c.strip() for c in ln.strip("|").split(" | ")] for ln in lines]
    return split[0], split[2:]


def _with_local(results: dict[str, Any], against: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The sweep's cells and, where it has no `local` cells of its own, the ones of the sweep given
    with --against: a distributed-DP sweep's cohort is the site-mode sweep's, and training alone
    releases nothing, so it has no distributed run of its own. Only `local` is borrowed."""
    from secure_fed.lab import cells as lab_cells

    runs = list(results["runs"])
    if against is not None and not any(r["method"] == lab_cells.LOCAL for r in runs):
        runs += [r for r in against["runs"] if r["method"] == lab_cells.LOCAL and r["epsilon"] is None]
    return runs


def sweep_markdown(
    results: dict[str, Any],
    table: str,
    against: dict[str, Any] | None = None,
    names: tuple[str, str] = ("this sweep", "the other"),
    versus: str | None = None,
) -> str:
    """The markdown the sweep itself renders for ``table`` (secure_fed/lab/tables.py, write_outputs),
    from the results.json it wrote: the doc's table is the sweep's, never retyped. ``paired-between``
    sets each cell group against the same (method, ε) of a second sweep's results (``against``)."""
    from secure_fed.lab import cells as lab_cells
    from secure_fed.lab import share_kept as sk
    from secure_fed.lab import statistics as lab_stats
    from secure_fed.lab import tables as lab_tables

    if table == "paired-between":
        if against is None:
            raise TableError("--table paired-between needs --against FOLDER (the second sweep)")
        return lab_tables.paired_table(
            lab_stats.paired_between(results["runs"], against["runs"], names, against_method=versus)
        )
    if table == "paired-methods":
        # --names METHOD,AGAINST: the two methods of this sweep, compared at each ε both ran
        ran = {r["method"] for r in results["runs"]}
        if not set(names) <= ran:
            raise TableError(
                f"--table paired-methods needs --names METHOD,AGAINST, two methods of the sweep "
                f"({', '.join(sorted(ran))}); got {','.join(names)}"
            )
        return lab_tables.paired_table(lab_stats.paired_methods(results["runs"], *names))
    render = {
        "summary": lambda: lab_tables.markdown_table(results["summary"], lab_tables.TABLE_METRICS),
        "intervals": lambda: lab_tables.interval_table(results["runs"]),
        "paired": lambda: lab_tables.paired_table(results["paired"]),
        "paired-base": lambda: lab_tables.paired_table(results["paired_vs_base"]),
        "paired-local": lambda: lab_tables.paired_table(results["paired_vs_local"]),
        "cider-per-site": lambda: lab_tables.per_site_table(results["runs"]),
        "ce-f1-per-site": lambda: lab_tables.per_site_table(results["runs"], "CE-F1"),
        "ce-f1-micro-per-site": lambda: lab_tables.per_site_table(results["runs"], "CE-F1-micro"),
        "cider-per-site-vs-local": lambda: lab_tables.per_site_vs(
            _with_local(results, against), lab_cells.LOCAL
        ),
        "ce-f1-per-site-vs-local": lambda: lab_tables.per_site_vs(
            _with_local(results, against), lab_cells.LOCAL, "CE-F1"
        ),
        "privacy-utility": lambda: lab_tables.privacy_table(results["privacy_utility"]),
        "share-kept": lambda: sk.share_table(results["runs"]),
        "share-kept-cider-per-site": lambda: sk.share_per_site_table(results["runs"]),
        "share-kept-ce-f1-per-site": lambda: sk.share_per_site_table(results["runs"], "CE-F1"),
        # the second reference point: the share of non-private pooled central's gain over base
        "share-of-central": lambda: sk.share_of_central_table(results["runs"]),
        "share-of-central-cider-per-site": lambda: sk.share_of_central_per_site_table(results["runs"]),
        "share-of-central-ce-f1-per-site": lambda: sk.share_of_central_per_site_table(
            results["runs"], "CE-F1"
        ),
        # README's one table: each cell group's scores and its share of central's gain, side by side
        "scores-and-share-of-central": lambda: scores_and_share_table(results["runs"]),
        "wall": lambda: lab_tables.wall_table(results["runs"]),
        # the FedTAR paper's Table 1 layout (--with the distributed-DP sweep for its ε = 8 cells)
        "paper": lambda: lab_tables.paper_table(results["runs"]),
        "paper-differences": lambda: lab_tables.paired_table(
            lab_stats.paper_differences(results["runs"]), lab_stats.PAPER_METRICS
        ),
        # each method's own cost of DP, paired by seed (--with the distributed-DP sweep)
        "privacy-cost": lambda: lab_tables.paired_table(
            lab_stats.privacy_costs(results["runs"]), lab_stats.PAPER_METRICS
        ),
        # from the cells, as the sweep computes it: a folder from before the table has them too
        "privacy-utility-ce-f1": lambda: lab_tables.privacy_table(
            lab_stats.privacy_utility(results["runs"], "CE-F1"), "CE-F1"
        ),
    }
    return render[table]()


def scores_and_share_table(runs: list[dict[str, Any]], metrics: Sequence[str] = ("CIDEr", "CE-F1")) -> str:
    """Markdown: per cell group (``fedavg ε=8``), n, each metric's mean with its 95 % t interval
    (the sweep's ``intervals``) and the share of non-private ``central``'s gain over ``base`` it
    reaches (``share_kept.shares_of_central``): the two tables joined row by row, never retyped.
    ``central`` at ε = ∞ is the reference; a group without a share (``base``, ``local``) shows —."""
    from secure_fed.lab import share_kept as sk
    from secure_fed.lab import statistics as lab_stats
    from secure_fed.lab.cells import CENTRAL, labelled

    shares = {(r["method"], r["epsilon"]): r for r in sk.shares_of_central(runs, metrics)}

    def shown(mean: float, ci: tuple[float, float] | None) -> str:
        return (
            "—"
            if math.isnan(mean)
            else f"{mean:.3f}" + ("" if ci is None else f" [{ci[0]:.3f}, {ci[1]:.3f}]")
        )

    def share(key: tuple[str, float | None], metric: str) -> str:
        if key == (CENTRAL, None):
            return "100 % (reference)"
        return sk._share_cell(*shares[key][metric]) if key in shares else "—"

    head = "| method | n | " + " | ".join(f"{m} [95 % CI]" for m in metrics)
    head += " | " + " | ".join(f"{m} share of central's gain [95 % CI]" for m in metrics) + " |\n"
    head += "|" + " --- |" * (2 + 2 * len(metrics)) + "\n"
    lines = []
    for row in lab_stats.intervals(runs, metrics):
        key = (row["method"], row["epsilon"])
        cells = [shown(*row[m]) for m in metrics] + [share(key, m) for m in metrics]
        lines.append(f"| {labelled(*key)} | {row['n']} | " + " | ".join(cells) + " |")
    return head + "\n".join(lines) + "\n" if lines else ""


def git_head(short: bool = False) -> str:
    """The checkout's commit, for a JSON's source (tools/ and benchmarks/ scripts share it)."""
    try:
        return subprocess.run(
            ["git", "rev-parse", *(["--short"] if short else []), "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def from_sweep(
    folder: Path,
    table: str,
    title: str,
    command: str,
    machine: str,
    only: Sequence[str] = (),
    notes: Sequence[str] = (),
    against: Path | None = None,
    names: tuple[str, str] = ("this sweep", "the other"),
    versus: str | None = None,
    adding: Sequence[Path] = (),
) -> dict[str, Any]:
    """The doc JSON for one of the sweep's tables; ``only`` keeps the rows whose first cell is
    listed, in the sweep's order; ``adding``'s cells join the sweep's where it has none of that
    (method, ε, seed)."""
    path = folder if folder.is_file() else folder / "results.json"  # named in the errors below
    results = _sweep_results(folder)
    if adding:
        results = results | {"runs": _joined_runs(path, results["runs"], adding)}
    other = _sweep_results(against) if against is not None else None
    md = sweep_markdown(results, table, other, names, versus)
    if not md and table.endswith("-vs-local"):
        raise TableError(f"{path}: no `local` cells to compare; pass --against FOLDER, a sweep with them")
    if not md:
        raise TableError(f"{path}: the sweep has no '{table}' table (no such cells in {folder})")
    columns, rows = _parse_markdown(md)
    if only:
        missing = [o for o in only if o not in {r[0] for r in rows}]
        if missing:
            raise TableError(f"{path}: no row {', '.join(missing)} in '{table}'; fix --only")
        rows = [r for r in rows if r[0] in only]
    wall_s = results.get("wall_s_all_cells")
    return {
        "title": title,
        "source": {
            "command": command,
            "commit": git_head(),
            "date": dt.date.today().isoformat(),
            "machine": machine,
            "wall": None if not wall_s else f"{wall_s / 60:.1f} min (all cells in {_sweep_name(folder)})",
        },
        "columns": columns,
        "rows": rows,
        "notes": list(notes),
    }


def _sweep_results(folder: Path) -> dict[str, Any]:
    """A sweep folder's results.json, or the tables' data derived from a kept record of its cells
    (docs/results/sweeps/NAME.json: the same tables once the folder is gone)."""
    if folder.is_file():
        from secure_fed.lab import statistics as lab_stats

        try:
            return lab_stats.results_of(json.loads(folder.read_text(encoding="utf-8"))["runs"])
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise TableError(f"{folder}: not a kept sweep record ({err}); name a sweep folder") from err
    path = folder / "results.json"
    if not path.is_file():
        raise TableError(f"{path}: no such file; run the sweep into {folder} first")
    return json.loads(path.read_text(encoding="utf-8"))


def _joined_runs(path: Path, runs: list[dict[str, Any]], adding: Sequence[Path]) -> list[dict[str, Any]]:
    """The sweep's cells, then each added sweep's cells of a (method, ε, seed) not yet there: one
    table over sweeps that ran parts of a grid on one base model (refused across bases, whose
    scores do not pair)."""
    joined = list(runs)
    have = {(r["method"], r["epsilon"], r["seed"]) for r in joined}
    bases = {r["base_model"] for r in joined if r.get("base_model")}
    for other in adding:
        for run in _sweep_results(other)["runs"]:
            if run.get("base_model") and bases and run["base_model"] not in bases:
                raise TableError(
                    f"{other}: its cells ran on base model {run['base_model']}, {path}'s on "
                    f"{', '.join(sorted(bases))}; --with only joins sweeps of one base"
                )
            key = (run["method"], run["epsilon"], run["seed"])
            if key not in have:
                have.add(key)
                joined.append(run)
    return joined


def _sweep_name(path: Path) -> str:
    """A sweep's name, from its folder or its kept record (FOLDER.json)."""
    return path.stem if path.is_file() else path.name


def keep_sweep(folder: Path, docs: Path = DOCS) -> Path:
    """docs/results/sweeps/FOLDER.json: the sweep's configuration and finished cells, committed so
    its tables can be rendered again, and the sweep extended (`secure-fed-lab sweep --cells-from`),
    after runs/ is gone."""
    from secure_fed.lab import records as lab_records

    if folder.is_file():
        raise TableError(f"{folder}: already a kept record; --keep takes a sweep folder")
    try:
        record = lab_records.kept(folder)
    except ValueError as err:
        raise TableError(str(err)) from err
    out = docs / "results" / "sweeps" / f"{folder.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return out


def _names(given: str, folder: Path, against: Path | None) -> tuple[str, str]:
    parts = [p.strip() for p in given.split(",") if p.strip()]
    if len(parts) == 2:
        return parts[0], parts[1]
    return _sweep_name(folder), (_sweep_name(against) if against is not None else "the other")


def dump_table(data: dict[str, Any]) -> str:
    """The JSON as committed: one row per line, so a changed figure is a one-line diff."""
    head = {k: v for k, v in data.items() if k != "rows"}
    text = json.dumps(head, indent=1, ensure_ascii=False)
    rows = ",\n".join("  " + json.dumps(r, ensure_ascii=False) for r in data["rows"])
    return text[:-2] + ',\n "rows": [\n' + rows + "\n ]\n}\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="exit 1 when a block differs from its JSON")
    mode.add_argument("--write", action="store_true", help="rewrite every stale block from its JSON")
    mode.add_argument(
        "--from-sweep",
        type=Path,
        metavar="FOLDER",
        help="a sweep folder (results.json), or a kept record of one (docs/results/sweeps/NAME.json)",
    )
    p.add_argument(
        "--keep",
        action="store_true",
        help="with --from-sweep FOLDER: also keep its cells as docs/results/sweeps/FOLDER.json",
    )
    p.add_argument("--table", choices=SWEEP_TABLES, help="with --from-sweep: which of the sweep's tables")
    p.add_argument("--name", help="with --from-sweep: writes docs/results/NAME.json")
    p.add_argument("--title", default="", help="with --from-sweep: the table's caption")
    p.add_argument("--command", default="", help="with --from-sweep: the command that ran the sweep")
    p.add_argument("--machine", default="", help="with --from-sweep: the machine it ran on")
    p.add_argument("--only", default="", help="with --from-sweep: comma-separated first cells to keep")
    p.add_argument("--note", action="append", default=[], help="with --from-sweep: a note (repeatable)")
    p.add_argument(
        "--against",
        type=Path,
        help="with --table paired-between: the second sweep's folder; with a per-site-vs-local table: "
        "the sweep whose `local` cells to use where this one has none",
    )
    p.add_argument(
        "--with",
        dest="adding",
        type=Path,
        action="append",
        default=[],
        metavar="FOLDER",
        help="with --from-sweep: another sweep (folder or kept record) on the same base whose cells "
        "join this one's where it has none of that method, ε and seed (repeatable; for the share-kept "
        "tables, whose base and non-private cells may have run in another sweep)",
    )
    p.add_argument(
        "--names",
        default="",
        help="with --table paired-between: the two sweeps' names, 'ours,theirs'; with paired-methods: "
        "the two methods, 'fedtar,fedavg'",
    )
    p.add_argument(
        "--against-method",
        default=None,
        help="with --table paired-between: set every method of this sweep against this method of the "
        "--against sweep at the same ε (e.g. central, the private pooled ceiling)",
    )
    p.add_argument("--docs", type=Path, default=DOCS, help="the folder block paths are relative to")
    p.add_argument(
        "files", nargs="*", type=Path, help="documents (default: README.md, docs/*.md, docs/experiments/*.md)"
    )
    args = p.parse_args(argv)
    try:
        if args.from_sweep is not None:
            for key in ("table", "name", "command", "machine"):
                if not getattr(args, key):
                    print(f"--from-sweep needs --{key}", file=sys.stderr)
                    return 2
            data = from_sweep(
                args.from_sweep,
                args.table,
                args.title or f"{args.table} ({_sweep_name(args.from_sweep)})",
                args.command,
                args.machine,
                [o.strip() for o in args.only.split(",") if o.strip()],
                args.note,
                args.against,
                _names(args.names, args.from_sweep, args.against),
                args.against_method,
                args.adding,
            )
            out = args.docs / "results" / f"{args.name}.json"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(dump_table(data), encoding="utf-8")
            print(f"wrote {out}; then: python tools/doc_tables.py --write")
            if args.keep:
                print(f"kept the sweep's cells in {keep_sweep(args.from_sweep, args.docs)}")
            return 0
        files = args.files or doc_files()
        if args.check:
            stale = check(files, args.docs)
            for s in stale:
                print(s)
            if stale:
                print(f"{len(stale)} stale block(s); fix: python tools/doc_tables.py --write")
                return 1
            return 0
        for s in write(files, args.docs):
            print(f"rewrote {s}")
        return 0
    except TableError as exc:
        print(exc, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
