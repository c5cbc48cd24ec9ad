"""FedTAR's α path over a run's rounds and the flag for a run whose α left the write-up's §4.1
bounds [0.1, 0.9]: the console's lines after `secure-fed run` and the audit report's section."""

from __future__ import annotations

from secure_fed.verifier.alpha_path import WRITE_UP_BOUNDS, alpha_path, outside, report_html, summary_lines
from secure_fed.verifier.report import _events_html
from secure_fed.verifier.report_data import ReportData

INSIDE = [
    {"round": 2, "alpha": [0.3, 0.2, 0.2, 0.2, 0.1]},
    {"round": 1, "alpha": [0.2, 0.2, 0.2, 0.2, 0.2]},
    {"round": 3, "alpha": None},  # a round whose α sum was skipped records none
]
# the old default's demo, measured from outside: α = [0.06, 0.01, 0.87, 0.04, 0.02] at the end
COLLAPSED = [
    {"round": 1, "alpha": [0.2, 0.2, 0.2, 0.2, 0.2]},
    {"round": 2, "alpha": [0.05, 0.02, 0.887, 0.03, 0.013]},
    {"round": 3, "alpha": [0.02, 0.01, 0.922, 0.03, 0.018]},
]


def test_the_path_is_in_round_order_and_a_rerecorded_round_keeps_its_last_alpha() -> None:
    path = alpha_path([*INSIDE, {"round": 1, "alpha": [0.1, 0.3, 0.2, 0.2, 0.2]}])
    assert [r for r, _ in path] == [1, 2]
    assert path[0][1] == [0.1, 0.3, 0.2, 0.2, 0.2]
    # a malformed audit payload (a bare number, text, no round) shows no path rather than failing the report
    odd = [{"round": 5, "alpha": 1.0}, {"round": 6, "alpha": ["x"]}, {"round": None, "alpha": [0.5, 0.5]}]
    assert alpha_path(odd) == []


def test_a_weight_on_its_floor_is_inside_and_one_below_it_is_flagged() -> None:
    assert WRITE_UP_BOUNDS == (0.1, 0.9)
    assert outside([(1, [0.1 - 1e-12, 0.9 + 1e-12])]) == []
    assert outside([(4, [0.0999, 0.5]), (5, [0.3, 0.9001])]) == [(4, 1, 0.0999), (5, 2, 0.9001)]


def test_the_console_says_the_path_stayed_inside_or_flags_the_rounds_it_left() -> None:
    lines = summary_lines(alpha_path(INSIDE))
    assert lines[0].startswith("α over 2 rounds: α1 0.200–0.300, α2 0.200–0.200")
    assert lines[0].endswith("last [0.300, 0.200, 0.200, 0.200, 0.100]")
    assert lines[1] == "α stayed within the write-up's bounds [0.1, 0.9] in every round"
    flagged = summary_lines(alpha_path(COLLAPSED))
    assert flagged[1].startswith("α LEFT the write-up's bounds [0.1, 0.9] in 2 of 3 rounds")
    assert "first: round 2, α1 = 0.050" in flagged[1]
    assert summary_lines([]) == []  # a baseline's run has no α


def test_the_report_shows_alpha_by_round_and_marks_the_weights_outside() -> None:
    inside = report_html(alpha_path(INSIDE))
    assert "stayed within the write-up's bounds [0.1, 0.9] in every round" in inside
    assert inside.count("<tr><td>") == 2 and 'class="bad"' not in inside
    collapsed = report_html(alpha_path(COLLAPSED))
    assert "α left the write-up's bounds [0.1, 0.9]</strong> in 2 of 3 rounds" in collapsed
    # round 2: all but α3 = 0.887; round 3: all five (α3 = 0.922 > 0.9); round 1: none
    assert collapsed.count('class="bad"') == 9
    assert report_html([]) == ""


def test_the_reports_events_section_carries_the_logged_alpha_path() -> None:
    data = ReportData()
    data.alpha = COLLAPSED[-1]
    data.alpha_events = list(COLLAPSED)
    rendered = _events_html(data)
    assert "<h3>α over the rounds</h3>" in rendered and "in 2 of 3 rounds" in rendered
