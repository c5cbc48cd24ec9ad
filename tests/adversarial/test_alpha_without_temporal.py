"""A server asks a site for α scalars although the run's method never releases them (FedAvg): the
worst case is a round the site did train and charge. The site refuses, and nothing is charged to its
validation patients, before or after."""

from __future__ import annotations

import numpy as np
import pytest

from secure_fed.registry import initial_state
from secure_fed.site.guard import Refusal
from secure_fed.site.runtime import SiteRuntime


def test_alpha_for_a_trained_fedavg_round_is_refused_and_uncharged(make_config) -> None:
    cfg = make_config(dp__enabled=True, dp__target_epsilon=8.0, dp__sample_rate=0.5, fed__method="fedavg")
    runtime = SiteRuntime.create(cfg, "site0")
    start = initial_state(cfg)
    assert runtime.train(1, "fedavg", start, {})["status"] == "ok"  # admitted and charged
    assert runtime.privacy is not None
    assert runtime.privacy.ledger.populations("site0") == ["train"]
    directions = np.full((cfg.data.max_visits, start.size), 1e-3)
    for _ in range(2):  # asked again: still refused, never a fresh release
        with pytest.raises(Refusal, match="releases no α scalars"):
            runtime.hypergrad(1, start, directions)
    assert "scalars" not in runtime.stash
    assert runtime.privacy.ledger.populations("site0") == ["train"]
