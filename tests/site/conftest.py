"""Fixtures of the site-side tests."""

from __future__ import annotations

import pytest

from secure_fed.site import lower_bound


@pytest.fixture
def pinned_canary_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The canary holder's seed fixed. A correct release is flagged in about 1 % of measurements at the test
    cohort's size (tests/dp/test_release_lower_bounds.py measures the rate), so an unpinned end-to-end
    measurement failed about one suite in a hundred: once, 17 of 20 guesses right on the GMM histogram
    gave ε̂ 0.644 over its stated 0.400."""
    monkeypatch.setattr(lower_bound, "fresh_seed", lambda: 20261204)
