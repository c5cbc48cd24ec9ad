"""The one-run lower bound on ε must be able to fail.

The finding: at the documented setting (stated ε = 4, 1,000 canaries, 100 guesses, δ = 1e-5) the
largest ε̂ the one-run bound can give — every guess right — is 3.465 < 4, so a DP-SGD patched to
add no noise at all "passed". Now every measurement states its ceiling ε̂_max, a measurement whose ceiling is
at or below ε is "inconclusive" (never "passed"), the default M is the fewest canaries whose
ceiling clears ε, and the zero-noise negative control below must come out a "violation".

The controls drive the site's own `DPGradients` (its Poisson patient sampler and `PatientDPSGD`)
wrapped by the measurement's `CanaryGradients`, exactly as `secure-fed lower-bound` wraps a site,
on two small linear copies so that each run takes seconds.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from secure_fed.dp.accountants import epsilon_rdp
from secure_fed.dp.calibration import calibrate_noise
from secure_fed.dp.canaries import (
    CEILING_MARGIN,
    GradientCanaries,
    default_canaries,
    default_guesses,
    evaluate,
    likelihood_scores,
)
from secure_fed.dp.events import PoissonSampledGaussian
from secure_fed.dp.keystream import NoiseStream
from secure_fed.dp.lower_bound import epsilon_ceiling, verdict
from secure_fed.site.lower_bound import CanaryGradients
from secure_fed.site.private import DPGradients
from secure_fed.verifier.lower_bound import check_record

STATED, DELTA, Q, STEPS, CLIP, N_PATIENTS = 4.0, 1e-5, 0.25, 40, 1.0, 32


@pytest.fixture(scope="module")
def stated() -> tuple[float, float]:
    sigma = calibrate_noise(STATED, DELTA, Q, STEPS)
    return sigma, epsilon_rdp(PoissonSampledGaussian(Q, sigma, STEPS), DELTA)


def _site_audit(actual_sigma: float, stated_sigma: float, stated_epsilon: float, m: int, label: str) -> dict:
    """One measured training run through the site's DPGradients; the record's verdict fields."""
    torch.manual_seed(0)
    copies = [nn.Linear(200, 100), nn.Linear(200, 100)]
    x, y = torch.randn(N_PATIENTS, 200), torch.randn(N_PATIENTS, 100)
    noise = NoiseStream(hashlib.sha256(f"audit control {label}".encode()).digest())
    inner = DPGradients(Q, CLIP, actual_sigma, N_PATIENTS, STEPS, noise)
    sizes = [sum(p.numel() for p in c.parameters()) for c in copies]
    canaries = GradientCanaries.draw(m, sizes, CLIP, np.random.default_rng(7), support=64)
    projections: list[np.ndarray] = []
    grads = CanaryGradients(inner, canaries, projections)
    forward = grads.wrap(copies)
    optimiser = torch.optim.SGD([p for c in copies for p in c.parameters()], lr=0.05)
    for _ in range(STEPS):
        batch = grads.sample(N_PATIENTS)
        losses = [((f(x[batch]) - y[batch]) ** 2).sum(-1) for f in forward]
        optimiser.zero_grad(set_to_none=True)
        grads.backward(copies, losses, [torch.arange(len(batch))] * 2)
        optimiser.step()
    scores = likelihood_scores(np.stack(projections), Q, stated_sigma)
    # as the site's measurement guesses: "in" only (a never-sampled canary looks excluded)
    outcome = evaluate(scores, canaries.included, default_guesses(m), DELTA, guess_out=False)
    return {
        **outcome.to_json(),
        "stated_epsilon": stated_epsilon,
        "verdict": verdict(outcome.epsilon_hat, outcome.epsilon_hat_max, stated_epsilon),
    }


def test_the_documented_setting_cannot_fail_so_it_is_inconclusive() -> None:
    ceiling = epsilon_ceiling(1000, default_guesses(1000), DELTA)
    assert ceiling == pytest.approx(3.465, abs=1e-3)  # every guess right: still below ε = 4
    # whatever it measured, such a measurement is never "passed"
    for measured in (0.0, 0.9, ceiling):
        assert verdict(measured, ceiling, STATED) == "inconclusive"


def test_the_default_canaries_put_the_ceiling_above_epsilon() -> None:
    m = default_canaries(STATED, DELTA)
    assert m is not None and m > 1000
    assert epsilon_ceiling(m, default_guesses(m), DELTA) >= CEILING_MARGIN * STATED
    # the fewest such: 500 fewer would not do
    assert epsilon_ceiling(m - 500, default_guesses(m - 500), DELTA) < CEILING_MARGIN * STATED
    # at ε = 8 no affordable M can clear it (the ceiling grows with log r): refused, not run
    assert default_canaries(8.0, DELTA) is None


@pytest.mark.slow
def test_zero_noise_control_is_a_violation(stated: tuple[float, float]) -> None:
    """The negative control: the accountant is told σ, DP-SGD adds nothing; the measurement must fail."""
    sigma, epsilon = stated
    m = default_canaries(epsilon, DELTA)
    assert m is not None
    record = _site_audit(0.0, sigma, epsilon, m, "zero noise")
    assert record["correct"] == record["guesses"]  # without noise every guess is right
    assert record["epsilon_hat_max"] > epsilon
    assert record["verdict"] == "violation", record
    again, problem = check_record(record)
    assert problem is None and again == pytest.approx(record["epsilon_hat"], abs=1e-4)


@pytest.mark.slow  # trains the canary audit's runs: make test-fast leaves it out
def test_the_real_mechanism_passes_an_audit_that_could_have_failed(stated: tuple[float, float]) -> None:
    sigma, epsilon = stated
    m = default_canaries(epsilon, DELTA)
    assert m is not None
    record = _site_audit(sigma, sigma, epsilon, m, "real")
    assert record["verdict"] == "passed", record
    assert record["correct"] > record["guesses"] // 2  # the measurement still beats chance


def test_canaries_are_drawn_by_the_sites_own_patient_sampler() -> None:
    """One draw of the site's Poisson sampler over patients and included canaries together."""
    calls: list[int] = []
    noise = NoiseStream(hashlib.sha256(b"sampler").digest())
    inner = DPGradients(Q, CLIP, 1.0, N_PATIENTS, STEPS, noise)
    own = inner.sample
    inner.sample = lambda n: calls.append(n) or own(n)  # type: ignore[method-assign]
    canaries = GradientCanaries.draw(400, [55], CLIP, np.random.default_rng(3), support=8)
    grads = CanaryGradients(inner, canaries, [])
    grads.wrap([nn.Linear(10, 5)])
    assert grads.injector is not None
    patients, chosen = [], []
    for _ in range(200):
        patients.append(len(grads.sample(N_PATIENTS)))
        blocks = grads.injector._step()
        chosen.append(0 if blocks[0] is None else int((blocks[0].abs().sum(1) > 0).sum()))
    assert calls == [N_PATIENTS + int(canaries.included.sum())] * 200
    # both at the patients' rate q
    assert np.mean(patients) == pytest.approx(Q * N_PATIENTS, rel=0.1)
    assert np.mean(chosen) == pytest.approx(Q * canaries.included.sum(), rel=0.05)


def test_verify_rejects_a_passed_verdict_for_an_audit_that_could_not_fail() -> None:
    ceiling = epsilon_ceiling(1000, 100, DELTA)
    record = {
        "canaries": 1000,
        "guesses": 100,
        "correct": 100,
        "delta": DELTA,
        "confidence": 0.95,
        "epsilon_hat": ceiling,
        "epsilon_hat_max": ceiling,
        "stated_epsilon": STATED,
        "verdict": "passed",
    }
    _, problem = check_record(record)
    assert problem is not None and "'inconclusive'" in problem
    assert check_record({**record, "verdict": "inconclusive"})[1] is None
    _, problem = check_record({**record, "epsilon_hat_max": 9.0, "verdict": "inconclusive"})
    assert problem is not None and "ceiling" in problem


def test_the_report_calls_an_audit_that_could_not_fail_inconclusive() -> None:
    from secure_fed.verifier.report import _empirical_html
    from secure_fed.verifier.report_data import ReportData
    from secure_fed.verifier.verdict import verdict

    ceiling = epsilon_ceiling(1000, 100, DELTA)
    data = ReportData()
    data.empirical_audits = [
        {
            "site": "site0",
            "mechanism": "dp_sgd",
            "stated_epsilon": STATED,
            "epsilon_hat": ceiling,  # every guess right: what a zero-noise mechanism gets
            "epsilon_hat_max": ceiling,
            "canaries": 1000,
            "guesses": 100,
            "correct": 100,
            "delta": DELTA,
            "confidence": 0.95,
        }
    ]
    page = _empirical_html(data, verdict(data.verification))
    assert "Inconclusive" in page and "ε̂ / ε" not in page


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_zero_noise_through_the_site_runtime_is_a_violation(make_config, tmp_path, monkeypatch) -> None:
    """The same control through `run_lower_bound` (the site's runtime, model and cohort) with
    the default M: DP-SGD adds nothing while the site's accountant states its ε."""
    from secure_fed.dp import dpsgd
    from secure_fed.site.lower_bound import run_lower_bound

    made = dpsgd.PatientDPSGD.__init__

    def no_noise(self: dpsgd.PatientDPSGD, modules: Any, clip: float, sigma: float, *rest: Any) -> None:
        made(self, modules, clip, 0.0, *rest)

    monkeypatch.setattr(dpsgd.PatientDPSGD, "__init__", no_noise)
    cfg = make_config(dp__enabled=True, dp__target_epsilon=4.0, fed__rounds=1, train__threads=1)
    result = run_lower_bound(cfg, "site0", None, tmp_path / "audit", canary_seed=1, releases=False)
    record = result.payload()
    assert record["canaries"] == default_canaries(record["stated_epsilon"], record["delta"])
    assert record["correct"] == record["guesses"], record
    assert record["verdict"] == "violation", record
