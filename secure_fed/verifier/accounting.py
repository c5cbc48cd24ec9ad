"""Independent re-pricing of logged mechanism events with Google's `dp_accounting`.

The sites price their releases with Opacus; the verifier must not trust that code path, so it
rebuilds each event as a dp_accounting DpEvent, prices it with dp_accounting's RdpAccountant on
Opacus' default RDP orders (so the two RDP values are comparable to within numerical noise), composes
by adding RDP curves and converts with dp_accounting's RDP-to-(ε, δ) conversion; the tight value comes
from dp_accounting's privacy loss distributions (PLD), except that unsampled Gaussian releases
compose to one Gaussian exactly and are priced by its closed form (a PLD of a tiny σ is huge).

dp_accounting has no Skellam mechanism, so a logged `skellam_sum` (distributed DP) is re-priced here
from its parameters alone, written apart from dp's code: its sensitivities are re-derived from
clip, gamma and padded_dim (a logged value that does not follow is refused), the Skellam RDP
(Agarwal, Kairouz & Liu 2021) is amplified for Poisson subsampling at integer orders 2..256 by the
bound the event logs as `amplification`: "symmetric" (the binomial expansion, which holds for the
Skellam sum because its noise is symmetric: proof in docs/THREAT_MODEL.md) or "general" (Zhu &
Wang 2019's bound for any mechanism, a factor 3 on the terms of order >= 3), an event logged
without the key being priced as "general". A stream holding one is converted on RDP_ORDERS plus
those integer orders (+inf at the fractional ones, as the sites do). It has no PLD: epsilon_pld is
nan.
"""

from __future__ import annotations

import functools
import json
import logging
import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import dp_accounting
import numpy as np
from dp_accounting.pld import common as pld_common
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld import privacy_loss_mechanism
from dp_accounting.rdp import RdpAccountant, rdp_privacy_accountant

# Opacus' default RDP orders (opacus.accountants.RDPAccountant.DEFAULT_ALPHAS).
RDP_ORDERS: tuple[float, ...] = tuple([1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)))
SKELLAM_MAX_ORDER = 256
# The orders a stream holding a Skellam sum is converted on (the sites' dp.accountants.SKELLAM_ORDERS).
EXTENDED_ORDERS: tuple[float, ...] = tuple(
    sorted(set(RDP_ORDERS) | {float(a) for a in range(2, SKELLAM_MAX_ORDER + 1)})
)
# 1e-3 moves ε by < 1e-5 against 1e-4 for our parameter ranges, at a fifth of the cost.
PLD_DISCRETIZATION = 1e-3


class EventError(ValueError):
    """A mechanism event that cannot be priced."""


def _positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise EventError(f"{name} must be a non-negative integer, got {value!r}")
    return value


def _number(value: object, name: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise EventError(f"{name} must be a number in [{low}, {high}], got {value!r}")
    return float(value)


def _repeat(event: dp_accounting.DpEvent, count: int) -> dp_accounting.DpEvent:
    # A logged count of 0 (a round with no step) released nothing; dp_accounting wants count >= 1.
    return dp_accounting.SelfComposedDpEvent(event, count) if count else dp_accounting.NoOpDpEvent()


def to_dp_event(event: Mapping[str, Any]) -> dp_accounting.DpEvent:
    """The logged event (ARCHITECTURE.md JSON, plus dp's "composed") as a dp_accounting event."""
    kind = event.get("type") if isinstance(event, Mapping) else None
    if kind == "poisson_sampled_gaussian":
        q = _number(event.get("sampling_rate"), "sampling_rate", 0.0, 1.0)
        sigma = _number(event.get("noise_multiplier"), "noise_multiplier", 0.0, math.inf)
        count = _positive_int(event.get("count"), "count")
        inner = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma))
        return _repeat(inner, count)
    if kind == "gaussian":
        sigma = _number(event.get("noise_multiplier"), "noise_multiplier", 0.0, math.inf)
        count = _positive_int(event.get("count"), "count")
        return _repeat(dp_accounting.GaussianDpEvent(sigma), count)
    if kind == "composed":
        items = event.get("events")
        if not isinstance(items, list):
            raise EventError("composed event: 'events' must be a list")
        return dp_accounting.ComposedDpEvent([to_dp_event(item) for item in items])
    if kind == "skellam_sum":
        raise EventError("skellam_sum has no dp_accounting event; StreamAccountant prices it")
    raise EventError(f"unknown mechanism event type {kind!r}")


@contextmanager
def _quiet_absl() -> Iterator[None]:
    # dp_accounting warns (via absl) for every fractional order it drops as non-convergent; the
    # dropped orders are the ones Opacus cannot use either, so the warnings are noise here.
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


@functools.lru_cache(maxsize=256)
def _leaf_pld(sampling_rate: float, noise_multiplier: float, count: int) -> pld_lib.PrivacyLossDistribution:
    # Rounds repeat the same (q, σ, steps), so each distinct leaf is built and self-composed once.
    single = pld_lib.from_gaussian_mechanism(
        noise_multiplier,
        sampling_prob=sampling_rate,
        value_discretization_interval=PLD_DISCRETIZATION,
        use_connect_dots=True,
    )
    return single.self_compose(count) if count > 1 else single


@functools.lru_cache(maxsize=256)
def _gaussian_epsilon(sigma: float, delta: float) -> float:
    """Exact ε(δ) of one unsampled Gaussian of noise multiplier σ (sensitivity 1): dp_accounting's
    closed-form δ(ε), inverted by bisection. A PLD of it would need ~1/(σ²·interval) buckets: at
    σ = 0.002 (ε near 1e5) hundreds of millions, minutes for every record of a log."""
    loss = privacy_loss_mechanism.GaussianPrivacyLoss(sigma, sensitivity=1.0)
    high = 1.0
    while loss.get_delta_for_epsilon(high) > delta:
        high *= 2.0
    search = pld_common.BinarySearchParameters(0.0, high, tolerance=1e-9 * high)
    found = pld_common.inverse_monotone_function(loss.get_delta_for_epsilon, delta, search, increasing=False)
    return high if found is None else float(found)  # None only when δ(high) > δ, excluded above


def _pld_leaves(event: dp_accounting.DpEvent, times: int = 1) -> Iterator[tuple[float, float, int]]:
    """(q, σ, count) of every Gaussian leaf inside `event`; q = 1 for an unsampled Gaussian."""
    if isinstance(event, dp_accounting.ComposedDpEvent):
        for item in event.events:
            yield from _pld_leaves(item, times)
    elif isinstance(event, dp_accounting.SelfComposedDpEvent):
        yield from _pld_leaves(event.event, times * event.count)
    elif isinstance(event, dp_accounting.PoissonSampledDpEvent):
        yield event.sampling_probability, event.event.noise_multiplier, times
    elif isinstance(event, dp_accounting.GaussianDpEvent):
        yield 1.0, event.noise_multiplier, times
    elif isinstance(event, dp_accounting.NoOpDpEvent):
        return
    else:
        raise EventError(f"cannot price {type(event).__name__}")


@functools.lru_cache(maxsize=256)
def _event_rdp(event_json: str) -> tuple[float, ...]:
    # RDP adds up under composition, so each distinct logged event is priced once per process; the
    # sampled-Gaussian RDP at fractional orders is the slow part of verification otherwise.
    accountant = RdpAccountant(list(RDP_ORDERS))
    with _quiet_absl():
        accountant.compose(to_dp_event(json.loads(event_json)))
    return tuple(float(value) for value in accountant.rdp)


def _json_leaves(event: Any) -> Iterator[Any]:
    if isinstance(event, Mapping) and event.get("type") == "composed":
        items = event.get("events")
        if not isinstance(items, list):
            raise EventError("composed event: 'events' must be a list")
        for item in items:
            yield from _json_leaves(item)
    else:
        yield event


def _is_skellam(event: Any) -> bool:
    return isinstance(event, Mapping) and event.get("type") == "skellam_sum"


def skellam_parameters(event: Mapping[str, Any]) -> tuple[float, int, float, float, float, str]:
    """(q, count, Δ₁, Δ₂, mu, amplification) of a logged skellam_sum, its sensitivities re-derived
    here; an event without `amplification` was logged before the symmetric bound: "general".

    One patient moves a site's projected sum by at most clip; after scaling by 1/gamma and an
    orthogonal rotation to padded_dim coordinates, randomised rounding coupled through shared
    uniforms moves each coordinate by less than its change plus one: Δ₂ ≤ clip/gamma + √D, plus one
    unit for float64 error; an integer vector has Δ₁ ≤ min(√D·Δ₂, Δ₂²)."""
    q = _number(event.get("sampling_rate"), "sampling_rate", 0.0, 1.0)
    count = _positive_int(event.get("count"), "count")
    clip = _number(event.get("clip"), "clip", 0.0, math.inf)
    gamma = _number(event.get("gamma"), "gamma", 0.0, math.inf)
    mu = _number(event.get("mu_total"), "mu_total", 0.0, math.inf)
    padded = _positive_int(event.get("padded_dim"), "padded_dim")
    dim = _positive_int(event.get("dim"), "dim")
    honest = _positive_int(event.get("honest_min"), "honest_min")
    colluders = _positive_int(event.get("colluders"), "colluders")
    _positive_int(event.get("bits"), "bits")
    amplification = event.get("amplification", "general")
    if amplification not in ("symmetric", "general"):
        raise EventError(
            f"skellam_sum: amplification must be 'symmetric' or 'general', got {amplification!r}"
        )
    if clip <= 0 or gamma <= 0 or mu <= 0 or not math.isfinite(mu):
        raise EventError("skellam_sum: clip, gamma and mu_total must be finite and > 0")
    if padded < max(dim, 1):
        raise EventError(f"skellam_sum: padded_dim {padded} is below dim {dim}")
    if honest <= colluders:
        raise EventError(f"skellam_sum: honest_min {honest} must exceed colluders {colluders}")
    l2 = clip / gamma + math.sqrt(padded) + 1.0
    l1 = min(math.sqrt(padded) * l2, l2**2)
    for name, mine in (("l2_sensitivity", l2), ("l1_sensitivity", l1)):
        logged = _number(event.get(name), name, 0.0, math.inf)
        if not math.isclose(logged, mine, rel_tol=1e-9):
            raise EventError(
                f"skellam_sum: logged {name} {logged!r} does not follow from clip, gamma and padded_dim "
                f"(re-derived {mine!r})"
            )
    return q, count, l1, l2, mu, amplification


def skellam_rdp_bound(alpha: int, l1: float, l2: float, mu: float) -> float:
    """Agarwal, Kairouz & Liu (2021): Rényi divergence of order alpha between the d-dimensional
    Skellam noise of variance mu per coordinate (Poisson(mu/2) − Poisson(mu/2)) shifted by an
    integer vector of norms (l1, l2) and the unshifted noise."""
    leading = alpha * l2 * l2 / (2.0 * mu)
    return leading + min(((2 * alpha - 1) * l2 * l2 + 6 * l1) / (4.0 * mu * mu), 3 * l1 / (2.0 * mu))


@functools.lru_cache(maxsize=256)
def skellam_sampled_rdp(
    q: float, l1: float, l2: float, mu: float, amplification: str = "symmetric"
) -> tuple[float, ...]:
    """One step's RDP at integer orders 2..SKELLAM_MAX_ORDER with patients Poisson-sampled at q,
    capped by the unsampled value.

    "symmetric": log E_P[((1−q) + q·L)^α] / (α−1) expanded binomially, E_P[L^l] bounded by
    e^{(l−1)ε(l)}: an upper bound on the divergence from the sampled to the unsampled output.
    The other direction is no larger because the noise is symmetric about 0, so the unshifted and
    shifted outputs swap under x ↦ v − x (proof: docs/THREAT_MODEL.md). "general": Zhu & Wang
    (ICML 2019), Theorem 6, for any base mechanism, a factor 3 on the terms of order ≥ 3."""
    base = {a: skellam_rdp_bound(a, l1, l2, mu) for a in range(2, SKELLAM_MAX_ORDER + 1)}
    if q == 0.0:
        return tuple(0.0 for _ in base)
    if q == 1.0:
        return tuple(base.values())
    log_q, log_p = math.log(q), math.log1p(-q)
    out = []
    for alpha in range(2, SKELLAM_MAX_ORDER + 1):
        logs = [(alpha - 1) * log_p + math.log(alpha * q - q + 1)]
        for level in range(2, alpha + 1):
            log_choose = math.lgamma(alpha + 1) - math.lgamma(level + 1) - math.lgamma(alpha - level + 1)
            weight = math.log(3.0) if amplification == "general" and level >= 3 else 0.0
            logs.append(
                weight + log_choose + level * log_q + (alpha - level) * log_p + (level - 1) * base[level]
            )
        top = max(logs)
        total = top + math.log(math.fsum(math.exp(x - top) for x in logs))
        out.append(min(total / (alpha - 1), base[alpha]))
    return tuple(out)


def _skellam_curve(event: Mapping[str, Any]) -> np.ndarray:
    """The event's RDP on EXTENDED_ORDERS: count × the sampled bound at integer orders, +inf else."""
    q, count, l1, l2, mu, amplification = skellam_parameters(event)
    if count == 0 or q == 0.0:
        return np.zeros(len(EXTENDED_ORDERS))
    curve = skellam_sampled_rdp(q, l1, l2, mu, amplification)
    return np.array(
        [count * curve[int(a) - 2] if float(a).is_integer() else math.inf for a in EXTENDED_ORDERS]
    )


@functools.lru_cache(maxsize=256)
def _event_rdp_extended(event_json: str) -> tuple[float, ...]:
    accountant = RdpAccountant(list(EXTENDED_ORDERS))
    with _quiet_absl():
        accountant.compose(to_dp_event(json.loads(event_json)))
    return tuple(float(value) for value in accountant.rdp)


class StreamAccountant:
    """Cumulative ε of one (site, population) stream, composed in log order."""

    def __init__(self) -> None:
        self._rdp = np.zeros(len(RDP_ORDERS))
        self._pld: pld_lib.PrivacyLossDistribution | None = None  # the Poisson-sampled leaves
        self._full_precision = 0.0  # Σ count/σ² of the unsampled Gaussian leaves
        self._pld_infinite = False
        self._gaussian: list[str] = []  # the dp_accounting-priced leaves, for the extended orders
        self._skellam = np.zeros(len(EXTENDED_ORDERS))
        self._has_skellam = False

    def compose(self, event: Mapping[str, Any]) -> None:
        leaves = list(_json_leaves(event))
        for leaf in leaves:  # check the whole event before changing the stream
            if _is_skellam(leaf):
                skellam_parameters(leaf)
            else:
                to_dp_event(leaf)
        for leaf in leaves:
            if _is_skellam(leaf):
                self._skellam = self._skellam + _skellam_curve(leaf)
                q, count, *_ = skellam_parameters(leaf)
                self._has_skellam = self._has_skellam or (count > 0 and q > 0)
                continue
            dp_event = to_dp_event(leaf)
            key = json.dumps(leaf, sort_keys=True)
            self._gaussian.append(key)
            self._rdp = self._rdp + np.asarray(_event_rdp(key))
            for q, sigma, count in _pld_leaves(dp_event):
                if count == 0 or q == 0.0:
                    continue  # releases nothing about anyone
                if sigma == 0.0:
                    self._pld_infinite = True
                    continue
                if q == 1.0:
                    # unsampled Gaussians compose to one Gaussian exactly: no leaf, no discretisation
                    self._full_precision += count / sigma**2
                    continue
                pld_leaf = _leaf_pld(q, sigma, count)
                self._pld = pld_leaf if self._pld is None else self._pld.compose(pld_leaf)

    def epsilon_rdp(self, delta: float) -> float:
        if not self._has_skellam:
            with _quiet_absl():
                return float(rdp_privacy_accountant.compute_epsilon(RDP_ORDERS, self._rdp, delta)[0])
        curve = self._skellam.copy()
        for key in self._gaussian:
            curve = curve + np.asarray(_event_rdp_extended(key))
        with _quiet_absl():
            return float(rdp_privacy_accountant.compute_epsilon(EXTENDED_ORDERS, curve, delta)[0])

    def epsilon_pld(self, delta: float) -> float:
        """The PLD ε; nan for a stream holding a Skellam sum (no PLD is built for it: its logged
        PRV ε is None, so nothing is compared)."""
        if self._has_skellam:
            return math.nan
        if self._pld_infinite:
            return math.inf
        if self._full_precision == 0.0:
            return 0.0 if self._pld is None else float(self._pld.get_epsilon_for_delta(delta))
        sigma = 1.0 / math.sqrt(self._full_precision)
        if self._pld is None:
            return _gaussian_epsilon(sigma, delta)
        return float(self._pld.compose(_leaf_pld(1.0, sigma, 1)).get_epsilon_for_delta(delta))


def rdp_matches(logged: float, rederived: float, rel_tol: float = 0.01) -> bool:
    """Opacus' RDP ε and dp_accounting's agree to 1% (same orders, same conversion)."""
    if math.isinf(rederived):
        return False
    return abs(logged - rederived) <= rel_tol * max(abs(rederived), 1e-12) + 1e-9


def prv_matches(logged: float, rederived: float, rel_tol: float = 0.03, abs_tol: float = 0.02) -> bool:
    """Opacus' PRV ε (an upper estimate with its own error bound) against dp_accounting's PLD ε.

    The two numerical methods differ by ~1-1.5% in our tests (PRV adds its eps_error slack), hence a
    looser tolerance than for RDP; it still catches any material under-statement.
    """
    if math.isinf(rederived):
        return False
    return abs(logged - rederived) <= rel_tol * abs(rederived) + abs_tol
