"""Patient profile v_p (keyed hash, age, sex) and the site GMM that turns it into q_p."""

from __future__ import annotations

import hashlib
import hmac
import warnings

import numpy as np
import pytest

from secure_fed.algorithms.fedtar.profile import fit_gmm
from secure_fed.algorithms.fedtar.profile_gmm import PatientGMM, prior_components
from secure_fed.config import ConfigError
from secure_fed.data.profile import profile_vector

KEY_A = b"site-a-secret-key-0123456789abcd"
KEY_B = b"site-b-secret-key-0123456789abcd"


# -- the keyed hash --------------------------------------------------------------------------------


def test_hash_is_keyed_and_stable() -> None:
    ids = [f"MRN{i:06d}" for i in range(50)]
    a = np.array([profile_vector(pid, 50, "F", KEY_A)[0] for pid in ids])
    b = np.array([profile_vector(pid, 50, "F", KEY_B)[0] for pid in ids])
    again = np.array([profile_vector(pid, 50, "F", KEY_A)[0] for pid in ids])
    np.testing.assert_array_equal(a, again)  # stable: same key, same id → same value
    assert (a != b).all()  # another site's key gives unrelated values
    assert len(set(a.tolist())) == len(ids)  # distinct ids do not collide
    assert ((a >= 0) & (a < 1)).all() and ((b >= 0) & (b < 1)).all()
    # The value is HMAC-SHA256(key, id), first 8 bytes as a fraction of 2^64 — not a bare SHA-256
    # (which anyone could recompute from a candidate record number).
    digest = hmac.new(KEY_A, ids[0].encode(), hashlib.sha256).digest()
    assert a[0] == int.from_bytes(digest[:8], "big") / 2.0**64
    bare = int.from_bytes(hashlib.sha256(ids[0].encode()).digest()[:8], "big") / 2.0**64
    assert a[0] != bare


def test_hash_ignores_demographics() -> None:
    h1 = profile_vector("P1", 30, "F", KEY_A)[0]
    h2 = profile_vector("P1", 80, "M", KEY_A)[0]
    assert h1 == h2


# -- age and sex -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("age", "expected"),
    [(0, 0.0), (45, 0.45), (100, 1.0), (120, 1.2), (150, 1.2), (-3, 0.0), (None, 0.5)],
)
def test_age_encoding(age: float | None, expected: float) -> None:
    assert profile_vector("P", age, "F", KEY_A)[1] == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(("sex", "expected"), [("F", 0.0), ("M", 1.0), ("U", 0.5), ("X", 0.5), ("", 0.5)])
def test_sex_encoding(sex: str, expected: float) -> None:
    assert profile_vector("P", 40, sex, KEY_A)[2] == expected


def test_profile_shape_and_dtype() -> None:
    v = profile_vector("P", 61, "M", KEY_A)
    assert v.shape == (3,) and v.dtype == np.float64


# -- the GMM -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("reg", [0.0, 1e-9, 9.99e-7])
def test_small_reg_covar_refused(reg: float) -> None:
    with pytest.raises(ValueError, match="reg_covar"):
        PatientGMM(4, reg_covar=reg)
    with pytest.raises(ValueError, match="reg_covar"):
        fit_gmm(np.random.default_rng(0).random((20, 3)), 4, reg, 0, None)


def test_small_reg_covar_refused_by_config(make_config) -> None:
    with pytest.raises(ConfigError, match="gmm_reg_covar"):
        make_config(model__gmm_reg_covar=1e-7)
    assert make_config(model__gmm_reg_covar=1e-6).model.gmm_reg_covar == 1e-6


def sample_prior(n_components: int, n: int, seed: int) -> np.ndarray:
    means, variances, weights = prior_components(n_components)
    rng = np.random.default_rng(seed)
    comp = rng.choice(n_components, size=n, p=weights)
    return means[comp] + rng.normal(size=(n, 3)) * np.sqrt(variances[comp])


@pytest.mark.parametrize(("n_components", "seed"), [(4, 0), (8, 1), (16, 2), (16, 3)])
def test_components_keep_prior_order(n_components: int, seed: int) -> None:
    prior_means, _, _ = prior_components(n_components)
    gmm = PatientGMM(n_components, seed=seed).fit(sample_prior(n_components, 3000, seed))
    assert gmm.fitted
    fitted = gmm._gmm.means_
    dist = np.linalg.norm(fitted[:, None, :] - prior_means[None, :, :], axis=-1)
    np.testing.assert_array_equal(dist.argmin(axis=1), np.arange(n_components))


def test_components_mean_the_same_subpopulation_on_realistic_profiles() -> None:
    """Sites with different age mixes: component i still denotes the same (sex, age band)."""
    n_components, per_sex = 16, 8
    for seed, (lo, hi) in enumerate([(20, 95), (55, 95), (18, 60)]):
        rng = np.random.default_rng(seed)
        profiles = np.stack(
            [profile_vector(f"P{i}", float(rng.uniform(lo, hi)), "FM"[i % 2], KEY_A) for i in range(400)]
        )
        gmm = PatientGMM(n_components, seed=seed).fit(profiles)
        q_f = gmm.responsibilities(profile_vector("Q", 0.5 * (lo + hi), "F", KEY_A))
        q_m = gmm.responsibilities(profile_vector("Q", 0.5 * (lo + hi), "M", KEY_A))
        assert int(q_f.argmax()) < per_sex <= int(q_m.argmax())


@pytest.mark.parametrize("n_patients", [0, 1, 5, 15])
def test_tiny_site_keeps_prior(n_patients: int) -> None:
    prior_means, prior_vars, prior_weights = prior_components(16)
    rng = np.random.default_rng(n_patients)
    profiles = (
        np.stack(
            [
                profile_vector(f"P{i}", float(rng.uniform(20, 90)), "FM"[i % 2], KEY_A)
                for i in range(n_patients)
            ]
        )
        if n_patients
        else np.zeros((0, 3))
    )
    gmm = PatientGMM(16).fit(profiles)
    assert not gmm.fitted
    np.testing.assert_array_equal(gmm._gmm.means_, prior_means)
    np.testing.assert_array_equal(gmm._gmm.covariances_, prior_vars)
    np.testing.assert_array_equal(gmm._gmm.weights_, prior_weights)
    q = gmm.responsibilities(profile_vector("Z", 33, "M", KEY_A))
    assert q.shape == (1, 16) and q.dtype == np.float32
    assert q.sum() == pytest.approx(1.0, abs=1e-5) and (q >= 0).all()
    # Same through the site path (non-private).
    site_gmm, event = fit_gmm(profiles, 16, 1e-6, 0, None)
    assert event is None and not site_gmm.fitted
    np.testing.assert_array_equal(site_gmm._gmm.means_, prior_means)


def test_degenerate_site_does_not_crash() -> None:
    """As many patients as components, all with one (age, sex): the reg_covar floor keeps EM finite."""
    profiles = np.stack([profile_vector(f"P{i}", 70.0, "F", KEY_A) for i in range(16)])
    gmm = PatientGMM(16).fit(profiles)
    q = gmm.responsibilities(profiles)
    assert np.isfinite(q).all()
    np.testing.assert_allclose(q.sum(axis=1), 1.0, atol=1e-5)


def test_responsibilities_depend_on_demographics() -> None:
    gmm = PatientGMM(16)
    young_f = gmm.responsibilities(profile_vector("A", 20, "F", KEY_A))
    old_m = gmm.responsibilities(profile_vector("A", 85, "M", KEY_A))
    assert np.abs(young_f - old_m).sum() > 1.0


def test_an_unconverged_fit_is_quiet_and_says_so() -> None:
    """A site's GMM fit that EM leaves unconverged at its iteration cap puts no sklearn warning on the
    operator's console (it printed on every private FedTAR cell of the hospital sweep); the fit is
    EM's last iterate either way, and `converged` says which it was."""
    rng = np.random.default_rng(0)
    samples = rng.random((400, 3))
    gmm = PatientGMM(n_components=16, seed=0)
    gmm._gmm.max_iter = 1  # one EM step: never converged
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        gmm.fit(samples)
    assert gmm.fitted and not gmm.converged
    assert gmm.responsibilities(samples[:2]).shape == (2, 16)
    converged = PatientGMM(n_components=2, seed=0)
    converged.fit(np.vstack([rng.normal(0, 0.01, (50, 3)), rng.normal(1, 0.01, (50, 3))]))
    assert converged.converged
