"""Patient profile v_p and the site-local GMM that turns it into q_p.

v_p = [Norm(HMAC(site key, patient id)), age / 100 clipped to [0, 1.2], sex (F 0, M 1, unknown 0.5)].
A bare SHA-256 of a medical record number is a dictionary lookup away from the number, hence the
keyed hash. The GMM's components start from a public, data-independent prior and EM keeps their
order, so component i denotes the same sub-population at every site and the shared projection
W_proj sees comparable inputs everywhere.
"""

from __future__ import annotations

import hashlib
import hmac

import numpy as np
from sklearn.mixture import GaussianMixture

SEX_CODE = {"F": 0.0, "M": 1.0, "U": 0.5}
AGE_MAX = 1.2


def profile_vector(patient_id: str, age: float | None, sex: str, site_key: bytes) -> np.ndarray:
    digest = hmac.new(site_key, patient_id.encode(), hashlib.sha256).digest()
    hashed = int.from_bytes(digest[:8], "big") / 2.0**64
    age_norm = 0.5 if age is None else float(np.clip(age / 100.0, 0.0, AGE_MAX))
    return np.array([hashed, age_norm, SEX_CODE.get(sex, 0.5)], dtype=np.float64)


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

    def fit(self, samples: np.ndarray) -> PatientGMM:
        if len(samples) >= self.n_components:
            self._gmm.fit(samples)
            self.fitted = True
        return self

    def responsibilities(self, profiles: np.ndarray) -> np.ndarray:
        return self._gmm.predict_proba(np.atleast_2d(profiles)).astype(np.float32)
