"""Fit the site's patient GMM, privately when DP is on.

Private path: one Gaussian mechanism on the (age-bin × sex) histogram of train patients; the GMM is
fitted to profiles sampled from the noisy histogram (post-processing). The hashed-id coordinate of
a sampled profile is drawn uniformly: the keyed hash is pseudo-random and data-independent.

The histogram noise comes from a keystream that cannot be replayed, so a site keeps its noisy
histogram (`release_path`, in its private folder) and a restart refits from it. The sampling after
the mechanism is post-processing and stays seeded by the run's public seed: the same kept histogram
then gives the same GMM, so the uploads of a resumed run depend on one release only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from secure_fed.algorithms.fedtar.profile_gmm import PatientGMM
from secure_fed.data.profile import AGE_MAX, SEX_CODE
from secure_fed.dp.events import Gaussian
from secure_fed.dp.histogram import (
    HistogramBins,
    gaussian_histogram,
    histogram_event,
    persisted_gaussian_histogram,
    sample_from_histogram,
)
from secure_fed.dp.keystream import NoiseStream

SAMPLES_FROM_HISTOGRAM = 2000


def _ages_and_sexes(raw_profiles: np.ndarray) -> tuple[list[float], list[str]]:
    code_to_sex = {v: k for k, v in SEX_CODE.items()}
    ages = [float(a) * 100.0 for a in raw_profiles[:, 1]]
    sexes = [code_to_sex.get(float(s), "U") for s in raw_profiles[:, 2]]
    return ages, sexes


def fit_gmm(
    patient_profiles: np.ndarray,
    n_components: int,
    reg_covar: float,
    seed: int,
    histogram_sigma: float | None,
    noise_rng: NoiseStream | None = None,
    release_path: Path | None = None,
) -> tuple[PatientGMM, Gaussian | None]:
    """Returns the fitted GMM and the privacy event of the release it depends on (None = not private).

    The histogram noise must come from `noise_rng`, a keystream under a per-release key the server
    never sees: noise anyone can regenerate from the run's seed protects nothing. With
    `release_path`, the noisy histogram released before (if that file exists) is reused and
    `noise_rng` draws nothing; otherwise the new one is written there before the fit.
    """
    gmm = PatientGMM(n_components, reg_covar, seed)
    if histogram_sigma is None:
        return gmm.fit(patient_profiles), None
    if noise_rng is None:
        raise ValueError("a private GMM fit needs a noise generator keyed by the site's secret")
    rng = np.random.default_rng(seed)  # sampling from the noisy histogram is post-processing
    bins = HistogramBins()
    ages, sexes = _ages_and_sexes(patient_profiles)
    cells = bins.cells_of(ages, sexes)
    if release_path is None:
        noisy = gaussian_histogram(cells, bins.n_cells, histogram_sigma, noise_rng)
    else:
        noisy, _ = persisted_gaussian_histogram(cells, bins.n_cells, histogram_sigma, noise_rng, release_path)
    s_ages, s_sexes = sample_from_histogram(noisy, bins, SAMPLES_FROM_HISTOGRAM, rng)
    samples = np.column_stack(
        [
            rng.random(SAMPLES_FROM_HISTOGRAM),
            np.clip(np.nan_to_num(s_ages, nan=50.0) / 100.0, 0.0, AGE_MAX),
            [SEX_CODE[s] for s in s_sexes],
        ]
    )
    return gmm.fit(samples), histogram_event(histogram_sigma)
