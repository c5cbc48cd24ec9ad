"""Fixtures of the end-to-end runs."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest


@dataclass
class NoiseSpy:
    """Each round's clipped sums as the sites encode them (they never leave a site; kept here only
    to measure) and each sum the server decoded with its plan, in round order."""

    clipped: dict[int, list[np.ndarray]] = field(default_factory=dict)
    released: list[tuple[np.ndarray, object]] = field(default_factory=list)


@pytest.fixture
def noise_spy(monkeypatch: pytest.MonkeyPatch) -> NoiseSpy:
    """Measure a distributed run's released noise: the decoded sum minus the sites' clipped sums."""
    import secure_fed.dp.distributed.interface as mechanism
    import secure_fed.site.distributed as site_side

    spy = NoiseSpy()
    real_sum, real_decode = site_side.clipped_gradient_sum, mechanism.decode_sum

    def spy_sum(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        out = real_sum(*args, **kwargs)
        spy.clipped.setdefault(len(spy.released) + 1, []).append(out[0])
        return out

    def spy_decode(total, plan, seed):  # noqa: ANN001, ANN202
        out = real_decode(total, plan, seed)
        spy.released.append((out, plan))
        return out

    monkeypatch.setattr(site_side, "clipped_gradient_sum", spy_sum)
    monkeypatch.setattr(mechanism, "decode_sum", spy_decode)
    return spy
