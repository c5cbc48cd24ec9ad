"""The compliance report says which Poisson-subsampling bound counted a distributed run's ε, from
the run's logged configuration; a snapshot written before `dp.amplification` existed was planned
with the general bound, and the report says that, not the default of today."""

from __future__ import annotations

from dataclasses import asdict

from secure_fed.audits.payloads import run_settings
from secure_fed.verifier.report import mechanism_words


def _snapshot(**dp: object) -> dict[str, object]:
    return {"dp": {"enabled": True, "noise": "distributed", "honest_min": 4, "colluders": 1, **dp}}


def test_a_run_planned_with_the_symmetric_bound_says_so() -> None:
    settings = asdict(run_settings(_snapshot(amplification="symmetric")))
    words = mechanism_words("dp_sgd", settings)
    assert "symmetric about zero" in words and "docs/THREAT_MODEL.md" in words
    assert "Zhu & Wang" not in words


def test_a_snapshot_without_the_key_is_the_general_bound() -> None:
    assert run_settings(_snapshot()).amplification == "general"
    words = mechanism_words("dp_sgd", asdict(run_settings(_snapshot())))
    assert "Zhu & Wang's general bound" in words and "symmetric about zero" not in words


def test_site_mode_says_nothing_about_it() -> None:
    settings = run_settings({"dp": {"enabled": True, "noise": "site", "amplification": "symmetric"}})
    assert settings.amplification is None
    assert "Zhu" not in mechanism_words("dp_sgd", asdict(settings))
