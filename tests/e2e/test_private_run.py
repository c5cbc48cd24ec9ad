"""DP runs: per-round ε in metrics and audit, budget guard end to end, resume without double counting."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from secure_fed.audits.keys import load_public_keys
from secure_fed.config import RunConfig
from secure_fed.dp.ledger import PrivacyLedger
from secure_fed.launch.runner import run_inprocess
from secure_fed.server.orchestrator import RunOutcome
from secure_fed.verifier.verify import verify_logs
from tests.conftest import small_config

# One straight 3-round DP run serves two tests: the first asserts on it, the resume test compares a
# killed-and-resumed run's ε with it (each ran its own before, a 2-round and a 3-round run alike).
DP_RUN = {"dp__enabled": True, "dp__target_epsilon": 8.0, "dp__sample_rate": 0.5, "fed__rounds": 3}


@pytest.fixture(scope="module")
def straight_dp_run(
    cache_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[RunConfig, RunOutcome]:
    cfg = small_config(cache_dir, tmp_path_factory.mktemp("straight") / "run", **DP_RUN)
    return cfg, run_inprocess(cfg, cfg.out)


def _ledger(out, site):
    return PrivacyLedger.from_json(json.loads((out / "sites" / site / "ledger.json").read_text()))


@pytest.mark.slow
def test_dp_run_reports_epsilon_within_target_and_logs_verify(straight_dp_run):
    cfg, outcome = straight_dp_run
    metrics = outcome.metrics
    assert metrics["secure_aggregation"] == "secagg+"  # on with DP by default
    privacy = metrics["privacy"]
    assert privacy["delta"] == 1e-5  # min(1e-5, 1/(10 B)), B = n rounded up to a power of ten
    assert set(privacy["epsilon"]) == {"site0", "site1", "site2"}
    for site, eps in privacy["epsilon"].items():
        assert 0 < eps["rdp"] <= 8.0 + 1e-9, site
        assert eps["prv"] is None or eps["prv"] <= eps["rdp"] + 1e-9
    assert [r["round"] for r in privacy["per_round"]] == [1, 2, 3]
    # ε grows round over round.
    for first, second in zip(privacy["per_round"][:-1], privacy["per_round"][1:], strict=True):
        assert all(second["epsilon"][s]["rdp"] > first["epsilon"][s]["rdp"] for s in first["epsilon"])
    logs = sorted((cfg.out / "audit").glob("*.jsonl"))
    result = verify_logs(logs, load_public_keys(cfg.out / "keys"))
    assert result.ok, [str(p) for p in result.problems]
    assert len(result.rederived) >= 3 * (1 + 2 * 3)  # GMM + (DP-SGD, α) per round, per site


@pytest.mark.slow
def test_a_method_without_alpha_charges_no_alpha_and_refuses_to_release_it(make_config):
    """FedAvg never asks for α scalars: its validation patients are not charged for them, and a
    server that asks anyway is refused (the release would be uncharged)."""
    from secure_fed.site.guard import Refusal
    from secure_fed.site.runtime import SiteRuntime

    cfg = make_config(dp__enabled=True, dp__target_epsilon=8.0, dp__sample_rate=0.5, fed__method="fedavg")
    run_inprocess(cfg, cfg.out)
    for site in ("site0", "site1", "site2"):
        ledger = _ledger(cfg.out, site)
        assert ledger.populations(site) == ["train"]
        assert ledger.rounds(site, "train") == [0, 1, 2]  # the GMM histogram, then two rounds
    runtime = SiteRuntime.create(cfg.model_copy(update={"out": cfg.out / "again"}), "site0")
    assert runtime.privacy is not None and "validation" not in runtime.privacy.round_events()
    dim = sum(p.numel() for p in runtime.learner.model.parameters() if p.requires_grad)  # type: ignore[union-attr]
    with pytest.raises(Refusal, match="releases no α scalars"):
        runtime.hypergrad(1, np.zeros(dim), np.zeros((cfg.data.max_visits, dim)))


@pytest.mark.slow
def test_budget_guard_stops_sites_before_exceeding_budget(make_config):
    # Noise fixed, budget small: with σ = 2 (q = 0.5, 4 steps a round) and the GMM histogram the
    # train patients reach ε ≈ 2.84 after round 1 and would reach ≈ 3.93 after round 2.
    cfg = make_config(
        dp__enabled=True,
        dp__noise_multiplier=2.0,
        dp__target_epsilon=3.0,
        dp__budget_epsilon=3.0,
        dp__sample_rate=0.5,
        dp__alpha_noise_multiplier=4.0,
        fed__rounds=4,
    )
    outcome = run_inprocess(cfg, cfg.out)
    assert outcome.stopped_early is not None and "fewer than fed.min_sites" in outcome.stopped_early
    assert outcome.metrics["rounds"] == 1, outcome.stopped_early
    for site in ("site0", "site1", "site2"):
        ledger = _ledger(cfg.out, site)
        for population in ("train", "validation"):
            assert ledger.epsilon(site, population, delta=1e-5)["rdp"] <= 3.0 + 1e-9
    server_log = (cfg.out / "audit" / "server.jsonl").read_text().splitlines()
    refusals = [json.loads(line) for line in server_log if '"budget_refusal"' in line]
    assert refusals and all(r["payload"]["budget"] == 3.0 for r in refusals if r["event"] == "budget_refusal")
    result = verify_logs(sorted((cfg.out / "audit").glob("*.jsonl")), load_public_keys(cfg.out / "keys"))
    assert result.ok, [str(p) for p in result.problems]


def _wait_for_round(meta, round_id, proc, timeout=300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"run ended early with code {proc.returncode}")
        if meta.exists() and json.loads(meta.read_text()).get("round", 0) >= round_id:
            return
        time.sleep(0.2)
    raise AssertionError("no checkpoint in time")


@pytest.mark.slow
def test_resume_after_kill_does_not_double_count(make_config, tmp_path, straight_dp_run):
    cfg = make_config(**DP_RUN)
    config_file = tmp_path / "run.toml"
    import tomli_w

    config_file.write_text(tomli_w.dumps(json.loads(cfg.model_dump_json(exclude_none=True))))
    out = tmp_path / "killed"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "secure_fed.cli", "run", "--config", str(config_file), "--out", str(out)]
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        _wait_for_round(out / "checkpoint" / "meta.json", 1, proc)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    done = subprocess.run(
        [sys.executable, "-m", "secure_fed.cli", "run", "--resume", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    resumed = json.loads((out / "metrics.json").read_text())
    assert resumed["rounds"] == 3 and [r["round"] for r in resumed["per_round"]] == [1, 2, 3]
    straight = straight_dp_run[1].metrics
    for site, eps in straight["privacy"]["epsilon"].items():
        assert resumed["privacy"]["epsilon"][site]["rdp"] == eps["rdp"], site
    logs = sorted((out / "audit").glob("*.jsonl"))
    result = verify_logs(logs, load_public_keys(out / "keys"))
    # The crash leaves the logs without a head at the kill point; the resumed run continues each
    # chain and closes it cleanly, so the whole history verifies.
    assert result.ok, [str(p) for p in result.problems]
