"""The Skellam sum's RDP, amplified by Poisson sampling of patients, at integer orders 2..256.

The accountant prices a logged `SkellamSum` event with it and the distributed mechanism calibrates
its noise with it, so it sits below both (the mechanism and the proofs: secure_fed.dp.distributed's
docstring). Pure numpy/math.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from secure_fed.dp.events import SKELLAM_AMPLIFICATIONS

ORDERS: tuple[int, ...] = tuple(range(2, 257))


def skellam_rdp(order: float | np.ndarray, l1: float, l2: float, mu: float) -> Any:
    """RDP ε(α) of adding Skellam noise of variance `mu` per coordinate (Poisson(mu/2) − Poisson(mu/2))
    to an integer vector query with L1 / L2 sensitivities l1, l2 (Agarwal, Kairouz & Liu 2021).

    Tends to the Gaussian mechanism's α·l2²/(2·mu) as mu grows. Accepts an array of orders.
    """
    if mu <= 0:
        raise ValueError(f"mu must be > 0, got {mu}")
    alpha = np.asarray(order, dtype=np.float64)
    gaussian = alpha * l2**2 / (2 * mu)
    correction = np.minimum(((2 * alpha - 1) * l2**2 + 6 * l1) / (4 * mu**2), 3 * l1 / (2 * mu))
    out = gaussian + correction
    return float(out) if out.ndim == 0 else out


def check_amplification(amplification: str) -> None:
    if amplification not in SKELLAM_AMPLIFICATIONS:
        raise ValueError(f"amplification must be one of {SKELLAM_AMPLIFICATIONS}, got {amplification!r}")


def poisson_subsampled_rdp(
    order: int, q: float, rdp_fn: Callable[[int], float], amplification: str = "general"
) -> float:
    """Upper bound on the RDP at integer `order` ≥ 2 of a mechanism applied to a Poisson sample
    (each unit in with probability q), the base mechanism's RDP being rdp_fn(l) at integer orders l
    (add/remove neighbours):

        ε'(α) ≤ 1/(α−1) · log[ (1−q)^(α−1)(αq − q + 1) + C(α,2) q² (1−q)^(α−2) e^{ε(2)}
                              + k Σ_{l=3..α} C(α,l) q^l (1−q)^(α−l) e^{(l−1) ε(l)} ],

    k = 3 for "general" (Zhu & Wang, ICML 2019, Thm. 6: ANY base mechanism), k = 1 for
    "symmetric" (only for a mechanism whose every neighbouring pair is symmetric, as a noise
    distribution symmetric about 0 and its shift are: secure_fed.dp.distributed's docstring).
    Never more than the unsampled ε(α) (sampling is a mixture; Rényi divergence is jointly
    quasi-convex)."""
    if isinstance(order, bool) or int(order) != order or order < 2:
        raise ValueError(f"order must be an integer >= 2, got {order}")
    alpha = int(order)
    base = np.array([rdp_fn(level) for level in range(2, alpha + 1)], dtype=np.float64)
    return float(_subsampled_curve(q, base, amplification)[alpha - 2])


def _subsampled_curve(q: float, base: np.ndarray, amplification: str) -> np.ndarray:
    """The bound at orders 2..len(base)+1, base[i] = ε(i + 2); vectorised over orders."""
    check_amplification(amplification)
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"sampling rate must lie in [0, 1], got {q}")
    top = len(base) + 1
    if q == 0.0:
        return np.zeros(len(base))
    if q == 1.0:
        return base.copy()
    alphas = np.arange(2, top + 1, dtype=np.float64)[:, None]  # rows: order α
    levels = np.arange(2, top + 1, dtype=np.float64)[None, :]  # columns: l
    log_q, log_1q = math.log(q), math.log1p(-q)
    log_binom = _log_binom(alphas, levels)
    terms = log_binom + levels * log_q + (alphas - levels) * log_1q + (levels - 1) * base[None, :]
    if amplification == "general":
        terms[:, 1:] += math.log(3.0)  # l >= 3 carries the factor 3; l = 2 does not
    terms = np.where(levels <= alphas, terms, -np.inf)
    first = (alphas[:, 0] - 1) * log_1q + np.log1p(alphas[:, 0] * q - q)
    stacked = np.concatenate([first[:, None], terms], axis=1)
    peak = stacked.max(axis=1, keepdims=True)
    log_sum = peak[:, 0] + np.log(np.exp(stacked - peak).sum(axis=1))
    bound = log_sum / (alphas[:, 0] - 1)
    return np.minimum(bound, base)


def _log_binom(n: np.ndarray, k: np.ndarray) -> np.ndarray:
    from scipy.special import gammaln

    return gammaln(n + 1) - gammaln(k + 1) - gammaln(np.maximum(n - k, 0) + 1)


@functools.lru_cache(maxsize=1024)
def skellam_subsampled_curve(
    q: float, l1: float, l2: float, mu: float, amplification: str = "symmetric"
) -> tuple[float, ...]:
    """One step's RDP at ORDERS (2..256) for the Poisson-sampled Skellam sum (cached: ledgers
    re-price the same step every round)."""
    base = skellam_rdp(np.asarray(ORDERS, dtype=np.float64), l1, l2, mu)
    return tuple(float(v) for v in _subsampled_curve(q, base, amplification))
