"""Controls of the α-scalar and GMM-histogram audits: each release function, its noise as stated
or cut by a planted bug (10× less, or none), against the exact ε of one release."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from secure_fed.dp.calibration import calibrate_gaussian
from secure_fed.dp.keystream import NoiseStream
from secure_fed.dp.release_audits import audit_clipped_sum, audit_histogram, single_release_epsilon

DELTA, M, GUESSES = 1e-5, 2000, 200
SIGMA = calibrate_gaussian(2.0, DELTA)  # one release at ε ≈ 2


def _stream(label: str) -> NoiseStream:
    return NoiseStream(hashlib.sha256(f"release audit {label}".encode()).digest())


def _alpha(factor: float) -> float:
    rng = np.random.default_rng(3)
    return audit_clipped_sum(
        M, GUESSES, 1.0, SIGMA * factor, 5, DELTA, rng, _stream(f"a{factor}")
    ).epsilon_hat


def _histogram(factor: float) -> float:
    rng = np.random.default_rng(4)
    return audit_histogram(M, GUESSES, 27, SIGMA * factor, DELTA, rng, _stream(f"h{factor}")).epsilon_hat


@pytest.mark.parametrize("audit", [_alpha, _histogram], ids=["alpha_scalars", "gmm_histogram"])
def test_real_release_stays_below_and_a_noise_bug_exceeds_stated_epsilon(audit) -> None:
    stated = single_release_epsilon(SIGMA, DELTA)
    assert stated == pytest.approx(2.0, abs=0.01)
    real = audit(1.0)
    assert 0 < real <= stated  # beats chance, and stays under the proved bound
    assert audit(0.1) > stated
    assert audit(0.0) > stated
