"""A patient's profile v_p, as the data encodes it for the model.

v_p = [Norm(HMAC(site key, patient id)), age / 100 clipped to [0, 1.2], sex (F 0, M 1, unknown 0.5)].
A bare SHA-256 of a medical record number is a dictionary lookup away from the number, hence the
keyed hash.
"""

from __future__ import annotations

import hashlib
import hmac

import numpy as np

SEX_CODE = {"F": 0.0, "M": 1.0, "U": 0.5}
AGE_MAX = 1.2


def profile_vector(patient_id: str, age: float | None, sex: str, site_key: bytes) -> np.ndarray:
    digest = hmac.new(site_key, patient_id.encode(), hashlib.sha256).digest()
    hashed = int.from_bytes(digest[:8], "big") / 2.0**64
    age_norm = 0.5 if age is None else float(np.clip(age / 100.0, 0.0, AGE_MAX))
    return np.array([hashed, age_norm, SEX_CODE.get(sex, 0.5)], dtype=np.float64)
