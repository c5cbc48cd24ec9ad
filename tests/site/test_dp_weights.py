"""fed.dp_weights: site-mode DP's server mean weighs each site's private update by a public weight,
1 (the default) or the patient count the site's operator declares public (`fed.public_patients`,
never derived from its data); the weight must survive the secure sum's clipping, and a site refuses
to plan when it would not, or when public_size finds no count declared for it."""

from __future__ import annotations

import numpy as np
import pytest

from secure_fed.config import ConfigError, build_config
from secure_fed.server.strategies.fedavg import FedAvg
from secure_fed.site.coarsen import check_private_weight, private_weight
from secure_fed.site.private import SitePrivacy
from tests.server.test_strategies import StubTransport, context

# declared public counts for the hospital config's site0, site2 and site4 (2,800, 1,260 and 210
# training patients): round figures their operators chose
DECLARED = {"site0": 2000, "site1": 1000, "site2": 200}
NODES = {0: "site0", 1: "site1", 2: "site2"}


def _cfg(weights: str, count_scale: float = 4096.0, declared: dict[str, int] | None = None):
    fed: dict[str, object] = {"method": "fedavg", "dp_weights": weights}
    if weights == "public_size":
        fed["public_patients"] = DECLARED if declared is None else declared
    return build_config(
        {
            "fed": fed,
            "dp": {"enabled": True, "target_epsilon": 8.0, "delta": 1e-5, "sample_rate": 0.1},
            "train": {"local_epochs": 1},
            "secagg": {"count_scale": count_scale},
        }
    )


def test_the_default_weighs_every_site_once_and_public_size_by_its_declared_count() -> None:
    assert build_config({}).fed.dp_weights == "equal"
    assert [private_weight(_cfg("equal"), s) for s in NODES.values()] == [1 / 4096] * 3
    assert [private_weight(_cfg("public_size"), s) for s in NODES.values()] == [
        2000 / 4096,
        1000 / 4096,
        200 / 4096,
    ]


def test_public_size_needs_declared_counts() -> None:
    with pytest.raises(ConfigError, match="fed.public_patients") as err:
        build_config({"fed": {"dp_weights": "public_size"}})
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=r"no count for site1: add site1 = ") as missing:
        private_weight(_cfg("public_size", declared={"site0": 2000}), "site1")
    assert "\n" not in str(missing.value)


@pytest.mark.parametrize(("weights", "expected"), [("equal", [1, 1, 1]), ("public_size", [2000, 1000, 200])])
def test_the_server_mean_follows_the_sites_public_weights(weights: str, expected: list[int]) -> None:
    cfg = _cfg(weights)
    start = np.array([1.0, -1.0])
    deltas = {0: np.array([1.0, 0.0]), 1: np.array([0.0, 1.0]), 2: np.array([-1.0, -1.0])}
    uploads = {}
    for node, site in NODES.items():  # what a site's local_update sends: w·Δ, then w
        w = private_weight(cfg, site)
        uploads[node] = np.concatenate([w * deltas[node], [w]])
    result = FedAvg(2, cfg).run_round(context(cfg, StubTransport(uploads), list(NODES)), start)
    mean = sum(e * deltas[k] for k, e in zip(NODES, expected, strict=True)) / sum(expected)
    np.testing.assert_allclose(result.global_state, start + mean, atol=1e-12)


def test_a_weight_the_secure_sum_would_clip_is_refused_before_anything_is_released() -> None:
    cfg = _cfg("public_size", count_scale=1024.0)  # site0's 2000 / 1024 > secagg.clip = 1
    with pytest.raises(ValueError, match=r"secagg.count_scale to 2000 or more") as err:
        check_private_weight(cfg, "site0")
    assert "\n" not in str(err.value) and "fed.dp_weights = 'public_size'" in str(err.value)
    with pytest.raises(ValueError, match="secagg.count_scale"):
        SitePrivacy.plan(cfg, "site0", n_train=2800, n_val=400, noise_key=bytes(32), alpha=False)
    check_private_weight(cfg, "site1")  # 1000 / 1024: within the clip
    check_private_weight(_cfg("equal", count_scale=1024.0), "site0")  # equal weights are always 1/scale
