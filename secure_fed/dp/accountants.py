"""Price a sequence of privacy events in (ε, δ): RDP (reference) and PRV (tight).

`RdpAccountant` and `PrvAccountant` are the two behind one `Accountant` interface; a config or
privacy record names one by its string, `accountant_named` finds it. The functions below are the
math they call.

A thin façade over Opacus' analyses: events are reduced to (q, σ, count) triples, with a
full-population Gaussian being q = 1. The cost of a composition does not depend on its order, so
identical (q, σ) pairs are merged before pricing; a heterogeneous schedule simply yields several
triples.
"""

from __future__ import annotations

import functools
import math
import warnings
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar, Final

import numpy as np

from secure_fed.dp import analytic_gaussian
from secure_fed.dp.events import Event, PoissonSampledGaussian, SkellamSum, leaves
from secure_fed.dp.skellam import ORDERS, skellam_subsampled_curve

# Opacus is imported where a value is priced, not here: importing it pulls in torch.distributed and
# scipy.stats (~1.6 s of CPU), which every process importing the package paid, a hospital node's
# per-message process and `secure-fed audit verify` of a run without DP included.
# Opacus' RDPAccountant.DEFAULT_ALPHAS, pinned against it by tests/dp/test_accountants.py.
DEFAULT_ORDERS: tuple[float, ...] = tuple(
    [1 + x / 10.0 for x in range(1, 100)] + [float(a) for a in range(12, 64)]
)
# A history with a Skellam sum is priced on Opacus' orders plus every integer order up to 256 (the
# Skellam amplification bound exists at integer orders only; it is +inf at the fractional ones).
SKELLAM_ORDERS: tuple[float, ...] = tuple(sorted(set(DEFAULT_ORDERS) | {float(a) for a in range(2, 257)}))
PRV_EPS_ERROR = 0.01
# The discretised PRV mesh grows with the number of composed steps; past this many points the FFT
# needs gigabytes, so we report "not computable" instead of exhausting a hospital's machine.
PRV_MAX_DOMAIN_POINTS = 20_000_000


def _check_delta(delta: float) -> None:
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta}")


def schedule(events: Event | Iterable[Event]) -> list[tuple[float, float, int]]:
    """(sampling_rate, noise_multiplier, count) per distinct mechanism, first-seen order.

    Steps that cannot touch anyone (q = 0 or count = 0) are dropped.
    """
    merged: dict[tuple[float, float], int] = {}
    for event in leaves(events):
        if isinstance(event, SkellamSum):
            raise ValueError("a Skellam sum has no (q, sigma) schedule; price it with epsilon_rdp")
        rate = event.sampling_rate if isinstance(event, PoissonSampledGaussian) else 1.0
        if rate == 0 or event.count == 0:
            continue
        key = (rate, event.noise_multiplier)
        merged[key] = merged.get(key, 0) + event.count
    return [(rate, sigma, count) for (rate, sigma), count in merged.items()]


@functools.lru_cache(maxsize=1024)
def _rdp_one_step(rate: float, sigma: float, orders: tuple[float, ...]) -> np.ndarray:
    from opacus.accountants.analysis import rdp as rdp_analysis

    curve = np.asarray(rdp_analysis.compute_rdp(q=rate, noise_multiplier=sigma, steps=1, orders=list(orders)))
    curve.setflags(write=False)  # shared by the cache
    return curve


def _split(events: Event | Iterable[Event]) -> tuple[list[Event], list[SkellamSum]]:
    gaussian: list[Event] = []
    skellam: list[SkellamSum] = []
    for event in leaves(events):
        (skellam if isinstance(event, SkellamSum) else gaussian).append(event)
    return gaussian, skellam


def _skellam_one_step(event: SkellamSum, orders: tuple[float, ...]) -> np.ndarray:
    curve = skellam_subsampled_curve(
        event.sampling_rate, event.l1_sensitivity, event.l2_sensitivity, event.mu_total, event.amplification
    )
    at = dict(zip(ORDERS, curve, strict=True))
    # RDP at a fractional order is not bounded by the integer-order analysis: +inf drops that order
    return np.array([at.get(int(a), math.inf) if float(a).is_integer() else math.inf for a in orders])


def rdp_curve(events: Event | Iterable[Event], orders: Sequence[float] = DEFAULT_ORDERS) -> np.ndarray:
    """RDP ε(α) of the composition at each order (additive over events, linear in the count)."""
    orders = tuple(float(order) for order in orders)
    gaussian, skellam = _split(events)
    total = np.zeros(len(orders))
    for rate, sigma, count in schedule(gaussian):
        total = total + _rdp_one_step(rate, sigma, orders) * count
    # a ledger holds one event per round: identical steps are merged, as schedule() merges Gaussians
    merged: dict[tuple[float, float, float, float, str], tuple[SkellamSum, int]] = {}
    for event in skellam:
        if event.count and event.sampling_rate:
            key = (
                event.sampling_rate,
                event.l1_sensitivity,
                event.l2_sensitivity,
                event.mu_total,
                event.amplification,
            )
            first, count = merged.get(key, (event, 0))
            merged[key] = (first, count + event.count)
    for event, count in merged.values():
        total = total + _skellam_one_step(event, orders) * count
    return total


def epsilon_rdp(
    events: Event | Iterable[Event], delta: float, orders: Sequence[float] = DEFAULT_ORDERS
) -> float:
    """ε at `delta` via Opacus' RDP analysis and its RDP→(ε, δ) conversion (Balle et al. 2020).

    A history holding a Skellam sum is priced on SKELLAM_ORDERS when `orders` is the default."""
    _check_delta(delta)
    events = list(leaves(events))  # a generator would be spent by the first pass
    if orders is DEFAULT_ORDERS and _split(events)[1]:
        orders = SKELLAM_ORDERS
    curve = rdp_curve(events, orders)
    if not np.any(curve):
        return 0.0
    if np.all(np.isinf(curve)):
        return math.inf
    with warnings.catch_warnings():
        # The "optimal order is the smallest/largest alpha" warning only says the bound could be
        # tighter with more orders; the value is still a valid upper bound.
        warnings.simplefilter("ignore", UserWarning)
        from opacus.accountants.analysis import rdp as rdp_analysis

        eps, _ = rdp_analysis.get_privacy_spent(orders=list(orders), rdp=curve, delta=delta)
    return max(0.0, float(eps))


@dataclass(frozen=True)
class PrvResult:
    """A tight ε, or None with the reason it could not be computed."""

    epsilon: float | None
    method: str  # "prv", "analytic_gaussian", "trivial" or "none"
    reason: str | None = None


def prv_epsilon(
    events: Event | Iterable[Event],
    delta: float,
    eps_error: float = PRV_EPS_ERROR,
    max_domain_points: int = PRV_MAX_DOMAIN_POINTS,
) -> PrvResult:
    """Tight ε: exact for Gaussian-only compositions, else Opacus' PRV accountant (upper bound).

    The PRV value is the accountant's upper estimate (estimate + eps_error), as in Opacus.
    """
    _check_delta(delta)
    gaussian, skellam = _split(events)
    if any(e.count and e.sampling_rate for e in skellam):
        return PrvResult(None, "none", "no PRV accountant for the Skellam sum; use the RDP value")
    triples = schedule(gaussian)
    if not triples:
        return PrvResult(0.0, "trivial")
    if any(sigma == 0 for _, sigma, _ in triples):
        return PrvResult(math.inf, "trivial", "a release without noise has no privacy guarantee")
    if all(rate == 1.0 for rate, _, _ in triples):
        mu = analytic_gaussian.composed_mu([(sigma, count) for _, sigma, count in triples])
        return PrvResult(analytic_gaussian.epsilon_for_delta(mu, delta), "analytic_gaussian")
    return _opacus_prv(tuple(triples), delta, eps_error, max_domain_points)


# A ledger re-prices the same (growing) schedule for every report and budget check; PRV pricing
# takes a fraction of a second per distinct (q, σ), so results are kept per schedule.
@functools.lru_cache(maxsize=256)
def _opacus_prv(
    triples: tuple[tuple[float, float, int], ...], delta: float, eps_error: float, max_domain_points: int
) -> PrvResult:
    # Same construction as opacus.accountants.PRVAccountant._get_dprv, unrolled so the domain size
    # can be checked before allocating it and every failure becomes a reason, not a wrong number.
    from opacus.accountants.analysis.prv import (
        Domain,
        PoissonSubsampledGaussianPRV,
        TruncatedPrivacyRandomVariable,
        compose_heterogeneous,
        compute_safe_domain_size,
        discretize,
    )

    delta_error = delta / 1000
    counts = [count for _, _, count in triples]
    prvs = [PoissonSubsampledGaussianPRV(rate, sigma) for rate, sigma, _ in triples]
    try:
        # q = 1 (a Gaussian inside a mixed composition) takes log(0) = -inf in Opacus' support
        # test; the resulting comparisons are correct, so the warnings are noise.
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            half_width = compute_safe_domain_size(
                prvs=prvs, max_self_compositions=counts, eps_error=eps_error, delta_error=delta_error
            )
            mesh = eps_error / math.sqrt(sum(counts) * math.log(12 / delta_error) / 2)
            points = 2 * half_width / mesh
            if not math.isfinite(points) or points > max_domain_points:
                return PrvResult(
                    None,
                    "none",
                    f"PRV discretisation needs {points:.3g} points (> {max_domain_points}); "
                    "use the RDP value",
                )
            domain = Domain.create_aligned(-half_width, half_width, mesh)
            dprvs = [
                discretize(TruncatedPrivacyRandomVariable(prv, domain.t_min, domain.t_max), domain)
                for prv in prvs
            ]
            composed = compose_heterogeneous(dprvs=dprvs, num_self_compositions=counts)
            _, _, eps_upper = composed.compute_epsilon(delta, delta_error, eps_error)
    except (ValueError, RuntimeError, FloatingPointError, OverflowError, MemoryError) as error:
        return PrvResult(None, "none", f"PRV accountant failed: {type(error).__name__}: {error}")
    eps_upper = float(eps_upper)
    if not math.isfinite(eps_upper):
        return PrvResult(None, "none", f"PRV accountant returned a non-finite epsilon ({eps_upper})")
    return PrvResult(max(0.0, eps_upper), "prv")


def epsilon_prv(events: Event | Iterable[Event], delta: float) -> float | None:
    """`prv_epsilon(...).epsilon`: the tight ε, or None when it cannot be computed."""
    return prv_epsilon(events, delta).epsilon


class Accountant(ABC):
    """How a history of events is counted in (ε, δ). The events say what was released
    (dp/events.py); an accountant only prices them, so one logged history can be re-priced by any.

    `name` is the string a config (`dp.accountant`) and a privacy record carry; `label` the one
    people read."""

    name: ClassVar[str]
    label: ClassVar[str]
    # whether it prices a distributed Skellam sum (dp.noise = 'distributed' needs one that does)
    prices_skellam: ClassVar[bool]

    @abstractmethod
    def epsilon(self, events: Event | Iterable[Event], delta: float) -> float | None:
        """ε at `delta`, or None where this accountant cannot price the history."""

    def bound(self, events: Sequence[Event], delta: float) -> float:
        """ε at `delta` by this accountant, or by RDP where it cannot price the history: RDP is a
        valid, looser bound, so a plan solved with it can never be refused by a tighter one."""
        value = self.epsilon(events, delta)
        return value if value is not None else RDP.bound(events, delta)

    def pick(self, priced: Mapping[str, float | None]) -> tuple[float | None, Accountant]:
        """This accountant's ε in a priced record ({name: ε or None}, as `PrivacyLedger.price`
        writes it) and whose it is: RDP's where this one had none."""
        value = priced.get(self.name)
        return (value, self) if value is not None else (priced.get(RDP.name), RDP)


class RdpAccountant(Accountant):
    """Rényi DP via Opacus' analysis: prices every event, a Skellam sum included (upper bound)."""

    name = "rdp"
    label = "RDP"
    prices_skellam = True

    def epsilon(self, events: Event | Iterable[Event], delta: float) -> float:
        return epsilon_rdp(events, delta)

    def bound(self, events: Sequence[Event], delta: float) -> float:
        return epsilon_rdp(events, delta)


class PrvAccountant(Accountant):
    """The tight privacy-random-variable value (`prv_epsilon`); none for a Skellam sum."""

    name = "prv"
    label = "PRV"
    prices_skellam = False

    def epsilon(self, events: Event | Iterable[Event], delta: float) -> float | None:
        return prv_epsilon(events, delta).epsilon

    def result(self, events: Event | Iterable[Event], delta: float) -> PrvResult:
        """The ε with how it was computed, or the reason it could not be."""
        return prv_epsilon(events, delta)


RDP: Final = RdpAccountant()
PRV: Final = PrvAccountant()
# every accountant by the string a config or a privacy record names it with, RDP (the default) first
ACCOUNTANTS: Final[Mapping[str, Accountant]] = MappingProxyType({a.name: a for a in (RDP, PRV)})


def accountant_named(name: str | Accountant) -> Accountant:
    """The accountant a config or log string names (an `Accountant` is returned as it is)."""
    if isinstance(name, Accountant):
        return name
    try:
        return ACCOUNTANTS[name]
    except (KeyError, TypeError):
        choices = ", ".join(repr(key) for key in ACCOUNTANTS)
        raise ValueError(f"{name!r} is not an accountant; set one of {choices}") from None
