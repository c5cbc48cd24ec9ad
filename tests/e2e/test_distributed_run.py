"""A distributed-DP run end to end (dp.noise = "distributed", in-process engine, 3 sites, 2 rounds),
FedAvg and FedTAR (whose one step a round covers every visit index's copy, or is its one-vector
release of the model and T sketches, and whose α still takes its step on the sites' scalars): it
completes, its logs verify with every ε re-derived, each
privacy record names the mode, h, c and the plan, the compliance report says so in words, and the
noise in the sum the server released is what the plan says (measured: the decoded sum minus the
sites' own clipped sums, every coordinate)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from secure_fed.audits.keys import load_public_keys
from secure_fed.launch.runner import run_inprocess
from secure_fed.verifier.report import write_report
from secure_fed.verifier.verify import verify_logs
from tests.conftest import DISTRIBUTED_DP


@pytest.mark.slow
@pytest.mark.parametrize(
    ("method", "release"), [("fedavg", "copies"), ("fedtar", "copies"), ("fedtar", "one-vector")]
)
def test_distributed_run_completes_verifies_and_releases_the_planned_noise(
    make_config, noise_spy, method, release
):
    clipped, released = noise_spy.clipped, noise_spy.released
    # h = 3 of 3 sites, c = 1: each share carries half the noise, the two honest ones all of it
    cfg = make_config(
        **DISTRIBUTED_DP,
        fed__method=method,
        train__fedtar_release=release,
    )
    outcome = run_inprocess(cfg, cfg.out)
    assert outcome.metrics["rounds"] == 2 and len(released) == 2
    for site, eps in outcome.metrics["privacy"]["epsilon"].items():
        assert 8.0 * (1 - 1e-3) <= eps["rdp"] <= 8.0 + 1e-9, site  # histogram + 2 rounds: the target

    logs = sorted((cfg.out / "audit").glob("*.jsonl"))
    result = verify_logs(logs, load_public_keys(cfg.out / "keys"))
    assert result.ok, [str(p) for p in result.problems]
    records = [json.loads(line) for line in (cfg.out / "audit" / "site0.jsonl").read_text().splitlines()]
    steps = [
        r["payload"] for r in records if r["event"] == "privacy" and r["payload"]["mechanism"] == "dp_sgd"
    ]
    assert [s["noise"] for s in steps] == ["distributed", "distributed"]
    assert all(
        s["honest_min"] == 3 and s["colluders"] == 1 and s["event"]["type"] == "skellam_sum" for s in steps
    )

    if method == "fedtar":
        # one step over all visit indices a round, α's scalars the sites' own Gaussian releases
        # (charged to the validation patients), summed and stepped on every round
        privacy = [r["payload"] for r in records if r["event"] == "privacy"]
        alpha_steps = [p for p in privacy if p["mechanism"] == "alpha_scalars"]
        assert len(alpha_steps) == 2 and all(a["population"] == "validation" for a in alpha_steps)
        alphas = [row["alpha"] for row in outcome.metrics["per_round"]]
        assert len(alphas) == 2 and all(abs(sum(a) - 1) < 1e-9 for a in alphas)
        assert alphas[1] != alphas[0] and not np.allclose(alphas[1], 1 / len(alphas[1]))
        assert all(0.1 <= a <= 0.9 for row in alphas for a in row)  # the write-up's bounds
    if release == "one-vector":
        # the round is priced as FedAvg's: its plan bar the vector's length, which pads alike
        from secure_fed.dp.distributed.run import plan_for

        ours = released[0][1]
        fedavg = plan_for(cfg, ours.dim - cfg.data.max_visits * cfg.train.fedtar_sketch_dim, 3)  # type: ignore[attr-defined]
        event = {**steps[0]["event"], "dim": fedavg.dim}
        assert event == {**fedavg.event(cfg.dp.sample_rate, 1).to_json(), "count": event["count"]}

    html, _, _ = write_report(logs, cfg.out / "report.html", load_public_keys(cfg.out / "keys"))
    words = html.read_text()
    assert "distributed noise" in words and "h = 3 survivors" in words and "c = 1 of them" in words
    assert "symmetric about zero" in words and "Zhu &amp; Wang" not in words
    # every round: the one survivor set all three sites signed, against h
    survivors = [r for r in records if r["event"] == "secagg_survivors"]
    assert [r["round"] for r in survivors] == [1, 2]
    assert all(r["payload"]["survivors"] == ["site0", "site1", "site2"] for r in survivors)
    assert "<td>1</td><td>3</td><td>3</td><td>site0, site1, site2</td><td>yes</td>" in words

    for round_id, (noisy, plan) in enumerate(released, start=1):
        assert len(clipped[round_id]) == 3  # every site's sum went into the released one
        noise = noisy - np.sum(clipped[round_id], axis=0)
        # 3 shares of mu_total / (h − c) each, plus at most 3 rounding units of variance 1/4 each
        planned = 3 * plan.share_mu  # type: ignore[attr-defined]
        measured = float(np.var(noise / plan.gamma))  # type: ignore[attr-defined]
        assert planned >= plan.mu_total  # type: ignore[attr-defined]
        assert abs(measured / planned - 1) < 0.05, (measured, planned)
