"""The report's plot: ε over rounds, one panel per protected site, as inline SVG that the page's
Content-Security-Policy lets the browser colour (a bare matplotlib Figure, no pyplot)."""

from __future__ import annotations

import html
import io
import math
import re

import matplotlib
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from secure_fed.verifier.report_epsilon import epsilon_series
from secure_fed.verifier.report_types import Guarantee, ReportData
from secure_fed.verifier.verdict import population_words


def protected(data: ReportData) -> list[Guarantee]:
    """The guarantees that hold: of sites whose every release of training data a privacy record
    covers. Any other site's ε would understate what it released, so it is never shown as a bound."""
    covered = {site.site for site in data.sites if site.dp}
    return [g for g in data.guarantees if g.site in covered]


PLOT_COLUMNS = 2  # panels in a row of the ε plot


def plot_svg(data: ReportData) -> str:
    """ε over rounds, one panel per protected site, each population a line, the site's budget dotted."""
    series = epsilon_series(data.mechanisms)
    guarantees = protected(data)
    if not guarantees:
        return "<p>No site's releases are covered by differential privacy: there is no ε to plot.</p>"
    # At most two panels a row: side by side, six sites made a figure three times the report's
    # column, shrunk to fit with its text (~5 px); two 5.2-inch panels fit the column unshrunk.
    columns = min(len(guarantees), PLOT_COLUMNS)
    rows = math.ceil(len(guarantees) / columns)
    figure = Figure(figsize=(5.2 * columns, 3.6 * rows))
    grid = figure.subplots(rows, columns, squeeze=False).flatten()
    for spare in grid[len(guarantees) :]:
        figure.delaxes(spare)
    for axis, guarantee in zip(grid, guarantees, strict=False):
        ledger = guarantee.lifetime_start is not None
        last = 0
        for (site, population), points in sorted(series.items()):
            if site == guarantee.site:
                style = "-o" if population == "train" else "--s"
                label = f"{'this run: ' if ledger else ''}{population_words(population)}"
                axis.plot([p[0] for p in points], [p[1] for p in points], style, label=label)
                last = max(last, points[-1][0])
        budget = guarantee.budget
        if ledger:
            # The budget is spent across runs: the patients' ε starts where earlier runs left it.
            xs, ys = [0], [guarantee.lifetime_start or 0.0]
            if guarantee.lifetime is not None:
                xs, ys = [*xs, last], [*ys, guarantee.lifetime]
                budget = guarantee.lifetime_budget
            axis.plot(xs, ys, "-D", color="#222222", label="all runs on this data (ledger)")
        if budget is not None:
            label = f"budget ε = {budget:g}" + (" (all runs)" if ledger else "")
            axis.axhline(budget, color="#c84a4a", linestyle=":", label=label)
        axis.set_ylim(bottom=0)
        axis.set_title(f"{guarantee.site}: ε per patient (δ = {guarantee.delta:g})", fontsize=10)
        axis.set_xlabel("round (0 = before training)")
        axis.set_ylabel(f"cumulative ε ({guarantee.accountant})")
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    figure.tight_layout()
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": "secure-fed"}):
        figure.savefig(buffer, format="svg")
    svg = buffer.getvalue()
    # Drop the XML prolog and DOCTYPE (which names an external DTD) so the SVG can sit inline.
    return presentational(svg[svg.index("<svg") :])


_SVG_STYLE = re.compile(r'<style type="text/css">\*\{([^}<]*)\}</style>')
_STYLE_ATTR = re.compile(r'\sstyle="([^"]*)"')


def presentational(svg: str) -> str:
    """The SVG with its CSS as presentation attributes: the page's CSP allows no inline style but
    its own stylesheet (by hash), so a `style` attribute or matplotlib's `*{…}` block would be
    dropped by the browser, and the plot drawn without its colours."""

    def attributes(css: str) -> str:
        pairs = (item.split(":", 1) for item in css.split(";") if ":" in item)
        return "".join(f' {name.strip()}="{html.escape(value.strip())}"' for name, value in pairs)

    defaults = _SVG_STYLE.search(svg)
    svg = _SVG_STYLE.sub("", svg)
    svg = _STYLE_ATTR.sub(lambda match: attributes(match.group(1)), svg)
    if defaults is not None:  # `*{…}` applied to every element: inherited from the root instead
        svg = svg.replace("<svg ", "<svg" + attributes(defaults.group(1)) + " ", 1)
    return svg


def plot_caption(data: ReportData) -> str:
    if not protected(data):
        return ""
    return (
        "<p class='muted'>Each point is the cumulative ε after that round; the dotted red line is the "
        "site's budget. Train and validation patients are different people, so a patient's loss is that "
        "of their own group. Sites without differential privacy have no panel: their ε is unbounded.</p>"
    )
