"""The verifier re-prices a logged distributed-DP Skellam sum with its own code, and agrees with dp."""

from __future__ import annotations

import math
from itertools import product
from pathlib import Path

import numpy as np
import pytest

from secure_fed.dp.accountants import epsilon_rdp
from secure_fed.dp.events import Gaussian, SkellamSum, rounded_sensitivities
from secure_fed.dp.skellam import skellam_subsampled_curve
from secure_fed.verifier.accounting import EventError, StreamAccountant, skellam_sampled_rdp


def _event(q: float, count: int, gamma: float, padded: int, z: float) -> SkellamSum:
    l2, l1 = rounded_sensitivities(1.0, gamma, padded)
    return SkellamSum(
        sampling_rate=q,
        count=count,
        clip=1.0,
        gamma=gamma,
        dim=padded - 3,
        padded_dim=padded,
        mu_total=(z * l2) ** 2,
        l2_sensitivity=l2,
        l1_sensitivity=l1,
        bits=32,
        honest_min=3,
        colluders=1,
    )


# coarse (γ = 1/8: a few units per patient, the Skellam corrections matter) and fine granularity
GRID = list(product((0.005, 0.1, 1.0), (1, 300), (0.125, 1e-4), (64, 1024), (0.8, 2.0)))


@pytest.mark.parametrize("delta", [1e-5])
def test_the_verifier_and_the_sites_agree_on_a_grid(delta: float) -> None:
    for q, count, gamma, padded, z in GRID:
        event = _event(q, count, gamma, padded, z)
        ours = np.asarray(skellam_sampled_rdp(q, event.l1_sensitivity, event.l2_sensitivity, event.mu_total))
        theirs = np.asarray(
            skellam_subsampled_curve(q, event.l1_sensitivity, event.l2_sensitivity, event.mu_total)
        )
        np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=0)
        stream = StreamAccountant()
        stream.compose(event.to_json())
        assert abs(stream.epsilon_rdp(delta) - epsilon_rdp([event], delta)) <= 1e-9
        assert math.isnan(stream.epsilon_pld(delta))


def test_a_skellam_sum_composes_with_gaussian_releases_as_on_the_site() -> None:
    event = _event(0.02, 200, 1e-4, 1024, 1.0)
    gaussian = Gaussian(4.0, 2)
    stream = StreamAccountant()
    stream.compose(gaussian.to_json())
    alone = stream.epsilon_rdp(1e-5)
    stream.compose({"type": "composed", "events": [event.to_json()]})
    both = stream.epsilon_rdp(1e-5)
    assert both > alone
    assert abs(both - epsilon_rdp([gaussian, event], 1e-5)) <= 1e-9


def test_a_logged_sensitivity_that_does_not_follow_is_refused() -> None:
    logged = _event(0.02, 200, 1e-4, 1024, 1.0).to_json()
    for key, factor in (("l2_sensitivity", 0.5), ("l1_sensitivity", 0.5)):
        forged = {**logged, key: logged[key] * factor}
        with pytest.raises(EventError, match=f"logged {key}"):
            StreamAccountant().compose(forged)
    with pytest.raises(EventError, match="honest_min"):
        StreamAccountant().compose({**logged, "colluders": 3})
    # a stream is unchanged by a refused event
    stream = StreamAccountant()
    with pytest.raises(EventError):
        stream.compose({"type": "composed", "events": [Gaussian(4.0, 1).to_json(), {**logged, "gamma": -1}]})
    assert stream.epsilon_rdp(1e-5) == 0.0


def test_a_run_logged_round_by_round_re_derives_the_planned_epsilon() -> None:
    # sites charge one event per round (count 1); the plan was calibrated for all rounds at once
    from secure_fed.dp.distributed import distributed_epsilon, plan_distributed
    from secure_fed.dp.ledger import PrivacyLedger

    plan = plan_distributed(
        target_epsilon=2.0,
        delta=1e-5,
        sample_rate=0.02,
        steps=300,
        clip=1.0,
        dim=68_000,
        honest_min=3,
        colluders=1,
        bits=32,
        max_sites=5,
        site_bound=1024.0,
    )
    ledger, stream = PrivacyLedger(), StreamAccountant()
    for round_id in range(1, 301):
        ledger.record("a", "train", round_id, "dp_sgd", plan.event(0.02, 1))
        stream.compose(plan.event(0.02, 1).to_json())
    planned = distributed_epsilon(plan, 0.02, 300, 1e-5)
    assert 2.0 - 1e-3 <= planned <= 2.0
    assert abs(ledger.epsilon("a", delta=1e-5)["rdp"] - planned) <= 1e-9
    assert abs(stream.epsilon_rdp(1e-5) - planned) <= 1e-9


def test_audit_verify_re_derives_a_signed_log_of_skellam_rounds(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from secure_fed.audits.log import AuditLog
    from secure_fed.dp.ledger import PrivacyLedger
    from secure_fed.verifier.verify import verify_logs

    key = Ed25519PrivateKey.generate()
    path = tmp_path / "site-0.jsonl"
    event = _event(0.02, 1, 1e-4, 1024, 1.0)

    def write(scale: float = 1.0, forged: dict[str, float] | None = None) -> None:
        path.unlink(missing_ok=True)
        ledger = PrivacyLedger()
        with AuditLog(path, "site-0", "run-1", key) as log:
            for round_id in range(1, 6):
                ledger.record("site-0", "train", round_id, "dp_sgd", event)
                eps = ledger.epsilon("site-0", delta=1e-5)
                payload = {
                    "site": "site-0",
                    "population": "train",
                    "mechanism": "dp_sgd",
                    "event": {**event.to_json(), **(forged or {})},
                    "delta": 1e-5,
                    "epsilon": {"rdp": eps["rdp"] * scale, "prv": eps["prv"]},
                    "budget": None,
                }
                log.append("privacy", payload)

    write()
    result = verify_logs([path], {"site-0": key.public_key()})
    assert result.ok, result.problems
    write(scale=0.9)  # a site that under-states its ε
    assert "does not match mechanism parameters" in str(
        verify_logs([path], {"site-0": key.public_key()}).problems[0]
    )
    write(forged={"l2_sensitivity": event.l2_sensitivity / 3})  # or its sensitivity
    assert "privacy record unreadable" in str(verify_logs([path], {"site-0": key.public_key()}).problems[0])
