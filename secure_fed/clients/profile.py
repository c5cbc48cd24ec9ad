"""Fit the site's patient GMM, privately when DP is on.

Private path: one Gaussian mechanism on the (age-bin × sex) histogram of train patients; the GMM is
fitted to profiles sampled from the noisy histogram (post-processing). The hashed-id coordinate of
a sampled profile is drawn uniformly: the keyed hash is pseudo-random and data-independent.
"""

from __future__ import annotations

import numpy as np

from secure_fed.dp.events import Gaussian
from secure_fed.dp.histogram import HistogramBins, gaussian_histogram, histogram_event, sample_from_histogram
from secure_fed.model.profile_gmm import AGE_MAX, SEX_CODE, PatientGMM

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
    noise_rng: np.random.Generator | None = None,
) -> tuple[PatientGMM, Gaussian | None]:
    """Returns the fitted GMM and the privacy event of the release it depends on (None = not private).

    The histogram noise must come from `noise_rng`, keyed by a secret the server never sees: noise
    anyone can regenerate from the run's seed protects nothing.
    """
    gmm = PatientGMM(n_components, reg_covar, seed)
    if histogram_sigma is None:
        return gmm.fit(patient_profiles), None
    if noise_rng is None:
        raise ValueError("a private GMM fit needs a noise generator keyed by the site's secret")
    rng = np.random.default_rng(seed)  # sampling from the noisy histogram is post-processing
    bins = HistogramBins()
    ages, sexes = _ages_and_sexes(patient_profiles)
    noisy = gaussian_histogram(bins.cells_of(ages, sexes), bins.n_cells, histogram_sigma, noise_rng)
    s_ages, s_sexes = sample_from_histogram(noisy, bins, SAMPLES_FROM_HISTOGRAM, rng)
    samples = np.column_stack(
        [
            rng.random(SAMPLES_FROM_HISTOGRAM),
            np.clip(np.nan_to_num(s_ages, nan=50.0) / 100.0, 0.0, AGE_MAX),
            [SEX_CODE[s] for s in s_sexes],
        ]
    )
    return gmm.fit(samples), histogram_event(histogram_sigma)
