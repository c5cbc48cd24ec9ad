"""Controls of the one-run lower bound through the real `PatientDPSGD`: the measurement must have teeth.

Noise off, or noise scaled down 10× by a planted bug, must push ε̂ above the stated ε (the ε the
accountant gives for the σ the code claims to use); the real mechanism must keep ε̂ below it.
Small modules (two linear copies, 40,200 parameters) keep each run to a second or two.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch
from torch import nn

from secure_fed.dp.accountants import epsilon_rdp
from secure_fed.dp.calibration import calibrate_noise
from secure_fed.dp.canaries import (
    CanaryInjector,
    GradientCanaries,
    default_guesses,
    evaluate,
    likelihood_scores,
)
from secure_fed.dp.dpsgd import PatientDPSGD, poisson_sample
from secure_fed.dp.events import PoissonSampledGaussian
from secure_fed.dp.keystream import NoiseStream

STATED_EPSILON, DELTA, Q, STEPS, CLIP = 2.0, 1e-5, 0.25, 40, 1.0
N_PATIENTS, M = 32, 1000
NORM = 4.0


def _stream(label: str) -> NoiseStream:
    return NoiseStream(hashlib.sha256(f"canary test {label}".encode()).digest())


def _audit(
    actual_sigma_factor: float,
    stated_sigma: float,
    label: str,
    guesses: int,
    clip_factor: float = 1.0,
    counted: int = 1,
    m: int = M,
) -> tuple[float, int]:
    """Train two linear copies with patient-level DP-SGD and M canaries; (ε̂, correct guesses).

    `clip_factor` plants a clipping bug: patients are clipped to clip_factor·C while the noise
    stays σ·C, as the accountant assumes. `counted` plants a unit bug: each canary enters the
    clipped sum as that many "patients", each clipped to C on its own (a patient whose rows were
    split into several privacy units)."""
    torch.manual_seed(0)
    copies = [nn.Linear(200, 100), nn.Linear(200, 100)]
    x = torch.randn(N_PATIENTS, 200)
    y = torch.randn(N_PATIENTS, 100)
    noise = _stream(label)
    engine = PatientDPSGD(
        copies, CLIP * clip_factor, stated_sigma * actual_sigma_factor / clip_factor, Q * N_PATIENTS, noise
    )
    canaries = GradientCanaries.draw(
        m,
        [sum(p.numel() for p in c.parameters()) for c in copies],
        CLIP,
        np.random.default_rng(7),
        support=64,
        norm_factor=NORM,
    )
    injector = CanaryInjector(canaries, Q, Q * N_PATIENTS, noise)
    injector.attach(engine)
    if counted > 1:
        once = engine.injected
        engine.injected = lambda: [None if b is None else torch.cat([b] * counted) for b in once()]
    optimiser = torch.optim.SGD([p for c in copies for p in c.parameters()], lr=0.05)
    for _ in range(STEPS):
        batch = poisson_sample(N_PATIENTS, Q, noise)
        losses = [((m(x[batch]) - y[batch]) ** 2).sum() for m in engine.forward_modules]
        sum(losses).backward()
        engine.privatize([torch.arange(len(batch))] * 2, num_patients=max(len(batch), 1))
        injector.observe()
        optimiser.step()
        engine.zero_grad()
    scores = likelihood_scores(np.stack(injector.projections), Q, stated_sigma)
    outcome = evaluate(scores, canaries.included, guesses, DELTA)
    assert outcome.guesses == guesses and 0 <= outcome.correct <= guesses
    return outcome.epsilon_hat, outcome.correct


@pytest.fixture(scope="module")
def stated() -> tuple[float, float]:
    sigma = calibrate_noise(STATED_EPSILON, DELTA, Q, STEPS)
    return sigma, epsilon_rdp(PoissonSampledGaussian(Q, sigma, STEPS), DELTA)


def test_noise_off_exceeds_stated_epsilon(stated: tuple[float, float]) -> None:
    sigma, epsilon = stated
    eps_hat, correct = _audit(0.0, sigma, "off", guesses=default_guesses(M))
    assert correct > 0.95 * default_guesses(M)  # without noise nearly every guess is right
    assert eps_hat > epsilon


def test_noise_scaled_down_tenfold_exceeds_stated_epsilon(stated: tuple[float, float]) -> None:
    sigma, epsilon = stated
    eps_hat, _ = _audit(0.1, sigma, "bug", guesses=default_guesses(M))
    assert eps_hat > epsilon


def test_real_mechanism_stays_below_stated_epsilon(stated: tuple[float, float]) -> None:
    sigma, epsilon = stated
    eps_hat, correct = _audit(1.0, sigma, "real", guesses=default_guesses(M))
    assert eps_hat <= epsilon
    # the real noise still lets the canary holder beat chance, or the measurement would be vacuous
    assert correct > default_guesses(M) // 2


def test_canaries_are_longer_than_c_and_clipped_like_patients() -> None:
    wide = GradientCanaries.draw(5, [30, 20], 2.0, np.random.default_rng(1), support=8)
    joint = torch.cat([b for b in wide.blocks(np.arange(5)) if b is not None], dim=1)
    assert torch.allclose(joint.norm(dim=1), torch.full((5,), 4 * 2.0))  # 4·C by default
    canaries = GradientCanaries.draw(1, [30, 20], 1.0, np.random.default_rng(2), support=8)
    # a canary is clipped by the engine like any patient: whatever its length, C is left
    engine = PatientDPSGD([nn.Linear(4, 6), nn.Linear(3, 5)], 1.0, 0.0, 1.0, _stream("clip"))
    engine.injected = lambda: [2 * b for b in canaries.blocks(np.arange(1)) if b is not None]
    engine.privatize([None, None], num_patients=1)
    released = torch.cat([p.grad.reshape(-1) for params in engine.trainable_parameters for p in params])
    assert float(released.norm()) == pytest.approx(1.0, rel=1e-5)


def test_likelihood_scores_rank_sampled_canaries_first() -> None:
    projections = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    scores = likelihood_scores(projections, 0.5, 1.0)
    assert scores[0] > scores[1]
    assert np.allclose(likelihood_scores(projections, 0.5, 0.0), projections.sum(axis=0))


def test_clipping_bug_exceeds_stated_epsilon(stated: tuple[float, float]) -> None:
    sigma, epsilon = stated
    # patients clipped to 4·C while the noise is σ·C: the 4C canaries pass whole
    eps_hat, _ = _audit(1.0, sigma, "loose clip", guesses=default_guesses(M), clip_factor=4.0)
    assert eps_hat > epsilon


@pytest.mark.slow
def test_a_patient_counted_twice_shows_but_stays_under_the_stated_epsilon(
    stated: tuple[float, float],
) -> None:
    """A unit bug that doubles a patient's reach (2C under noise σ·C: the true ε at this σ and q is
    about 4.9, not 2.0) raises ε̂ well above the correct mechanism's on the same canaries, but a
    one-run lower bound of 3,000 canaries does not lift it over the stated ε (measured: 1.51 vs 0.82 for
    the correct mechanism, stated 1.99). This is the measurement's power at this size, reported as such
    in docs/RESULTS.md; the control pins it so a change in either direction is seen."""
    sigma, epsilon = stated
    real_hat, real_correct = _audit(1.0, sigma, "x1", guesses=default_guesses(3000), m=3000)
    twice_hat, twice_correct = _audit(1.0, sigma, "x2", guesses=default_guesses(3000), counted=2, m=3000)
    assert twice_correct > real_correct + 15  # the correct-guess counts are ~7 apart at 1 std
    assert twice_hat > real_hat + 0.3
    assert real_hat <= epsilon
