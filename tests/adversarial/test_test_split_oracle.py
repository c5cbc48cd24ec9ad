"""The test split as an oracle: a server that starts run after run on a deployed node, each with a
run id of its choosing, asking for an evaluation of weights of its choosing.

The guard used to be per run (its file lives in the run's folder) and a free-text `stopped_early`
stood in for training, so every new run gave one more exact, uncharged scoring of the site's test
patients. Scoring once is now a property of the site, kept beside its lifetime ledger (not of a
digest of its test rows, which a re-split changes), only after the site trained a round of the run,
and only of the last global state the site trained from (not of weights the server picks for it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from secure_fed.config import RunConfig
from secure_fed.crypto.keys import init_keys
from secure_fed.launch import client_app
from secure_fed.registry import initial_state
from tests.adversarial.harness import Site

SITE = "site0"


@pytest.fixture
def policy(make_config, tmp_path: Path) -> RunConfig:
    keys = tmp_path / "keys"
    init_keys(keys, ["server", "site0", "site1", "site2"])
    return make_config(
        "site-out",
        dp__enabled=True,
        dp__noise_multiplier=2.0,
        dp__target_epsilon=50.0,
        dp__sample_rate=0.5,
        fed__method="fedavg",
        audit__keys_dir=str(keys),
    )


def node(cfg: RunConfig, run_id: str) -> Site:
    """The node's runtime for a run the server started (launch/client_app.py, as for every `flwr run`)."""
    assert cfg.audit.keys_dir is not None
    return Site(client_app._runtime(cfg, SITE, Path(cfg.audit.keys_dir), run_id, deployed=True))


def test_an_early_stop_before_any_training_round_scores_nothing(policy: RunConfig, one_torch_thread) -> None:
    weights = initial_state(policy)
    for run in ("run-1", "run-2", "run-3"):
        site = node(policy, run)
        assert site.send("hello", {})["site"] == SITE
        reply = site.send("evaluate", {"global": weights, "split": "test", "stopped_early": "x"})
        assert reply["status"] == "refused" and reply["code"] == "evaluate_untrained", reply
        assert "CE-F1" not in reply


@pytest.mark.slow
def test_the_test_split_is_scored_once_across_runs(policy: RunConfig, one_torch_thread) -> None:
    weights = initial_state(policy)
    train = {"round": 1, "method": "fedavg", "global": weights, "dp": True}
    scored = []
    for run in ("run-1", "run-2", "run-3"):
        site = node(policy, run)
        assert site.send("train", dict(train))["status"] == "ok"
        reply = site.send(
            "evaluate", {"global": weights + 1e-3 * len(scored), "split": "test", "stopped_early": "x"}
        )
        scored.append(reply)
    assert scored[0]["status"] == "ok" and "CE-F1" in scored[0]
    for reply in scored[1:]:  # a new run id is not new test patients
        assert reply["status"] == "refused" and reply["code"] == "test_split_scored", reply
        assert "CE-F1" not in reply
    refusals = [r for r in site.events("instruction") if r["payload"]["code"] == "test_split_scored"]
    assert refusals  # the refusal is in the site's own signed log


@pytest.mark.slow  # rounds of three sites in process: make test-fast leaves it out
def test_the_site_scores_the_last_global_it_trained_from_not_weights_the_server_picks(
    policy: RunConfig, one_torch_thread
) -> None:
    """The one scoring a site's life allows, spent on weights the server made to probe the test
    patients (here the model moved far along a random direction: scores unlike the trained one's)
    instead of a model it trained."""
    weights = initial_state(policy)
    site = node(policy, "run-1")
    assert (
        site.send("train", {"round": 1, "method": "fedavg", "global": weights, "dp": True})["status"] == "ok"
    )
    probe = weights + np.random.default_rng(0).normal(0, 1, weights.size)
    honest, probed = site.runtime.learner.score(weights), site.runtime.learner.score(probe)
    assert honest != probed  # the probe would tell the server something the honest model does not
    reply = site.send("evaluate", {"global": probe, "split": "test", "stopped_early": "x"})
    assert reply["status"] == "ok", reply
    assert {k: reply[k] for k in honest} == honest and reply["scored"] == "global of round 1"


@pytest.mark.slow  # rounds of three sites in process: make test-fast leaves it out
def test_a_changed_test_split_is_not_new_test_patients(policy: RunConfig, one_torch_thread) -> None:
    """Adding rows to the test split (here: a larger test fraction, as a re-split or a refresh would)
    changed the digest the scoring was keyed by, and bought a second scoring of the same patients."""
    weights = initial_state(policy)
    train = {"round": 1, "method": "fedavg", "global": weights, "dp": True}
    first = node(policy, "run-1")
    assert first.send("train", dict(train))["status"] == "ok"
    assert (
        first.send("evaluate", {"global": weights, "split": "test", "stopped_early": "x"})["status"] == "ok"
    )
    data = policy.data.model_copy(update={"test_fraction": 0.4})
    resplit = policy.model_copy(update={"data": data})
    second = node(resplit, "run-2")
    assert second.runtime.learner.n_test > first.runtime.learner.n_test  # more test rows than before
    assert second.send("train", dict(train))["status"] == "ok"
    reply = second.send("evaluate", {"global": weights, "split": "test", "stopped_early": "x"})
    assert reply["status"] == "refused" and reply["code"] == "test_split_scored", reply
