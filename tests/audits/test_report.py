from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from secure_fed.audits.keys import load_public_keys
from secure_fed.audits.log import AuditLog
from secure_fed.audits.report import report_main, write_report

from .conftest import BUDGETS, DELTA, Run, mechanism_json, opacus_epsilon
from .tamper import read_records, write_records


def _report(run: Run, tmp_path: Path, paths: list[Path] | None = None, keys: bool = True):
    html_path, json_path, csv_path = write_report(
        paths or run.all_paths,
        tmp_path / "out" / "report.html",
        load_public_keys(run.keys_dir) if keys else None,
    )
    return html_path.read_text(), json.loads(json_path.read_text()), list(csv.DictReader(csv_path.open()))


def test_report_figures(pristine: Run, tmp_path: Path) -> None:
    html, data, rows = _report(pristine, tmp_path)
    assert data["verification"]["ok"] is True and data["verification"]["problems"] == []
    guarantees = {g["site"]: g for g in data["guarantees"]}
    # site-0 took all 3 rounds: its train patients saw the GMM release and 24 DP-SGD steps.
    site0 = opacus_epsilon([(1.0, 5.0, 1), (0.25, 1.1, 8), (0.25, 1.1, 8), (0.25, 1.1, 8)])
    assert guarantees["site-0"]["epsilon"] == pytest.approx(site0)
    assert guarantees["site-0"]["delta"] == DELTA and guarantees["site-0"]["budget"] == BUDGETS["site-0"]
    assert guarantees["site-1"]["epsilon"] == pytest.approx(
        opacus_epsilon([(1.0, 5.0, 1), (0.25, 1.1, 8), (0.25, 1.1, 8)])
    )
    assert not any(g["exceeded"] for g in data["guarantees"])
    assert [(r["site"], r["round"]) for r in data["refusals"]] == [("site-1", 3)]
    assert [s["dropped"] for s in data["secagg_rounds"]] == [[], [], ["site-1"]]
    # Copies in the server's log are not counted twice.
    assert len(rows) == len(data["mechanisms"]) == 12
    dp_sgd = [r for r in rows if r["mechanism"] == "dp_sgd"]
    assert {(r["sampling_rate"], r["noise_multiplier"], r["steps"], r["clip_norm"]) for r in dp_sgd} == {
        ("0.25", "1.1", "8", "1.0")
    }
    assert all(r["matches"] == "True" for r in rows)
    assert "(ε = 8.47, δ = 1e-05) per patient at site-0" in html
    assert "It declined round 3" in html and "No site exceeded its privacy budget" in html
    assert "<svg" in html and "Verified" in html


def test_report_is_self_contained(pristine: Run, tmp_path: Path) -> None:
    html, _, _ = _report(pristine, tmp_path)
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:|//)""", html, re.IGNORECASE)
    assert not re.search(
        r"<(?:script|link|iframe|object)\b|@import|url\(\s*['\"]?https?:", html, re.IGNORECASE
    )
    assert "<!DOCTYPE svg" not in html


def test_report_from_the_server_log_alone(pristine: Run, tmp_path: Path) -> None:
    _, data, rows = _report(pristine, tmp_path, [pristine.paths["server"]])
    assert data["verification"]["ok"] and len(rows) == 12


def test_report_shows_failed_verification(run: Run, tmp_path: Path) -> None:
    records = read_records(run.paths["site-0"])
    write_records(run.paths["site-0"], records[:-1])
    html, data, _ = _report(run, tmp_path)
    assert data["verification"]["ok"] is False
    assert "did NOT pass verification" in html and "truncated: no head record" in html
    _, unsigned, _ = _report(run, tmp_path, keys=False)
    assert unsigned["verification"]["keys_checked"] is False and not unsigned["verification"]["ok"]


def test_exceeded_budget_is_said_plainly(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    path = tmp_path / "site-9.jsonl"
    with AuditLog(path, "site-9", "run-x", key) as log:
        log.append(
            "privacy",
            {
                "site": "site-9",
                "population": "train",
                "mechanism": "dp_sgd",
                "event": mechanism_json(0.25, 1.1, 8),
                "delta": DELTA,
                "epsilon": {"rdp": opacus_epsilon([(0.25, 1.1, 8)]), "prv": None},
                "budget": 2.0,
            },
            round=1,
        )
    html_path, json_path, _ = write_report([path], tmp_path / "r.html", {"site-9": key.public_key()})
    data = json.loads(json_path.read_text())
    assert data["guarantees"][0]["exceeded"] is True
    assert "Privacy budget exceeded at: site-9" in html_path.read_text()


def test_report_main(pristine: Run, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r" / "report.html"
    assert report_main(pristine.all_paths, out, pristine.keys_dir) == 0
    assert out.exists() and out.with_suffix(".json").exists() and out.with_suffix(".csv").exists()
    assert report_main(pristine.all_paths, out, None) == 1
    assert "signatures were not checked" in capsys.readouterr().out
