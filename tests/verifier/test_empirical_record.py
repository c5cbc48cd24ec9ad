"""The `empirical_audit` record: `verify` re-derives ε̂ from its counts; the report shows it beside ε."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from rich.console import Console

from secure_fed.audits.log import AuditLog
from secure_fed.verifier.lower_bound import check_record, rederive_epsilon_hat
from secure_fed.verifier.report import write_report
from secure_fed.verifier.verify import verify_logs
from secure_fed.verifier.verify_console import verify_main
from tests.verifier.conftest import DELTA, mechanism_json, opacus_epsilon

EVENT = (0.25, 3.0, 40)  # stated ε ≈ 2.6


def _audit_payload(correct: int, epsilon_hat: float | None = None) -> dict[str, Any]:
    m, r = 1000, 200
    measured = rederive_epsilon_hat(m, r, correct, DELTA, 0.95) if epsilon_hat is None else epsilon_hat
    return {
        "site": "site0",
        "population": "train",
        "mechanism": "dp_sgd",
        "canaries": m,
        "guesses": r,
        "guessed_in": 100,
        "guessed_out": 100,
        "correct": correct,
        "delta": DELTA,
        "confidence": 0.95,
        "epsilon_hat": measured,
        "stated_epsilon": opacus_epsilon([EVENT]),
    }


def _log(folder: Path, audit: dict[str, Any]) -> tuple[Path, dict[str, Any]]:
    key = Ed25519PrivateKey.generate()
    path = folder / "site0.jsonl"
    with AuditLog(path, "site0", "audit-run", key) as log:
        log.append(
            "privacy",
            {
                "site": "site0",
                "population": "train",
                "mechanism": "dp_sgd",
                "event": mechanism_json(*EVENT),
                "delta": DELTA,
                "epsilon": {"rdp": opacus_epsilon([EVENT]), "prv": None},
                "budget": 4.0,
            },
            round=1,
        )
        log.append("empirical_audit", audit)
    return path, {"site0": key.public_key()}


def test_verify_rederives_epsilon_hat(tmp_path: Path) -> None:
    path, keys = _log(tmp_path, _audit_payload(170))
    result = verify_logs([path], keys)
    assert result.ok, result.problems
    (value,) = result.empirical.values()
    assert value == pytest.approx(rederive_epsilon_hat(1000, 200, 170, DELTA, 0.95))
    assert 1.0 < value < 3.0


def test_verify_rejects_an_epsilon_hat_its_counts_do_not_give(tmp_path: Path) -> None:
    # signed by the site, so only the recomputation can catch it
    path, keys = _log(tmp_path, _audit_payload(120, epsilon_hat=2.5))
    result = verify_logs([path], keys)
    assert not result.ok
    assert any("does not follow from its counts" in str(problem) for problem in result.problems)


def test_check_record_needs_the_counts() -> None:
    again, problem = check_record({"canaries": 10})
    assert again is None and problem is not None and "guesses" in problem


def test_report_shows_epsilon_hat_beside_epsilon(tmp_path: Path) -> None:
    path, keys = _log(tmp_path, _audit_payload(170))
    html_path, json_path, _ = write_report([path], tmp_path / "report.html", keys)
    page = html_path.read_text()
    measured = rederive_epsilon_hat(1000, 200, 170, DELTA, 0.95)
    assert "Empirical lower bound on ε" in page and "measured lower bound" in page
    assert f"ε̂ = <b>{measured:.3g}</b>" in page
    assert f"ε = <b>{opacus_epsilon([EVENT]):.3g}</b>" in page
    assert "re-derived from the logged counts" in page
    assert "EXCEEDS" not in page
    assert '"empirical_audits"' in json_path.read_text()


def test_report_flags_an_epsilon_hat_above_epsilon(tmp_path: Path) -> None:
    path, keys = _log(tmp_path, _audit_payload(199))  # ε̂ ≈ 3.7 > stated ε ≈ 2.6
    html_path, _, _ = write_report([path], tmp_path / "report.html", keys)
    page = html_path.read_text()
    assert "EXCEEDS the stated ε" in page
    # evidence, not proof: a correct mechanism is flagged in up to 1 − confidence of audits
    assert "at most 5 % of audits; rerun the audit" in page and "would prove" not in page


def test_each_stated_epsilon_names_whose_patients_and_what_computed_it(tmp_path: Path) -> None:
    """Issue 64 item 4: `audit verify` and the report say whose patients an audit's stated ε prices
    and what computed it: the accountant for DP-SGD's rounds, the exact Gaussian ε for one release
    (an audit of the validation patients' α scalars is not an RDP figure)."""
    trained = {**_audit_payload(170), "accountant": "rdp"}
    release = {
        **_audit_payload(150),
        "population": "validation",
        "mechanism": "alpha_scalars",
        "stated_for": "one release (exact Gaussian ε)",
    }
    key = Ed25519PrivateKey.generate()
    path = tmp_path / "site0.jsonl"
    with AuditLog(path, "site0", "audit-run", key) as log:
        log.append("empirical_audit", trained)
        log.append("empirical_audit", release)
    console = Console(record=True, width=400, soft_wrap=True)
    verify_main([path], None, console)
    said = console.export_text()
    stated = f"{trained['stated_epsilon']:.3f}"
    assert "empirical lower bound of site0's training patients: ε̂ = " in said, said
    assert f"the stated ε is {stated}, RDP)" in said, said
    assert "empirical lower bound of site0's validation patients: ε̂ = " in said, said
    assert f"the stated ε is {stated}, one release (exact Gaussian ε))" in said, said
    html_path, _, _ = write_report([path], tmp_path / "report.html", {"site0": key.public_key()})
    page = html.unescape(html_path.read_text())
    assert "(training patients, RDP) for its DP-SGD training" in page, page
    assert "(validation patients, one release (exact Gaussian ε)) for one release of its α scalars" in page
