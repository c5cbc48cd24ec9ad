"""White-box gradient canaries for a one-run lower bound of patient-level DP-SGD (`PatientDPSGD`).

Choice of canary: a *gradient* canary, the strongest for DP-SGD (Steinke, Nasr, Jagielski 2023,
§6; Nasr et al. 2021): an extra "patient" whose per-step gradient is not computed from data but
fixed in advance, a vector along its own random direction. Its norm is 4·C, so that the clipping
must cut it to a quarter: a canary of norm C would pass a mechanism that skips or loosens clipping
unseen, while under correct clipping both contribute exactly C. Each of the m canaries is included
independently with probability ½ (the secret bits); an included canary is then Poisson-sampled
at every step with the real patients' rate q, and enters `PatientDPSGD.privatize` through its
`injected` hook, which clips, sums and noises it with the real patients in the one code path that
training uses.

Directions: a random unit vector with ±1/√s on s random coordinates of the joint trainable vector
(all copies' parameters side by side). For s ≪ D two canaries rarely share a coordinate, the
m × s table stays small at any model size (D = 199k for FedTAR's five tiny copies), and a real
patient's gradient projects onto it as onto a dense random direction (variance ‖g‖²/D).

Adversary view, and why: every step's noisy released sum (the `.grad` DP-SGD sets, before the
optimiser). Per-step accounting bounds exactly that view, so it is the strongest view under which
the stated ε must still hold; the released per-round updates are its post-processing and can
only do worse. Score of a canary: with x_t its projection at step t in units of its own
contribution (C / expected batch size), the log-likelihood ratio Σ_t log(1 − q + q·e^{(x_t − ½)/σ²})
of "sampled with probability q" against "absent" under N(0, σ²) noise — the Neyman–Pearson test of
each step, summed over the steps (with σ = 0: Σ_t x_t). The scorer uses the *stated* σ: it is the
canary holder's belief, and a mechanism that adds less noise than stated is what the measurement must catch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from secure_fed.dp.dpsgd import PatientDPSGD, poisson_sample
from secure_fed.dp.keystream import NoiseStream
from secure_fed.dp.lower_bound import (
    DEFAULT_CONFIDENCE,
    count_correct,
    epsilon_ceiling,
    epsilon_lower_bound,
    guess,
)

DEFAULT_SUPPORT = 256


@dataclass
class GradientCanaries:
    """m canaries over a joint trainable vector of `sizes` (one entry per module, P_t each)."""

    sizes: list[int]
    clip: float
    coords: np.ndarray  # (m, s) coordinates of each canary's support in the joint vector
    values: np.ndarray  # (m, s) ±1/√s: unit directions
    included: np.ndarray  # (m,) the secret bits
    norm_factor: float = 4.0  # a canary's gradient has norm norm_factor·C before clipping

    @property
    def m(self) -> int:
        return len(self.included)

    @classmethod
    def draw(
        cls,
        m: int,
        sizes: Sequence[int],
        clip: float,
        rng: np.random.Generator,
        support: int = DEFAULT_SUPPORT,
        norm_factor: float = 4.0,
    ) -> GradientCanaries:
        """Directions and secret bits from the canary holder's own generator (never the mechanism's)."""
        total = int(sum(sizes))
        if m < 1:
            raise ValueError(f"need at least one canary, got {m}")
        s = min(support, total)
        coords = np.stack([rng.choice(total, size=s, replace=False) for _ in range(m)])
        values = rng.choice([-1.0, 1.0], size=(m, s)) / math.sqrt(s)
        return cls(list(map(int, sizes)), float(clip), coords, values, rng.random(m) < 0.5, norm_factor)

    def blocks(self, chosen: np.ndarray) -> list[torch.Tensor | None]:
        """The gradients (norm norm_factor·C each) of canaries `chosen`, split per module as
        `injected` wants."""
        total = sum(self.sizes)
        dense = torch.zeros((len(chosen), total), dtype=torch.float32)
        if len(chosen):
            rows = torch.arange(len(chosen)).repeat_interleave(self.coords.shape[1])
            dense[rows, torch.from_numpy(self.coords[chosen].reshape(-1))] = torch.from_numpy(
                (self.norm_factor * self.clip * self.values[chosen]).reshape(-1).astype(np.float32)
            )
        return list(torch.split(dense, self.sizes, dim=1))

    def project(self, released: torch.Tensor) -> np.ndarray:
        """⟨released, u_j⟩ for every canary j (released: the joint D-vector of one step)."""
        flat = released.detach().to(torch.float64).cpu().numpy()
        return (flat[self.coords] * self.values).sum(axis=1)


@dataclass
class CanaryInjector:
    """The per-step side of a measurement: picks this step's canaries, records what the step released."""

    canaries: GradientCanaries
    sampling_rate: float
    expected_batch_size: float
    noise: NoiseStream
    projections: list[np.ndarray] = field(default_factory=list)  # one (m,) row per step
    sampled: int = 0  # canary inclusions over all steps (a sanity figure, never released)
    # this step's canaries when the site's own patient sampler drew them beside the patients
    # (`sample_with`); None: the injector Poisson-samples the included canaries itself
    _chosen: np.ndarray | None = field(default=None, repr=False)

    def attach(self, engine: PatientDPSGD) -> None:
        sizes = [sum(p.numel() for p in params) for params in engine.trainable_parameters]
        if sizes != self.canaries.sizes:
            raise ValueError(f"canaries were drawn for modules of sizes {self.canaries.sizes}, not {sizes}")
        self._engine = engine
        engine.injected = self._step

    def sample_with(self, sampler: Callable[[int], torch.Tensor], n_patients: int) -> torch.Tensor:
        """One draw of the site's own patient sampler over the patients and the included canaries
        together (canary k is unit n_patients + k), as if the canaries were patients of the site:
        returns the patients drawn and keeps the canaries drawn for this step's `injected`."""
        members = np.flatnonzero(self.canaries.included)
        drawn = sampler(n_patients + len(members))
        self._chosen = members[(drawn[drawn >= n_patients] - n_patients).numpy()]
        return drawn[drawn < n_patients]

    def _step(self) -> list[torch.Tensor | None]:
        if self._chosen is not None:
            chosen, self._chosen = self._chosen, None
        else:
            members = np.flatnonzero(self.canaries.included)
            # Poisson sampling of the included canaries, from the mechanism's own keystream, as
            # for every patient
            chosen = members[poisson_sample(len(members), self.sampling_rate, self.noise).numpy()]
        self.sampled += len(chosen)
        return self.canaries.blocks(chosen)

    def observe(self) -> None:
        """Record the step just privatised: the released `.grad` of every trainable parameter."""
        parts = [
            p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel())
            for params in self._engine.trainable_parameters
            for p in params
        ]
        released = torch.cat([part.cpu() for part in parts])
        # in units of one canary's contribution after correct clipping (C / expected batch size)
        self.projections.append(
            self.canaries.project(released) * self.expected_batch_size / self.canaries.clip
        )


def likelihood_scores(projections: np.ndarray, sampling_rate: float, noise_multiplier: float) -> np.ndarray:
    """Σ_t log(1 − q + q·exp((x_t − ½)/σ²)) per canary; Σ_t x_t when σ = 0. `projections`: (T, m)."""
    x = np.asarray(projections, dtype=np.float64).reshape(-1, projections.shape[-1])
    q, sigma = sampling_rate, noise_multiplier
    if sigma == 0 or q >= 1:
        # no noise: the sum already separates; q = 1: the ratio is monotone in x_t, so the sum is optimal
        return x.sum(axis=0)
    return np.logaddexp(math.log1p(-q), math.log(q) + (x - 0.5) / sigma**2).sum(axis=0)


@dataclass(frozen=True)
class BoundOutcome:
    """What the `empirical_audit` record logs: enough for anyone to re-derive ε̂."""

    canaries: int
    guesses: int
    guessed_in: int
    guessed_out: int
    correct: int
    delta: float
    confidence: float
    epsilon_hat: float
    epsilon_hat_max: float  # the ceiling: ε̂ had every guess been right

    def to_json(self) -> dict[str, float | int]:
        return {
            "canaries": self.canaries,
            "guesses": self.guesses,
            "guessed_in": self.guessed_in,
            "guessed_out": self.guessed_out,
            "correct": self.correct,
            "delta": self.delta,
            "confidence": self.confidence,
            "epsilon_hat": self.epsilon_hat,
            "epsilon_hat_max": self.epsilon_hat_max,
        }


def default_guesses(m: int) -> int:
    """How many canaries to guess about when not told: a tenth of them (half "in", half "out"), at
    least 2. Fixed before the run, from pilot runs with other canary seeds (docs/RESULTS.md):
    choosing the count after seeing this run's scores would void the confidence level."""
    return min(m, max(2, 2 * round(m / 20)))


# The default M leaves the ceiling this far above ε: a measurement whose ceiling only just clears ε
# flags nothing short of a perfectly separating leak.
CEILING_MARGIN = 1.1
MIN_CANARIES, MAX_CANARIES, CANARY_STEP = 1000, 20_000, 500


def default_canaries(
    epsilon: float, delta: float, confidence: float = DEFAULT_CONFIDENCE, margin: float = CEILING_MARGIN
) -> int | None:
    """The smallest M (from 1,000 in steps of 500) whose ceiling ε̂_max with `default_guesses(M)`
    is at least margin·ε; None when even MAX_CANARIES cannot reach it (the ceiling grows only
    with the log of the guesses: ε = 4 needs about 3,000 canaries, ε = 8 some 90,000), so any
    measurement at that ε can only be inconclusive."""

    def clears(m: int) -> bool:
        return epsilon_ceiling(m, default_guesses(m), delta, confidence) >= margin * epsilon

    if not clears(MAX_CANARIES):  # the ceiling rises with M: if the cap cannot, none can
        return None
    return next(m for m in range(MIN_CANARIES, MAX_CANARIES + 1, CANARY_STEP) if clears(m))


def evaluate(
    scores: np.ndarray,
    included: np.ndarray,
    guesses: int,
    delta: float,
    confidence: float = DEFAULT_CONFIDENCE,
    guess_out: bool = True,
) -> BoundOutcome:
    """Guess "in" for the top ⌈r/2⌉ scores and "out" for the bottom ⌊r/2⌋, count, bound.

    `guess_out` False: all r guesses "in", for the top r scores. Under Poisson sampling an
    included canary may never be drawn (probability (1 − q)^T over T steps) and then looks exactly
    like an excluded one, so "out" guesses can be wrong even when the mechanism adds no noise at
    all, and the measurement then cannot reach its ceiling; a sampled canary's "in" can be certain."""
    k_in = guesses if not guess_out else (guesses + 1) // 2
    k_out = guesses - k_in
    guessed_in, guessed_out = guess(scores, k_in, k_out)
    correct = count_correct(included, guessed_in, guessed_out)
    m = len(included)
    return BoundOutcome(
        canaries=m,
        guesses=guesses,
        guessed_in=k_in,
        guessed_out=k_out,
        correct=correct,
        delta=delta,
        confidence=confidence,
        epsilon_hat=epsilon_lower_bound(m, guesses, correct, delta, confidence),
        epsilon_hat_max=epsilon_ceiling(m, guesses, delta, confidence),
    )
