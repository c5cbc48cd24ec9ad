"""The core finds each algorithm's pieces through secure_fed.registry, by name."""

from __future__ import annotations

import pytest

from secure_fed import registry


def test_each_algorithm_folder_registers_its_strategies_and_learner() -> None:
    assert {"fedtar", "fedtar-no-gmm", "fedtar-no-temporal", "fm2"} <= set(registry.strategy_names())
    from secure_fed.algorithms.fedtar.learner import ReportLearner

    assert registry.learner_factory("reports") == ReportLearner.create
    with pytest.raises(ValueError, match="data.kind = 'tabular'"):
        registry.learner_factory("tabular")


def test_a_second_algorithm_cannot_take_a_registered_name() -> None:
    registry.load_algorithms()
    taken = registry.strategy_factory("fedtar")
    assert taken is not None
    registry.register_strategy("fedtar", taken)  # the same factory again (a re-import) is fine
    with pytest.raises(ValueError, match="two algorithms register the method 'fedtar'"):
        registry.register_strategy("fedtar", lambda dim, t_max, cfg: None)
    assert registry.strategy_factory("fedtar") is taken
