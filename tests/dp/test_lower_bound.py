"""The one-run lower bound bound (Steinke, Nasr, Jagielski 2023), pinned against closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from secure_fed.dp.lower_bound import count_correct, epsilon_lower_bound, guess, p_value


@pytest.mark.parametrize(("r", "expected"), [(100, 3.49), (1000, 5.81)])
def test_all_correct_guesses_bound_epsilon(r: int, expected: float) -> None:
    eps = epsilon_lower_bound(r, r, r, delta=0.0, confidence=0.95)
    assert eps == pytest.approx(expected, abs=0.01)
    # with δ = 0 and all r correct: q^r = 0.05 exactly, q = e^ε / (1 + e^ε)
    q = 0.05 ** (1 / r)
    assert eps == pytest.approx(math.log(q / (1 - q)), abs=1e-6)


def test_delta_term_only_loosens_the_bound() -> None:
    plain = epsilon_lower_bound(1000, 200, 180)
    with_delta = epsilon_lower_bound(1000, 200, 180, delta=1e-5)
    assert 0 < with_delta < plain
    # P[W ≥ v] ≤ β + 2mδα: at ε the p-value exceeds β by exactly the δ term
    beta = float(stats.binom.sf(179, 200, 1 / (1 + math.exp(-1.0))))
    assert p_value(1000, 200, 180, 1.0, 1e-5) > beta
    assert p_value(1000, 200, 180, 1.0, 0.0) == pytest.approx(beta)


def test_chance_level_guesses_give_zero() -> None:
    assert epsilon_lower_bound(1000, 200, 100) == 0.0
    assert epsilon_lower_bound(10, 0, 0) == 0.0


def test_abstaining_guesses_about_extremes_only() -> None:
    scores = np.array([0.1, 5.0, -3.0, 0.2, 4.0, -2.0])
    guessed_in, guessed_out = guess(scores, 2, 2)
    assert set(guessed_in) == {1, 4} and set(guessed_out) == {2, 5}
    included = np.array([True, True, False, False, True, True])
    assert count_correct(included, guessed_in, guessed_out) == 3


def test_more_correct_means_a_larger_bound() -> None:
    values = [epsilon_lower_bound(1000, 100, v, delta=1e-5) for v in (70, 80, 90, 100)]
    assert values == sorted(values) and values[0] > 0


def test_bad_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="correct"):
        epsilon_lower_bound(10, 20, 5)
    with pytest.raises(ValueError, match="confidence"):
        epsilon_lower_bound(10, 10, 5, confidence=1.0)
