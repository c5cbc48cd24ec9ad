"""Re-derive an `empirical_audit` record's ε̂ from its logged counts (the verifier's own copy).

The bound is the one-run lower bound of Steinke, Nasr and Jagielski (NeurIPS 2023, Thm 3.1): with m
canaries, r guesses and v correct, ε̂ is the largest ε at which
P[W ≥ v] ≤ β + 2mδ·α falls below 1 − confidence, β = P[Bin(r, q) ≥ v], q = e^ε/(1 + e^ε),
α = max_i P[v − i ≤ Bin(r, q) < v]/i. The writer's implementation is `secure_fed.dp.lower_bound`;
audits/ may not import it, and a verifier re-deriving with the writer's code would check nothing,
so this one finds the root with Brent's method on the log p-value instead of a bisection.

The ceiling ε̂_max is the ε̂ of r correct guesses out of r: the most the measurement could report. A
verdict "passed" needs ε̂ ≤ ε < ε̂_max; with ε̂_max ≤ ε the measurement is "inconclusive" whatever it
measured (a mechanism with no noise at all would have passed it).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import optimize, stats

# Logged ε̂ and re-derived ε̂ must agree this closely (the writer bisects to far below this).
TOLERANCE = 1e-4
FIELDS = ("canaries", "guesses", "correct", "delta", "confidence", "epsilon_hat")


def _p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    q = math.exp(epsilon) / (1.0 + math.exp(epsilon))
    beta = float(stats.binom.sf(v - 1, r, q))
    counts = np.arange(v - 1, -1, -1)
    alpha = float(np.max(np.cumsum(stats.binom.pmf(counts, r, q)) / np.arange(1, v + 1)))
    return beta + 2 * m * delta * alpha


def rederive_epsilon_hat(m: int, r: int, v: int, delta: float, confidence: float) -> float:
    """ε̂ from the counts; 0 when the guesses do not beat chance at this confidence."""
    if not (0 <= v <= r <= m and 0 <= delta <= 1 and 0 < confidence < 1):
        raise ValueError(f"impossible counts or levels: m={m}, r={r}, v={v}, δ={delta}, {confidence}")
    level = 1.0 - confidence
    if v == 0 or _p_value(m, r, v, 0.0, delta) >= level:
        return 0.0
    high = 1.0
    while _p_value(m, r, v, high, delta) < level:
        high *= 2
        if high > 1e4:
            return math.inf
    # the p-value rises with ε; find where it crosses the level
    return float(
        optimize.brentq(lambda e: _p_value(m, r, v, e, delta) - level, 0.0, high, xtol=1e-10, rtol=1e-12)
    )


def check_record(payload: Any) -> tuple[float | None, str | None]:
    """(re-derived ε̂, None) when the record holds; (ε̂ or None, reason) when it does not."""
    if not isinstance(payload, dict) or any(key not in payload for key in FIELDS):
        return None, f"empirical_audit record needs {', '.join(FIELDS)}"
    try:
        m, r, v = (int(payload[key]) for key in ("canaries", "guesses", "correct"))
        again = rederive_epsilon_hat(m, r, v, float(payload["delta"]), float(payload["confidence"]))
        logged = float(payload["epsilon_hat"])
    except (TypeError, ValueError) as err:
        return None, f"empirical_audit record unreadable: {err}"
    if not math.isclose(again, logged, rel_tol=TOLERANCE, abs_tol=TOLERANCE):
        return again, (
            f"empirical_audit ε̂ {logged:.4g} does not follow from its counts ({v} of {r} guesses "
            f"correct, {m} canaries, δ={payload['delta']:g}): re-derived {again:.4g}"
        )
    if "epsilon_hat_max" in payload or "verdict" in payload:
        problem = _check_verdict(payload, m, r, again)
        if problem is not None:
            return again, problem
    return again, None


def verdict_of(epsilon_hat: float, ceiling: float, stated: float) -> str:
    """The verdict: "violation" (ε̂ > ε), "inconclusive" (ceiling ε̂_max ≤ ε: the measurement could
    not have failed), else "passed"."""
    if epsilon_hat > stated:
        return "violation"
    return "inconclusive" if ceiling <= stated else "passed"


def _check_verdict(payload: dict[str, Any], m: int, r: int, epsilon_hat: float) -> str | None:
    """A record's ceiling (ε̂ had all r guesses been right) and verdict must follow from its counts:
    a writer that logs "passed" for a measurement whose ceiling is below ε claims a test that could
    not have failed."""
    try:
        delta, confidence = float(payload["delta"]), float(payload["confidence"])
        ceiling = rederive_epsilon_hat(m, r, r, delta, confidence)
        logged = float(payload["epsilon_hat_max"])
        stated = float(payload["stated_epsilon"])
    except (KeyError, TypeError, ValueError) as err:
        return f"empirical_audit record needs epsilon_hat_max and stated_epsilon beside its verdict: {err}"
    if not math.isclose(ceiling, logged, rel_tol=TOLERANCE, abs_tol=TOLERANCE):
        return (
            f"empirical_audit ceiling ε̂_max {logged:.4g} does not follow from {r} guesses: "
            f"re-derived {ceiling:.4g}"
        )
    expected = verdict_of(epsilon_hat, ceiling, stated)
    if payload.get("verdict") != expected:
        return (
            f"empirical_audit verdict {payload.get('verdict')!r} does not follow from ε̂ {epsilon_hat:.4g}, "
            f"ceiling {ceiling:.4g} and stated ε {stated:.4g}: it is {expected!r}"
        )
    return None
