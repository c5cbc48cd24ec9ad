"""A malicious server facing real DP sites (in-process)."""

from __future__ import annotations

import pytest

from tests.adversarial.harness import MaliciousServer


@pytest.fixture
def server(make_config, one_torch_thread) -> MaliciousServer:
    cfg = make_config(
        dp__enabled=True, dp__target_epsilon=8.0, dp__sample_rate=0.5, fed__method="fedtar", fed__rounds=2
    )
    return MaliciousServer(cfg)
