"""`audit report`: one self-contained HTML page for a compliance officer, plus JSON and CSV.

Self-contained means no network fetch of any kind: inline CSS, the plot as inline SVG (a bare
matplotlib Figure, no pyplot or GUI backend, glyphs as paths), no scripts. The JSON holds every
figure on the page; the CSV is the summary's site table (one row per site), the -mechanisms.csv
the mechanism table.

The page leads with the verdict (verdict.py, the words `audit verify` prints), then a summary that
stays as long at 30 sites as at 3: the run's norm said once, one table row per site, and prose only
for the sites that differ from it. Where the logs did not verify, every finding is marked so.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from rich.console import Console

from secure_fed.audits.keys import keys_for_cli
from secure_fed.verifier.report_course import verification_html
from secure_fed.verifier.report_data import collect, run_facts
from secure_fed.verifier.report_markup import esc, h2
from secure_fed.verifier.report_mechanisms import MECHANISM_WORDS as MECHANISM_WORDS
from secure_fed.verifier.report_mechanisms import mechanism_words as mechanism_words
from secure_fed.verifier.report_mechanisms import mechanisms_html
from secure_fed.verifier.report_plot import plot_caption, plot_svg
from secure_fed.verifier.report_plot import presentational as presentational
from secure_fed.verifier.report_plot import protected as protected
from secure_fed.verifier.report_sections import _refused_epsilon as _refused_epsilon
from secure_fed.verifier.report_sections import _survivors_html as _survivors_html
from secure_fed.verifier.report_sections import code_html, empirical_html, events_html
from secure_fed.verifier.report_sections import survivor_rounds as survivor_rounds
from secure_fed.verifier.report_sites import SiteRow, site_rows
from secure_fed.verifier.report_summary import summary
from secure_fed.verifier.report_types import MechanismRow, ReportData, finite_json
from secure_fed.verifier.verdict import tone, verdict, verdict_markup
from secure_fed.verifier.verify import verify_logs

# the sections tests import from here, as before the split
_events_html, _empirical_html = events_html, empirical_html

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 1100px;
       color: #1d2430; line-height: 1.5; padding: 0 1rem; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { font-size: 1.2rem; margin-top: 2rem; }
.muted { color: #5b6575; font-size: .9rem; }
.verdict { padding: .8rem 1rem; border-radius: 6px; font-weight: 600; }
.ok { background: #e3f5e8; border: 1px solid #58a86b; }
.warn { background: #fff4d6; border: 1px solid #c99a2e; }
.unv { color: #a32020; }
caption { text-align: left; font-weight: 600; padding: .4rem 0; }
.bad { background: #fbe5e5; border: 1px solid #c84a4a; }
.summary { background: #f3f6fa; border-left: 4px solid #3b6fb6; padding: .8rem 1.2rem; }
table { border-collapse: collapse; font-size: .85rem; width: 100%; }
th, td { border: 1px solid #d5dae2; padding: .3rem .5rem; text-align: left; }
th { background: #eef1f5; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
#sites td.num { white-space: nowrap; }
.plot svg { max-width: 100%; height: auto; }
#mechanisms { font-size: .78rem; } #mechanisms th, #mechanisms td { padding: .25rem .3rem; }
"""


def render_html(data: ReportData) -> str:
    generated = datetime.now(UTC).isoformat(timespec="seconds")
    said = verdict(data.verification, run_facts(data))
    rows = site_rows(data, said.verified)
    # Only this stylesheet may style the page: markup that got in through a log could not add any.
    style = "'sha256-" + base64.b64encode(hashlib.sha256(_CSS.encode("utf-8")).digest()).decode() + "'"
    shade = tone(said)
    title = said.line if said.privacy else f"{said.word} — privacy compliance report"
    notes = ""
    unsupplied = data.verification.get("unsupplied") or []
    if unsupplied:
        notes = (
            f"<p class='muted' id='verdict-notes'>The logs of {esc(', '.join(unsupplied))} "
            "were not supplied: their records were checked only as copied into the logs that were.</p>"
        )
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src {style}; "
        'img-src data:">'
        f"<title>{esc(said.word)} — privacy compliance report — {esc(', '.join(data.run_ids))}</title>"
        f"<style>{_CSS}</style></head><body>"
        f"<h1 id='title'>{esc(title)}</h1>"
        f"<p class='verdict {shade}' id='verdict'><b>{esc(said.word)}</b>: {esc(said.why)}.</p>{notes}"
        f"<p class='muted'>Generated {generated} by secure-fed audit report from "
        f"the audit logs of {len(data.parties)} {'party' if len(data.parties) == 1 else 'parties'} "
        "(listed under Verification).</p>"
        f"{h2('Summary', said)}{summary(data, said, rows)}"
        f"{empirical_html(data, said)}"
        f"{h2('Privacy loss over rounds', said)}<div class='plot' id='plot'>{plot_svg(data)}</div>"
        f"{plot_caption(data)}"
        f"<h2>Verification</h2>{verification_html(data)}"
        f"{h2('Every mechanism that touched patient data', said)}"
        f"{mechanisms_html(data.mechanisms, data.settings)}"
        f"{h2('Dropouts and refusals', said)}{events_html(data)}"
        f"{code_html(data, said)}"
        "</body></html>"
    )


def _csv(names: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(names), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({key: ("" if value is None else value) for key, value in row.items()})
    return buffer.getvalue()


def _site_csv_row(row: SiteRow) -> dict[str, Any]:
    """A table row as flat cells: lists ';'-joined, instruction counts as 'code×n', ∞ as 'inf'."""
    flat: dict[str, Any] = finite_json(asdict(row))
    flat["rounds"] = ";".join(map(str, row.rounds))
    flat["declined_rounds"] = ";".join(map(str, row.declined_rounds))
    flat["released"] = "; ".join(f"{what}: {how}" for what, how in row.released)
    for name in ("refused_instructions", "failed_instructions"):
        flat[name] = ";".join(f"{code}×{n}" for code, n in sorted(getattr(row, name).items()))
    return flat


def mechanisms_csv_path(out_html: Path | str) -> Path:
    """Where the mechanism table goes beside the report: <stem>-mechanisms.csv."""
    out_html = Path(out_html)
    return out_html.with_name(out_html.stem + "-mechanisms.csv")


def write_report(
    paths: Sequence[Path | str],
    out_html: Path | str,
    public_keys: Mapping[str, Ed25519PublicKey] | None = None,
) -> tuple[Path, Path, Path]:
    """Verify the logs, then write out_html and beside it the same figures: .json (everything),
    .csv (the summary's table, one row per site) and -mechanisms.csv (every privacy record)."""
    verification = verify_logs(paths, public_keys)
    data = collect(paths, verification)
    facts = run_facts(data)
    said = verdict(data.verification, facts)
    rows = site_rows(data, said.verified)
    out_html = Path(out_html)
    out_html.parent.mkdir(parents=True, exist_ok=True)
    json_path, csv_path = out_html.with_suffix(".json"), out_html.with_suffix(".csv")
    out_html.write_text(render_html(data), encoding="utf-8")
    content = {
        "verdict": said.to_json(),
        "run": finite_json(facts),
        "site_table": [finite_json(asdict(row)) for row in rows],
    }
    content |= data.to_json()
    json_path.write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    site_names = [item.name for item in fields(SiteRow)]
    csv_path.write_text(_csv(site_names, [_site_csv_row(row) for row in rows]), encoding="utf-8")
    mechanism_names = [item.name for item in fields(MechanismRow)]
    mechanisms_csv_path(out_html).write_text(
        _csv(mechanism_names, [asdict(row) for row in data.mechanisms]), encoding="utf-8"
    )
    return out_html, json_path, csv_path


def report_main(
    paths: Sequence[Path | str], out: Path | str, keys_dir: Path | str | None, console: Console | None = None
) -> int:
    """`secure-fed audit report`: writes the report in every case; prints the verdict the report
    leads with, in `audit verify`'s words, and exits as it does (0 VERIFIED, 3 VERIFIED WITH A
    DROPOUT, 4 INCOMPLETE, 1 FAILED or NOT VERIFIED)."""
    console = console or Console(soft_wrap=True)
    ok, public_keys = keys_for_cli(keys_dir, console, "")
    if not ok:
        return 1
    html_path, json_path, csv_path = write_report(paths, out, public_keys)
    written = json.loads(json_path.read_text(encoding="utf-8"))
    said = verdict(written["verification"], written["run"])
    console.print(
        f"Wrote {html_path}, {json_path}, {csv_path}, {mechanisms_csv_path(html_path)}",
        markup=False,
        highlight=False,
    )
    console.print(verdict_markup(said), highlight=False)
    return said.exit_code
