"""The core finds each algorithm's pieces through secure_fed.registry, by name."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import secure_fed.algorithms
from secure_fed import registry


def test_each_algorithm_folder_registers_its_strategies_and_learner() -> None:
    assert {"fedtar", "fedtar-no-gmm", "fedtar-no-temporal", "fm2"} <= set(registry.method_names())
    from secure_fed.algorithms.fedtar.learner import ReportLearner

    assert registry.learner_factory("reports") == ReportLearner.create
    with pytest.raises(ValueError, match="data.kind = 'tabular'"):
        registry.learner_factory("tabular")


def test_a_second_algorithm_cannot_take_a_registered_name() -> None:
    registry.load_algorithms()
    taken = registry.method("fedtar")
    registry.register_method(taken)  # the same method again (a re-import) is fine
    with pytest.raises(ValueError, match="two algorithms register the method 'fedtar'"):
        registry.register_method(registry.Method("fedtar", lambda dim, t_max, cfg: None, ("reports",)))
    assert registry.method("fedtar") is taken


def test_an_algorithm_folder_is_found_by_listing_the_algorithms_package(tmp_path: Path, monkeypatch) -> None:
    """No list of folders to keep up to date: a new folder registers at the first lookup."""
    probe = tmp_path / "probe_algorithm"
    probe.mkdir()
    (probe / "__init__.py").write_text(
        "from secure_fed import registry\n"
        "registry.register_method(registry.Method('probe-method', lambda d, t, c: None, ('reports',)))\n"
    )
    (tmp_path / "loose_module.py").write_text("raise AssertionError('a module is not an algorithm folder')\n")
    registry.load_algorithms()  # the real table first: what the monkeypatches restore is complete
    monkeypatch.setattr(secure_fed.algorithms, "__path__", [*secure_fed.algorithms.__path__, str(tmp_path)])
    monkeypatch.setattr(registry, "_methods", dict(registry._methods))
    monkeypatch.setattr(registry, "_loaded", False)
    try:
        assert "probe-method" in registry.method_names()
        assert {"fedtar", "fm2"} <= set(registry.method_names())
    finally:
        sys.modules.pop("secure_fed.algorithms.probe_algorithm", None)
