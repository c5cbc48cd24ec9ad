"""The report page's small pieces of markup: every logged value escaped (`esc`), numbers, round
lists, plurals, and the mark of a finding the logs do not prove."""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

from secure_fed.verifier.verdict import Verdict


def num(value: float | None, digits: int = 4) -> str:
    if value is None:
        return "—"
    if isinstance(value, float) and math.isinf(value):
        return "∞"
    return f"{value:.{digits}g}"


def esc(value: Any) -> str:
    return html.escape("—" if value is None else str(value))


def rounds_words(rounds: Sequence[int]) -> str:
    return ("round " if len(rounds) == 1 else "rounds ") + ", ".join(map(str, rounds))


def round_spans(rounds: Sequence[int]) -> str:
    """1, 2, 3, 5 → '1–3, 5': a cell that stays short however many rounds a run has."""
    spans: list[list[int]] = []
    for value in sorted(set(rounds)):
        if spans and value == spans[-1][1] + 1:
            spans[-1][1] = value
        else:
            spans.append([value, value])
    return ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in spans)


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def grouped(by_site: Mapping[str, Any]) -> dict[Any, list[str]]:
    """Sites that share a finding, in first-seen order: one sentence per finding, not per site."""
    groups: dict[Any, list[str]] = {}
    for site, key in by_site.items():
        groups.setdefault(key, []).append(site)
    return groups


def codes_words(counts: Mapping[str, int]) -> str:
    return ", ".join(
        f"{code} ×{n}" if n > 1 else code
        for code, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    )


def unverified_mark(said: Verdict) -> str:
    """The prefix of every finding on a page whose logs did not verify."""
    return "" if said.verified else "<b class='unv'>Unverified:</b> "


def h2(title: str, said: Verdict) -> str:
    return f"<h2>{esc(title)}{'' if said.verified else ' (unverified)'}</h2>"
