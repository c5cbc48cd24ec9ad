"""A distributed-DP FedTAR run with CKKS end to end (in-process engine, 3 sites, 2 rounds): each
round's α sum is made of shares sized for the 3 verified participants (σ_α·C_α/√2 each, c = 1),
one a site a round, signed in each site's log; the logs verify with each share re-derived, α
moves, and the compliance report names the shares and c."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from secure_fed.audits.keys import load_public_keys
from secure_fed.crypto.keys import init_keys
from secure_fed.launch.runner import run_inprocess
from secure_fed.verifier.report import write_report
from secure_fed.verifier.verify import verify_logs
from tests.conftest import DISTRIBUTED_DP


@pytest.mark.slow
def test_a_distributed_fedtar_run_under_ckks_shares_alphas_noise(make_config, tmp_path) -> None:  # noqa: ANN001
    keys = tmp_path / "keys"
    init_keys(keys, ["server", "site0", "site1", "site2"])
    cfg = make_config(
        **DISTRIBUTED_DP,
        fed__method="fedtar",
        he__enabled=True,
        he__keys_dir=str(keys),
        audit__keys_dir=str(keys),
    )
    outcome = run_inprocess(cfg, cfg.out)
    assert outcome.metrics["rounds"] == 2 and outcome.metrics["he"] is True
    logs = sorted((cfg.out / "audit").glob("*.jsonl"))
    result = verify_logs(logs, load_public_keys(keys))
    assert result.ok, [str(p) for p in result.problems]
    for site in ("site0", "site1", "site2"):
        records = [
            json.loads(line) for line in (cfg.out / "audit" / f"{site}.jsonl").read_text().splitlines()
        ]
        shares = [r for r in records if r["event"] == "alpha_share"]
        assert [r["round"] for r in shares] == [1, 2]
        charged = [
            r["payload"]
            for r in records
            if r["event"] == "privacy" and r["payload"]["mechanism"] == "alpha_scalars"
        ]
        assert all(c["noise"] == "shares" and c["colluders"] == 1 for c in charged)
        for record in shares:
            share = record["payload"]
            assert share["participants"] == 3 and share["colluders"] == 1
            assert [s for _, s in share["members"]] == ["site0", "site1", "site2"]
            unit = share["alpha_sigma"] * share["clip_norm"]
            assert math.isclose(share["share_std"], unit / math.sqrt(2), rel_tol=1e-12)
            assert share["alpha_sigma"] == charged[0]["event"]["noise_multiplier"]
    alphas = [row["alpha"] for row in outcome.metrics["per_round"]]
    assert len(alphas) == 2 and all(abs(sum(a) - 1) < 1e-9 for a in alphas)
    assert not np.allclose(alphas[1], alphas[0])
    html, _, _ = write_report(logs, cfg.out / "report.html", load_public_keys(keys))
    assert "each site added a share of σ·C/√(m − c)" in html.read_text()
