"""The share of the non-private gain kept at each ε, with its delta-method interval (issue 30's
privacy–utility table): numbers pinned by hand, pairing by seed, per site, and the doc table that
joins the sweeps which ran parts of one grid."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

from secure_fed.lab import share_kept as sk

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("doc_tables", ROOT / "tools" / "doc_tables.py")
assert _spec is not None and _spec.loader is not None
doc_tables = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("doc_tables", doc_tables)
_spec.loader.exec_module(doc_tables)


def test_the_share_is_the_ratio_of_mean_gains_with_the_delta_method_interval() -> None:
    # by hand: R = 1.8 / 3 = 0.6; residuals g - R G = -0.2, 0.2, 0.0 (sd 0.2);
    # se = 0.2 / (sqrt(3) * 3) = 0.038490; half = t(2) 4.303 * se = 0.165623
    share, (low, high) = sk.ratio_ci([1.0, 2.0, 2.4], [2.0, 3.0, 4.0])
    assert share == pytest.approx(0.6)
    assert (low, high) == pytest.approx((0.6 - 0.165623, 0.6 + 0.165623), abs=1e-6)
    # every seed keeping exactly half: no spread, a zero-width interval
    share, ci = sk.ratio_ci([1.0, 2.0, 3.0], [2.0, 4.0, 6.0])
    assert share == pytest.approx(0.5) and ci == pytest.approx((0.5, 0.5))


def test_no_share_without_a_gain_and_no_interval_from_one_seed() -> None:
    share, ci = sk.ratio_ci([0.5, 0.1], [-1.0, 0.5])  # the non-private cell lost to base on average
    assert math.isnan(share) and ci is None
    assert sk.ratio_ci([1.0], [4.0]) == (0.25, None)
    assert sk.ratio_ci([1.0, math.nan], [4.0, 2.0]) == (0.25, None)  # a missing score drops its pair


def _run(
    method: str, eps: float | None, seed: int, cider: float, site_b: float, spent: float | None = None
) -> dict[str, Any]:
    run: dict[str, Any] = {
        "method": method,
        "epsilon": eps,
        "seed": seed,
        "test": {"CIDEr": cider, "CE-F1": cider / 10},
        "per_site": {"siteA": {"CIDEr": cider}, "siteB": {"CIDEr": site_b}},
    }
    if spent is not None:
        run["privacy"] = {"epsilon": {"siteA": {"rdp": spent}, "siteB": {"rdp": spent - 0.01}}}
    return run


def _grid() -> list[dict[str, Any]]:
    runs = [_run("base", None, s, 1.0, 1.0) for s in (0, 1, 2)]
    runs += [_run("fedavg", None, s, 5.0, 3.0) for s in (0, 1, 2)]
    runs += [_run("fedavg", 8.0, s, 3.0 + s * 0.5, 2.0, spent=7.95) for s in (0, 1, 2, 3)]  # seed 3: no base
    runs += [_run("fedtar", 8.0, s, 2.0, 2.0, spent=7.9) for s in (0, 1)]  # no non-private fedtar: no share
    return runs


def test_shares_pair_by_seed_and_say_the_spent_range_and_each_site() -> None:
    (row,) = sk.shares_kept(_grid())
    assert (row["method"], row["epsilon"], row["n"]) == ("fedavg", 8.0, 3)
    assert row["spent"] == pytest.approx((7.94, 7.95))
    # gains 2, 2.5, 3 over a non-private gain of 4 on every seed: 62.5 %
    assert row["CIDEr"][0] == pytest.approx(0.625)
    (site_b,) = sk.shares_kept(_grid(), ("CIDEr",), site="siteB")
    share, ci = site_b["CIDEr"]
    assert share == pytest.approx(0.5) and ci == pytest.approx((0.5, 0.5))  # 1 of 2 on every seed


def test_the_tables_render_shares_in_percent_with_their_intervals() -> None:
    table = sk.share_table(_grid())
    assert (
        "| method | ε spent per site | n | CIDEr share kept [95 % CI] | CE-F1 share kept [95 % CI] |" in table
    )
    assert "| fedavg ε=8 | 7.940–7.950 | 3 | 62 % [" in table
    per_site = sk.share_per_site_table(_grid())
    assert "| method (CIDEr share kept [95 % CI]) | n | siteA | siteB |" in per_site
    assert "| fedavg ε=8 | 3 | 62 % [" in per_site and "| 50 % [50, 50] |" in per_site
    assert sk.share_table([r for r in _grid() if r["method"] != "base"]) == ""


def _folder(tmp_path: Path, name: str, runs: list[dict[str, Any]], base_model: str = "b1") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    for run in runs:
        run["base_model"] = base_model
    (folder / "results.json").write_text(json.dumps({"runs": runs}), encoding="utf-8")
    return folder


def test_the_doc_table_joins_sweeps_of_one_base_and_refuses_two_bases(tmp_path: Path) -> None:
    grid = _grid()
    private = _folder(tmp_path, "private", [r for r in grid if r["epsilon"] is not None])
    plain = _folder(tmp_path, "plain", [r for r in grid if r["epsilon"] is None])
    with pytest.raises(doc_tables.TableError, match="no 'share-kept' table"):
        doc_tables.from_sweep(private, "share-kept", "T", "cmd", "laptop")
    data = doc_tables.from_sweep(private, "share-kept", "T", "cmd", "laptop", adding=[plain])
    assert [r[:3] for r in data["rows"]] == [["fedavg ε=8", "7.940–7.950", "3"]]
    # the sweep's own cell wins over an added one of the same method, ε and seed
    other = _folder(tmp_path, "other", [_run("fedavg", 8.0, s, 1.0, 1.0) for s in (0, 1, 2)])
    again = doc_tables.from_sweep(private, "share-kept", "T", "cmd", "laptop", adding=[other, plain])
    assert again["rows"] == data["rows"]
    elsewhere = _folder(tmp_path, "elsewhere", [r for r in _grid() if r["epsilon"] is None], base_model="b2")
    with pytest.raises(doc_tables.TableError, match="base model b2"):
        doc_tables.from_sweep(private, "share-kept", "T", "cmd", "laptop", adding=[elsewhere])


def _with_central() -> list[dict[str, Any]]:
    # non-private pooled central: gains over base 4, 6, 5 on seeds 0, 1, 2 (siteB: 2 on every seed)
    return _grid() + [_run("central", None, s, c, 3.0) for s, c in ((0, 5.0), (1, 7.0), (2, 6.0))]


def test_the_share_of_centrals_gain_pairs_by_seed_with_the_delta_method_interval() -> None:
    rows = {(r["method"], r["epsilon"]): r for r in sk.shares_of_central(_with_central())}
    # base, central and the cell on the same seeds; no own non-private cell needed (fedtar)
    assert list(rows) == [("fedtar", 8.0), ("fedavg", None), ("fedavg", 8.0)]
    # fedavg ε=8, by hand: g = 2, 2.5, 3 (seed 3 has no base), G = 4, 6, 5: R = 2.5 / 5 = 0.5;
    # residuals g - R G = 0, -0.5, 0.5 (sd 0.5); se = 0.5 / (sqrt(3) * 5); half = 4.303 se = 0.248434
    row = rows[("fedavg", 8.0)]
    assert row["n"] == 3 and row["spent"] == pytest.approx((7.94, 7.95))
    share, ci = row["CIDEr"]
    assert share == pytest.approx(0.5) and ci == pytest.approx((0.5 - 0.248434, 0.5 + 0.248434), abs=1e-6)
    assert row["CE-F1"][0] == pytest.approx(0.5)
    # fedavg ε=∞: g = 4 on every seed: R = 0.8; residuals 0.8, -0.8, 0 (sd 0.8); half 0.397495
    share, ci = rows[("fedavg", None)]["CIDEr"]
    assert share == pytest.approx(0.8) and ci == pytest.approx((0.8 - 0.397495, 0.8 + 0.397495), abs=1e-6)
    assert rows[("fedavg", None)]["spent"] is None
    # fedtar ε=8 on seeds 0, 1: g = 1, 1, G = 4, 6: R = 0.2; residuals 0.2, -0.2; half 12.706 * 0.04
    share, ci = rows[("fedtar", 8.0)]["CIDEr"]
    assert rows[("fedtar", 8.0)]["n"] == 2
    assert share == pytest.approx(0.2) and ci == pytest.approx((0.2 - 0.50824, 0.2 + 0.50824), abs=1e-6)
    site_b = {
        (r["method"], r["epsilon"]): r for r in sk.shares_of_central(_with_central(), ("CIDEr",), "siteB")
    }
    share, ci = site_b[("fedavg", 8.0)]["CIDEr"]
    assert share == pytest.approx(0.5) and ci == pytest.approx((0.5, 0.5))  # 1 of central's 2 on every seed
    assert sk.shares_of_central(_grid()) == []  # no central cells: no second reference point


def test_the_share_of_central_tables_and_their_doc_table(tmp_path: Path) -> None:
    table = sk.share_of_central_table(_with_central())
    assert "| method | ε spent per site | n | CIDEr share of central's gain [95 % CI] |" in table
    assert "| fedavg ε=8 | 7.940–7.950 | 3 | 50 % [25, 75] | 50 % [25, 75] |" in table
    assert "| fedavg ε=∞ | — | 3 | 80 % [40, 120] |" in table
    per_site = sk.share_of_central_per_site_table(_with_central())
    assert "| fedavg ε=8 | 3 | 50 % [25, 75] | 50 % [50, 50] |" in per_site
    folder = _folder(tmp_path, "grid", _with_central())
    data = doc_tables.from_sweep(folder, "share-of-central", "T", "cmd", "laptop")
    assert [r[0] for r in data["rows"]] == ["fedtar ε=8", "fedavg ε=∞", "fedavg ε=8"]


def test_scores_and_share_of_central_joins_the_two_tables_row_by_row(tmp_path: Path) -> None:
    """README's one table: each cell group's mean [95 % CI] beside its share of central's gain,
    both as their own tables render them (the intervals and share-of-central tables)."""
    runs = _with_central()
    table = doc_tables.scores_and_share_table(runs)
    assert table.splitlines()[0] == (
        "| method | n | CIDEr [95 % CI] | CE-F1 [95 % CI] | CIDEr share of central's gain [95 % CI] "
        "| CE-F1 share of central's gain [95 % CI] |"
    )
    share = {r[0]: r for r in doc_tables._parse_markdown(sk.share_of_central_table(runs))[1]}
    folder = _folder(tmp_path, "grid", runs)
    data = doc_tables.from_sweep(folder, "scores-and-share-of-central", "T", "cmd", "laptop")
    rows = {r[0]: r for r in data["rows"]}
    assert rows["central ε=∞"][4:] == ["100 % (reference)", "100 % (reference)"]
    assert rows["base ε=∞"][4:] == ["—", "—"]
    for label in ("fedavg ε=8", "fedavg ε=∞", "fedtar ε=8"):
        assert rows[label][4:] == share[label][3:5], label  # the share table's own cells
    # the scores are the sweep's intervals table's cells for the same (method, ε)
    intervals = doc_tables.from_sweep(folder, "intervals", "T", "cmd", "laptop")["rows"]
    fedavg_8 = next(r for r in intervals if r[:2] == ["fedavg", "8"])
    assert rows["fedavg ε=8"][1:4] == [fedavg_8[2], fedavg_8[3], fedavg_8[4]]
    only = doc_tables.from_sweep(folder, "scores-and-share-of-central", "T", "c", "m", only=["fedavg ε=8"])
    assert [r[0] for r in only["rows"]] == ["fedavg ε=8"]
