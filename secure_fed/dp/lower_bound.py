"""The one-run lower bound on ε's lower bound (Steinke, Nasr, Jagielski, NeurIPS 2023, Theorem 3.1).

m canaries are each included independently with probability ½; after one run the canary holder guesses
"in" for some canaries and "out" for others (abstaining on the rest), r guesses in all, v of them
correct. If the mechanism is (ε, δ)-DP with respect to every canary, then for every v

    P[W ≥ v] ≤ β + 2mδ·α,   β = P[Binomial(r, q) ≥ v],   q = e^ε / (1 + e^ε),
    α = max_{1 ≤ i ≤ v} P[v − i ≤ Binomial(r, q) < v] / i.

So an observed v whose p-value at ε is below 1 − confidence rejects "(ε, δ)-DP"; the largest ε so
rejected is ε̂, a lower bound on the ε of the mechanism at that confidence. It knows nothing of
how the guesses were made: `audit verify` re-derives ε̂ from the logged (m, r, v, δ, confidence).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

DEFAULT_CONFIDENCE = 0.95
# Bisection to 1e-9 in ε; 60 halvings of any bracket used below is far past that.
_BISECTIONS = 60


def _check(m: int, r: int, v: int, delta: float) -> None:
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 ≤ correct ≤ guesses ≤ canaries, got {v}, {r}, {m}")
    if not 0 <= delta <= 1:
        raise ValueError(f"delta must lie in [0, 1], got {delta}")


def p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """Upper bound on P[at least v of r guesses correct] under (ε, δ)-DP with m canaries."""
    _check(m, r, v, delta)
    if not epsilon >= 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon}")
    if v == 0:
        return 1.0
    q = 1.0 / (1.0 + math.exp(-epsilon))  # accuracy of ε-DP randomised response
    beta = float(stats.binom.sf(v - 1, r, q))
    alpha = 0.0
    if delta > 0:
        # P[v − i ≤ Bin(r, q) < v] for i = 1..v, cumulated from the pmf just below v
        below = np.cumsum(stats.binom.pmf(np.arange(v - 1, -1, -1), r, q))
        alpha = float(np.max(below / np.arange(1, v + 1)))
    return min(1.0, beta + 2 * m * delta * alpha)


def epsilon_lower_bound(
    m: int, r: int, v: int, delta: float = 0.0, confidence: float = DEFAULT_CONFIDENCE
) -> float:
    """ε̂: the largest ε at which v correct of r guesses (m canaries) has p-value < 1 − confidence.

    0 when even ε = 0 is not rejected (the guesses are no better than chance at that confidence).
    """
    _check(m, r, v, delta)
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    level = 1.0 - confidence
    if p_value(m, r, v, 0.0, delta) >= level:
        return 0.0
    low, high = 0.0, 1.0
    while p_value(m, r, v, high, delta) < level:
        low, high = high, 2 * high
        if high > 1e4:  # only an r so large that scipy's binomial underflows; never in practice
            return math.inf
    for _ in range(_BISECTIONS):
        mid = (low + high) / 2
        if p_value(m, r, v, mid, delta) < level:
            low = mid
        else:
            high = mid
    return low


def epsilon_ceiling(m: int, r: int, delta: float = 0.0, confidence: float = DEFAULT_CONFIDENCE) -> float:
    """ε̂_max: the ε̂ of r correct guesses out of r, the most this measurement can ever report with m
    canaries and r guesses. A measurement whose ceiling is at or below the stated ε cannot find a
    violation whatever the mechanism does (with no noise at all, every guess right gives only the
    ceiling), so it says nothing about that ε."""
    return epsilon_lower_bound(m, r, r, delta, confidence)


PASSED, INCONCLUSIVE, VIOLATION = "passed", "inconclusive", "violation"


def verdict(epsilon_hat: float, ceiling: float, stated_epsilon: float) -> str:
    """The verdict: "violation" when ε̂ > ε (a measured leak above the stated bound); else "inconclusive" when
    the ceiling ε̂_max ≤ ε (the measurement could not have failed); else "passed" (it could have failed
    and did not — which still proves only that the leak is at most what such a measurement detects)."""
    if epsilon_hat > stated_epsilon:
        return VIOLATION
    if ceiling <= stated_epsilon:
        return INCONCLUSIVE
    return PASSED


def guess(scores: np.ndarray, k_in: int, k_out: int) -> tuple[np.ndarray, np.ndarray]:
    """The canary holder's guesses from one score per canary: "in" for the k_in highest, "out" for the
    k_out lowest, abstain on the rest. Returns (indices guessed in, indices guessed out)."""
    scores = np.asarray(scores, dtype=np.float64)
    if k_in < 0 or k_out < 0 or k_in + k_out > scores.size:
        raise ValueError(f"cannot make {k_in} + {k_out} guesses about {scores.size} canaries")
    if not np.all(np.isfinite(scores)):
        raise ValueError("canary scores contain NaN or inf")
    # a stable sort, so ties (e.g. noise off, equal scores) fall the same way on every platform
    order = np.argsort(scores, kind="stable")
    return order[scores.size - k_in :] if k_in else order[:0], order[:k_out]


def count_correct(included: np.ndarray, guessed_in: np.ndarray, guessed_out: np.ndarray) -> int:
    included = np.asarray(included, dtype=bool)
    return int(included[guessed_in].sum() + (~included[guessed_out]).sum())
