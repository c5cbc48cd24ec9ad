"""The compliance report shows, per distributed-DP round, the signed survivor set against h."""

from __future__ import annotations

from secure_fed.verifier.report import _survivors_html, survivor_rounds


def _set(round_: int, site: str, survivors: list[str], h: int = 3) -> dict:
    return {"round": round_, "site": site, "survivors": survivors, "honest_min": h}


ALL = ["site0", "site1", "site2"]


def test_each_round_counts_its_survivors_against_h_and_says_whether_it_holds() -> None:
    sets = [_set(1, s, ALL) for s in ALL] + [_set(2, "site0", ALL), _set(2, "site1", ["site0", "site1"])]
    one, two = survivor_rounds(sets)
    assert one == {
        "round": 1,
        "survivors": 3,
        "honest_min": 3,
        "confirmed_by": ALL,
        "one_set": True,
        "holds": True,
    }
    assert two["one_set"] is False and two["holds"] is False
    page = _survivors_html(sets)
    assert "<td>1</td><td>3</td><td>3</td><td>site0, site1, site2</td><td>yes</td>" in page
    assert "<td>2</td>" in page and "<td>NO</td>" in page


def test_a_set_below_h_does_not_hold() -> None:
    [row] = survivor_rounds(
        [_set(1, "site0", ["site0", "site1"], h=3), _set(1, "site1", ["site0", "site1"], h=3)]
    )
    assert row["one_set"] and not row["holds"]
