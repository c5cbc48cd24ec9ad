"""Canary lower bounds of a site's two one-shot Gaussian releases: the α scalars and the GMM histogram.

Both are single releases, so the measurement runs each mechanism once per canary (m independent
releases, canary j present in release j with probability ½ and absent from the others). The
one-run bound applies unchanged: every canary still influences one (ε, δ)-DP mechanism, and the
canaries' bits are independent. Each call goes through the very function the site releases with
(`clip_and_noise_sum`, `gaussian_histogram`), on a fixed dataset the canary holder knows (white box: a
DP guarantee holds for every dataset), with noise from a keystream as in a real release; a few
milliseconds per canary.

Canaries: for the α scalars, a per-patient T-vector of norm 2·C_α along a random direction (so the
release's clipping must cut it to C_α: an unclipped canary would be caught); for the histogram, a
patient in a random cell. Score: the release minus the known sum of the other patients, projected
on the canary's direction (the Gaussian likelihood ratio is monotone in it). The stated ε is the
exact (analytic Gaussian) ε of one release at the site's δ.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from secure_fed.dp.accountants import prv_epsilon
from secure_fed.dp.canaries import BoundOutcome, evaluate
from secure_fed.dp.clipped_sum import clip_and_noise_sum, clip_rows
from secure_fed.dp.events import Gaussian
from secure_fed.dp.histogram import gaussian_histogram, histogram_counts
from secure_fed.dp.keystream import NoiseStream
from secure_fed.dp.lower_bound import DEFAULT_CONFIDENCE


def single_release_epsilon(sigma: float, delta: float) -> float:
    value = prv_epsilon(Gaussian(noise_multiplier=sigma, count=1), delta).epsilon
    assert value is not None  # a plain Gaussian is always priced exactly
    return value


def bound_clipped_sum(
    m: int,
    guesses: int,
    clip: float,
    sigma: float,
    dim: int,
    delta: float,
    rng: np.random.Generator,
    noise: NoiseStream,
    others: int = 16,
    confidence: float = DEFAULT_CONFIDENCE,
    release: Callable[[np.ndarray], np.ndarray] | None = None,
) -> BoundOutcome:
    """m releases of `clip_and_noise_sum` (the α scalars), canary j in release j or not.
    `release` (rows → released vector) replaces it where the released view is made otherwise, as
    a sum of noise shares; the canaries, data and score stay these."""
    included = rng.random(m) < 0.5
    data = rng.normal(size=(others, dim)) * clip  # the other patients, known to the canary holder
    known = clip_rows(data, clip).sum(axis=0)
    directions = rng.normal(size=(m, dim))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    scores = np.empty(m)
    for j in range(m):
        rows = np.vstack([data, 2 * clip * directions[j]]) if included[j] else data
        released = clip_and_noise_sum(rows, clip, sigma, noise) if release is None else release(rows)
        scores[j] = float((released - known) @ directions[j])
    return evaluate(scores, included, guesses, delta, confidence)


def bound_histogram(
    m: int,
    guesses: int,
    n_cells: int,
    sigma: float,
    delta: float,
    rng: np.random.Generator,
    noise: NoiseStream,
    others: int = 36,
    confidence: float = DEFAULT_CONFIDENCE,
) -> BoundOutcome:
    """m releases of `gaussian_histogram` (the GMM's histogram), canary j in release j or not."""
    included = rng.random(m) < 0.5
    cells = rng.integers(0, n_cells, size=others)
    known = histogram_counts(cells, n_cells)
    canary_cells = rng.integers(0, n_cells, size=m)
    scores = np.empty(m)
    for j in range(m):
        patients = np.append(cells, canary_cells[j]) if included[j] else cells
        released = gaussian_histogram(patients, n_cells, sigma, noise)
        scores[j] = float(released[canary_cells[j]] - known[canary_cells[j]])
    return evaluate(scores, included, guesses, delta, confidence)
