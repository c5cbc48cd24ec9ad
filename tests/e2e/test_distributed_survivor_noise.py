"""A distributed-DP run whose noise is sized for the confirmed survivors, end to end (in-process
engine, 4 sites, h = 3, c = 1, 2 rounds of FedAvg): every site reveals the one removable layer its
share carries when all four confirm, the server takes the layers out before decoding, the released
sum carries 4·mu/(4 − c) (measured: the decoded sum minus the sites' own clipped sums), not the
4·mu/(h − c) of shares sized for h, and the logs, the sites' reveals and the server's removals
included, verify."""

from __future__ import annotations

import json

import numpy as np
import pytest

from secure_fed.audits.keys import load_public_keys
from secure_fed.launch.runner import run_inprocess
from secure_fed.verifier.verify import verify_logs
from tests.conftest import DISTRIBUTED_DP


@pytest.mark.slow  # whole runs in process (each run ~1 min)
def test_all_survivors_reveal_the_freed_layer_and_the_sum_carries_the_m_sized_noise(make_config, noise_spy):
    import secure_fed.dp.distributed as mechanism

    clipped, released = noise_spy.clipped, noise_spy.released
    cfg = make_config(**DISTRIBUTED_DP, data__synth__sites=4, fed__method="fedavg")
    outcome = run_inprocess(cfg, cfg.out)
    assert outcome.metrics["rounds"] == 2 and len(released) == 2
    logs = sorted((cfg.out / "audit").glob("*.jsonl"))
    result = verify_logs(logs, load_public_keys(cfg.out / "keys"))
    assert result.ok, [str(p) for p in result.problems]

    def records(name: str) -> list[dict]:
        return [json.loads(line) for line in (cfg.out / "audit" / name).read_text().splitlines()]

    reveals = [r for r in records("site0.jsonl") if r["event"] == "noise_layers_revealed"]
    assert [r["round"] for r in reveals] == [1, 2]
    assert all(r["payload"]["survivors"] == 4 and r["payload"]["layers"] == [0] for r in reveals)
    server = [r for log in logs for r in records(log.name) if r["event"] == "noise_layers_removed"]
    assert [r["payload"]["removed"] for r in server] == [{f"site{k}": 4 for k in range(4)}] * 2

    for round_id, (noisy, plan) in enumerate(released, start=1):
        assert len(clipped[round_id]) == 4
        noise = noisy - np.sum(clipped[round_id], axis=0)
        sized = 4 * mechanism.kept_variance(plan, 4)  # type: ignore[arg-type]
        unlayered = 4 * plan.share_mu  # type: ignore[attr-defined]
        assert abs(sized / plan.mu_total - 4 / 3) < 1e-12 and abs(unlayered / plan.mu_total - 2) < 1e-12  # type: ignore[attr-defined]
        measured = float(np.var(noise / plan.gamma))  # type: ignore[attr-defined]
        assert abs(measured / sized - 1) < 0.05, (measured, sized, unlayered)
