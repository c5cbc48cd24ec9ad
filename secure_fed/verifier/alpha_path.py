"""FedTAR's α over a run's rounds, and whether it left the write-up's bounds.

The deployment write-up (§4.1) keeps every α_t within [0.1, 0.9]; `train.alpha_floor` (default 0.1)
holds that by construction, but a run with the floor at 0, an older run, or a changed config may
not. The console (after `secure-fed run`) and the audit report show the path and flag such a run.
Inputs are what a run already records: the per-round rows of metrics.json ("alpha" each round)
and the audit log's "alpha" events.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

WRITE_UP_BOUNDS = (0.1, 0.9)  # the deployment write-up's §4.1 "keep α_t within [0.1, 0.9]"


def alpha_path(per_round: Iterable[dict[str, Any]]) -> list[tuple[int, list[float]]]:
    """(round, α after its ψ step) for every round that recorded an α, in round order; a round
    recorded twice (a resumed run logs the rounds after its checkpoint again) keeps its last α."""
    by_round = {
        int(row["round"]): [float(a) for a in row["alpha"]]
        for row in per_round
        # an audit log is read as found: a payload that is not a list of weights shows no path
        if isinstance(row, dict)
        and isinstance(row.get("alpha"), list)
        and all(isinstance(a, int | float) for a in row["alpha"])
        and isinstance(row.get("round"), int)
    }
    return sorted(by_round.items())


def outside(
    path: Sequence[tuple[int, Sequence[float]]], bounds: tuple[float, float] = WRITE_UP_BOUNDS
) -> list[tuple[int, int, float]]:
    """(round, visit index from 1, α_t) of every weight outside `bounds`; a 1e-9 slack keeps a weight
    that sits on its floor (0.1 up to rounding) inside."""
    low, high = bounds
    return [
        (r, t + 1, a) for r, alpha in path for t, a in enumerate(alpha) if a < low - 1e-9 or a > high + 1e-9
    ]


def _fmt(alpha: Sequence[float]) -> str:
    return "[" + ", ".join(f"{a:.3f}" for a in alpha) + "]"


def summary_lines(path: Sequence[tuple[int, Sequence[float]]]) -> list[str]:
    """The console's lines: the range each α_t took over the run, the last α, and a flag line when
    any weight left the write-up's bounds (empty without an α path, e.g. a baseline)."""
    if not path:
        return []
    t_max = len(path[0][1])
    low, high = WRITE_UP_BOUNDS
    ranges = ", ".join(
        f"α{t + 1} {min(a[t] for _, a in path):.3f}–{max(a[t] for _, a in path):.3f}" for t in range(t_max)
    )
    lines = [f"α over {len(path)} rounds: {ranges}; last {_fmt(path[-1][1])}"]
    off = outside(path)
    if off:
        r, t, a = off[0]
        lines.append(
            f"α LEFT the write-up's bounds [{low:g}, {high:g}] in {len({x[0] for x in off})} of "
            f"{len(path)} rounds (first: round {r}, α{t} = {a:.3f}); see train.alpha_floor"
        )
    else:
        lines.append(f"α stayed within the write-up's bounds [{low:g}, {high:g}] in every round")
    return lines


def report_html(path: Sequence[tuple[int, Sequence[float]]]) -> str:
    """The report's section: a table of α by round and the bounds verdict."""
    if not path:
        return ""
    low, high = WRITE_UP_BOUNDS
    flagged = {(r, t) for r, t, _ in outside(path)}
    t_max = len(path[0][1])
    head = "".join(f"<th>α{t + 1}</th>" for t in range(t_max))

    def cell(r: int, t: int, a: float) -> str:
        mark = ' class="bad" title="outside the bounds"' if (r, t + 1) in flagged else ""
        return f"<td{mark}>{a:.3f}</td>"

    rows = "".join(
        f"<tr><td>{r}</td>{''.join(cell(r, t, a) for t, a in enumerate(alpha))}</tr>" for r, alpha in path
    )
    verdict = (
        f"<p><strong>α left the write-up's bounds [{low:g}, {high:g}]</strong> in "
        f"{len({r for r, _ in flagged})} of {len(path)} rounds.</p>"
        if flagged
        else f"<p>α stayed within the write-up's bounds [{low:g}, {high:g}] in every round.</p>"
    )
    return f"<h3>α over the rounds</h3>{verdict}<table><tr><th>round</th>{head}</tr>{rows}</table>"
