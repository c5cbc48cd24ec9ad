"""The GMM histogram release kept in the site's private folder, so a restart reuses it."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import numpy as np
import pytest

from secure_fed.dp.histogram import gaussian_histogram, persisted_gaussian_histogram
from secure_fed.dp.keystream import NoiseStream

CELLS = np.array([0, 0, 3, 5, 5, 5])


def stream(n: int) -> NoiseStream:
    return NoiseStream(bytes([n]) * 32)


def test_first_release_is_kept_and_a_restart_gets_it_back_without_new_noise(tmp_path: Path) -> None:
    path = tmp_path / "gmm-histogram.json"
    noisy, fresh = persisted_gaussian_histogram(CELLS, 8, 2.0, stream(1), path)
    assert fresh
    assert np.array_equal(noisy, gaussian_histogram(CELLS, 8, 2.0, stream(1)))  # the plain mechanism
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    stored = json.loads(path.read_text())
    assert set(stored) == {"format", "sigma", "counts"}  # the output only: no noise, no key
    restarted = stream(2)
    again, fresh = persisted_gaussian_histogram(CELLS, 8, 2.0, restarted, path)
    assert not fresh and np.array_equal(again, noisy)  # bit for bit (JSON keeps float64 exactly)
    assert restarted.bytes_drawn == 0  # nothing new drawn, nothing new released
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gmm-histogram.json"]


def test_a_kept_histogram_of_another_configuration_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "gmm-histogram.json"
    persisted_gaussian_histogram(CELLS, 8, 2.0, stream(1), path)
    with pytest.raises(ValueError, match="sigma 2.0.*sigma 3.0"):
        persisted_gaussian_histogram(CELLS, 8, 3.0, stream(2), path)
    with pytest.raises(ValueError, match="8 cells.*9 cells"):
        persisted_gaussian_histogram(CELLS, 9, 2.0, stream(2), path)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not a noisy histogram this site wrote"):
        persisted_gaussian_histogram(CELLS, 8, 2.0, stream(2), path)
    path.write_text(json.dumps({"format": "other", "sigma": 2.0, "counts": [0.0] * 8}))
    with pytest.raises(ValueError, match="not a noisy histogram this site wrote"):
        persisted_gaussian_histogram(CELLS, 8, 2.0, stream(2), path)
