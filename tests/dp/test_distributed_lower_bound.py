"""The one-run empirical lower bound of distributed DP's released sum (secure_fed.dp.distributed_lower_bound).

Tiny sizes: a 4,096-coordinate update, 3 sites (h = 3, one colluder whose share the server
removes), 1,000 canaries held as patients by the two honest sites, 4 rounds at q = 0.5. The
measurement's ceiling (every one of its 100 guesses right) is about 3.5, above the stated ε = 2, so
the measurement can fail: the zero-noise control shows it does when the sites add no noise.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from secure_fed.dp.distributed import DistributedPlan, distributed_epsilon, plan_distributed
from secure_fed.dp.distributed_lower_bound import bound_distributed
from secure_fed.dp.keystream import NoiseStream
from secure_fed.dp.lower_bound import PASSED, VIOLATION

DIM, Q, ROUNDS, DELTA, CANARIES, GUESSES = 4096, 0.5, 4, 1e-5, 1000, 100


@pytest.fixture(scope="module")
def plan() -> DistributedPlan:
    return plan_distributed(
        target_epsilon=2.0,
        delta=DELTA,
        sample_rate=Q,
        steps=ROUNDS,
        clip=1.0,
        dim=DIM,
        honest_min=3,
        colluders=1,
        bits=32,
        max_sites=3,
        site_bound=float(CANARIES),  # every canary and patient at once fits: no projection
    )


def _sites(seed: int):  # type: ignore[no-untyped-def]
    # the sites' secret keystreams, pinned so the test is the same on every run
    return lambda k: NoiseStream(bytes([seed, k]) * 16)


def test_audit_of_the_distributed_sum_stays_below_the_accounted_epsilon(plan: DistributedPlan) -> None:
    """0.2 s: canaries at both honest sites, the view without the colluder's share."""
    audit = bound_distributed(
        plan, Q, ROUNDS, CANARIES, GUESSES, DELTA, np.random.default_rng(0),
        canary_sites=2, site_stream=_sites(1),
    )  # fmt: skip
    assert audit.stated_epsilon == pytest.approx(distributed_epsilon(plan, Q, ROUNDS, DELTA))
    assert audit.stated_epsilon == pytest.approx(2.0, rel=1e-3)
    out = audit.outcome
    # the measurement could have found a violation (ceiling above ε) and did not
    assert out.epsilon_hat_max > audit.stated_epsilon
    assert out.epsilon_hat <= audit.stated_epsilon and audit.verdict == PASSED
    assert out.guesses == GUESSES and out.guessed_out == 0
    assert audit.payload()["verdict"] == PASSED and audit.payload()["sites"] == 3


def test_zero_noise_control_is_caught(plan: DistributedPlan) -> None:
    """0.2 s: the same sites encoding with no noise share (share_mu = 0) while the plan states
    mu_total: the guesses from the decoded sum are nearly all right and ε̂ exceeds the stated ε."""
    silent = dataclasses.replace(plan, mu_total=0.0, share_mu=0.0)
    audit = bound_distributed(
        plan, Q, ROUNDS, CANARIES, GUESSES, DELTA, np.random.default_rng(0),
        canary_sites=2, site_stream=_sites(1), mechanism=silent,
    )  # fmt: skip
    assert audit.outcome.correct >= GUESSES - 2
    assert audit.outcome.epsilon_hat > audit.stated_epsilon and audit.verdict == VIOLATION


def test_mechanism_in_another_ring_is_refused(plan: DistributedPlan) -> None:
    other = dataclasses.replace(plan, bits=40)
    with pytest.raises(ValueError, match="stated plan's ring"):
        bound_distributed(plan, Q, 1, 10, 2, DELTA, np.random.default_rng(0), mechanism=other)
