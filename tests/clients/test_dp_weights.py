"""fed.dp_weights: site-mode DP's server mean weighs each site's private update by a public weight,
1 (the default) or the power-of-two floor of its training patients; the weight must survive the
secure sum's clipping, and a site refuses to plan when it would not."""

from __future__ import annotations

import numpy as np
import pytest

from secure_fed.clients.coarsen import check_private_weight, private_weight
from secure_fed.clients.private import SitePrivacy
from secure_fed.config import build_config
from secure_fed.server.strategies.fedavg import FedAvg
from tests.server.test_strategies import StubTransport, context

# the hospital config's train patients at site0, site2 and site4
SIZES = {0: 2800, 1: 1260, 2: 210}


def _cfg(weights: str, count_scale: float = 4096.0):
    return build_config(
        {
            "fed": {"method": "fedavg", "dp_weights": weights},
            "dp": {"enabled": True, "target_epsilon": 8.0, "delta": 1e-5, "sample_rate": 0.1},
            "train": {"local_epochs": 1},
            "secagg": {"count_scale": count_scale},
        }
    )


def test_the_default_weighs_every_site_once_and_public_size_by_its_floor() -> None:
    assert build_config({}).fed.dp_weights == "equal"
    assert [private_weight(_cfg("equal"), n) for n in SIZES.values()] == [1 / 4096] * 3
    # floors 2048, 1024, 128: the ranges the sites' privacy records already give
    assert [private_weight(_cfg("public_size"), n) for n in SIZES.values()] == [0.5, 0.25, 128 / 4096]


@pytest.mark.parametrize(("weights", "expected"), [("equal", [1, 1, 1]), ("public_size", [2048, 1024, 128])])
def test_the_server_mean_follows_the_sites_public_weights(weights: str, expected: list[int]) -> None:
    cfg = _cfg(weights)
    start = np.array([1.0, -1.0])
    deltas = {0: np.array([1.0, 0.0]), 1: np.array([0.0, 1.0]), 2: np.array([-1.0, -1.0])}
    uploads = {}
    for node, n in SIZES.items():  # what a site's local_update sends: w·Δ, then w
        w = private_weight(cfg, n)
        uploads[node] = np.concatenate([w * deltas[node], [w]])
    result = FedAvg(2, cfg).run_round(context(cfg, StubTransport(uploads), list(SIZES)), start)
    mean = sum(e * deltas[k] for k, e in zip(SIZES, expected, strict=True)) / sum(expected)
    np.testing.assert_allclose(result.global_state, start + mean, atol=1e-12)


def test_a_weight_the_secure_sum_would_clip_is_refused_before_anything_is_released() -> None:
    cfg = _cfg("public_size", count_scale=1024.0)  # site0's 2048 / 1024 = 2 > secagg.clip = 1
    with pytest.raises(ValueError, match=r"secagg.count_scale to 2048 or more") as err:
        check_private_weight(cfg, 2800)
    assert "\n" not in str(err.value) and "fed.dp_weights = 'public_size'" in str(err.value)
    with pytest.raises(ValueError, match="secagg.count_scale"):
        SitePrivacy.plan(cfg, "site0", n_train=2800, n_val=400, noise_key=bytes(32), alpha=False)
    check_private_weight(cfg, 1260)  # 1024 / 1024 = 1: within the clip
    check_private_weight(_cfg("equal", count_scale=1024.0), 2800)  # equal weights are always 1/scale
