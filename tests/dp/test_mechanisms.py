import hashlib

import numpy as np
import pytest

from secure_fed.dp.clipped_sum import clip_and_noise_sum, clip_rows, clipped_sum_event
from secure_fed.dp.events import Gaussian
from secure_fed.dp.histogram import (
    HistogramBins,
    gaussian_histogram,
    histogram_counts,
    histogram_event,
    sample_from_histogram,
)
from secure_fed.dp.keystream import NoiseStream

BINS = HistogramBins(age_edges=(0.0, 40.0, 60.0, 120.0))


def noise(seed: int) -> NoiseStream:
    """A keystream under a fixed test key (DP noise never comes from a seeded generator)."""
    return NoiseStream(hashlib.sha256(f"mechanism test {seed}".encode()).digest())


def test_each_patient_lands_in_exactly_one_cell() -> None:
    cells = BINS.cells_of([10.0, 45.0, 59.9, 60.0, 130.0, None, -3.0], ["M", "F", "U", "M", "F", "U", "M"])
    # 3 finite age bins + unknown, × (M, F, U); ages outside the edges are clamped into the end bins.
    assert cells.tolist() == [0, 4, 5, 6, 7, 11, 0]
    assert BINS.n_cells == 12
    with pytest.raises(ValueError, match="sex"):
        BINS.cell_of(30.0, "X")


def test_histogram_sensitivity_is_one_patient_one_unit() -> None:
    rng = np.random.default_rng(0)
    cells = rng.integers(0, BINS.n_cells, size=200)
    with_patient = histogram_counts(cells, BINS.n_cells)
    without = histogram_counts(cells[1:], BINS.n_cells)
    assert np.linalg.norm(with_patient - without) == 1.0
    assert histogram_event(2.0) == Gaussian(2.0, 1)


def test_gaussian_histogram_adds_noise_of_std_sigma() -> None:
    cells = np.array([0, 0, 3])
    draws = np.stack([gaussian_histogram(cells, BINS.n_cells, 3.0, noise(seed)) for seed in range(2000)])
    assert np.allclose(draws.mean(axis=0), histogram_counts(cells, BINS.n_cells), atol=0.3)
    assert draws.std() == pytest.approx(3.0, rel=0.03)
    noiseless = gaussian_histogram(cells, BINS.n_cells, 0.0, noise(0))
    assert noiseless.tolist() == histogram_counts(cells, BINS.n_cells).tolist()


def test_sampling_clamps_negative_counts_and_stays_in_bins() -> None:
    noisy = np.zeros(BINS.n_cells)
    noisy[4] = 30.0  # 40–60, F
    noisy[11] = 10.0  # unknown age, U
    noisy[0] = -50.0  # negative noise: must never be sampled
    ages, sexes = sample_from_histogram(noisy, BINS, 4000, np.random.default_rng(1))
    unknown = np.isnan(ages)
    assert set(sexes[~unknown]) == {"F"} and set(sexes[unknown]) == {"U"}
    assert np.all((ages[~unknown] >= 40.0) & (ages[~unknown] < 60.0))
    assert unknown.mean() == pytest.approx(0.25, abs=0.03)
    all_negative = sample_from_histogram(-np.ones(BINS.n_cells), BINS, 600, np.random.default_rng(2))
    assert len(set(all_negative[1])) == 3  # falls back to the data-independent uniform


def test_clip_rows_bounds_each_patient() -> None:
    vectors = np.array([[3.0, 4.0, 0.0, 0.0, 0.0], [0.1, 0.0, 0.0, 0.0, 0.2], [0.0] * 5])
    clipped = clip_rows(vectors, 1.0)
    assert np.allclose(clipped[0], [0.6, 0.8, 0, 0, 0])
    assert np.array_equal(clipped[1:], vectors[1:])


def test_clipped_sum_moves_at_most_c_per_patient_and_noise_is_sigma_c() -> None:
    vectors = np.random.default_rng(3).normal(0, 5, size=(50, 5))
    rest = clip_and_noise_sum(vectors[1:], 0.5, 0.0, noise(3))
    full = clip_and_noise_sum(vectors, 0.5, 0.0, noise(4))
    assert np.linalg.norm(full - rest) == pytest.approx(0.5)
    released = np.stack([clip_and_noise_sum(np.zeros((0, 5)), 0.5, 2.0, noise(s)) for s in range(2000)])
    assert released.std() == pytest.approx(1.0, rel=0.03)
    assert clipped_sum_event(2.0) == Gaussian(2.0, 1)
