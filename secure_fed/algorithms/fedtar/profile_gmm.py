"""Patient profile v_p and the site-local GMM that turns it into q_p.

v_p (`secure_fed.data.profile.profile_vector`) is the data's encoding of a patient. The GMM's
components start from a public, data-independent prior and EM keeps their
order, so component i denotes the same sub-population at every site and the shared projection
W_proj sees comparable inputs everywhere.
"""

from __future__ import annotations

import logging
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.mixture import GaussianMixture

log = logging.getLogger(__name__)


def prior_components(n_components: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Public prior: components spread over age for each sex, hash coordinate centred.

    Returns (means, variances, weights). Data-independent by construction.
    """
    per_sex = max(1, n_components // 2)
    means = []
    for i in range(n_components):
        sex = 0.0 if i < per_sex else 1.0
        j = i % per_sex
        age = (j + 0.5) / per_sex
        means.append([0.5, age, sex])
    means_arr = np.array(means, dtype=np.float64)
    variances = np.tile(np.array([1.0 / 12.0, (0.5 / per_sex) ** 2, 0.05]), (n_components, 1))
    weights = np.full(n_components, 1.0 / n_components)
    return means_arr, variances, weights


class PatientGMM:
    """Diagonal GMM over v_p; q_p = posterior responsibilities (the hyper-LoRA input)."""

    def __init__(self, n_components: int = 16, reg_covar: float = 1e-6, seed: int = 0) -> None:
        if reg_covar < 1e-6:
            raise ValueError("reg_covar must be ≥ 1e-6: small sites produce singular covariances")
        self.n_components = n_components
        means, variances, weights = prior_components(n_components)
        self._gmm = GaussianMixture(
            n_components=n_components,
            covariance_type="diag",
            reg_covar=reg_covar,
            means_init=means,
            precisions_init=1.0 / variances,
            weights_init=weights,
            max_iter=50,
            random_state=seed,
        )
        # Until fitted, the prior itself defines q_p (used by sites with too few patients).
        self._gmm.means_ = means
        self._gmm.covariances_ = variances
        self._gmm.precisions_cholesky_ = 1.0 / np.sqrt(variances)
        self._gmm.weights_ = weights
        self.fitted = False
        self.converged = False

    def fit(self, samples: np.ndarray) -> PatientGMM:
        if len(samples) >= self.n_components:
            # EM's last iterate is the fit either way; sklearn's warning on the console of every
            # site and sweep cell names nothing an operator can change, so it is kept as a fact
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", ConvergenceWarning)
                self._gmm.fit(samples)
            self.converged = not any(issubclass(w.category, ConvergenceWarning) for w in caught)
            for w in caught:
                if not issubclass(w.category, ConvergenceWarning):
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            if not self.converged:
                log.debug("patient GMM: EM stopped at max_iter = %d before converging", self._gmm.max_iter)
            self.fitted = True
        return self

    def responsibilities(self, profiles: np.ndarray) -> np.ndarray:
        return self._gmm.predict_proba(np.atleast_2d(profiles)).astype(np.float32)
