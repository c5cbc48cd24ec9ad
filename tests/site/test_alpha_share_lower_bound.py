"""The empirical α audit where α's noise is shares of its CKKS sum: the view is the sum less the c
colluders' shares, i.e. the n − c honest sites' shares drawn by the site's own `alpha_share` for n
participants, and the stated ε is one release's at σ_α (the whole noise the ledger charged)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from secure_fed.config import RunConfig
from secure_fed.site.lower_bound import alpha_share_lower_bound
from secure_fed.site.private import SitePrivacy
from secure_fed.verifier.lower_bound import check_record
from tests.conftest import DISTRIBUTED_DP


@pytest.fixture
def privacy(make_config: Callable[..., RunConfig], tmp_path: Path) -> tuple[SitePrivacy, RunConfig]:
    cfg = make_config(
        **{**DISTRIBUTED_DP, "dp__honest_min": 4},
        data__synth__sites=5,
        fed__method="fedtar",
        he__enabled=True,
        he__keys_dir=str(tmp_path / "keys"),  # read only when a site takes part in a CKKS round
    )
    return SitePrivacy.plan(cfg, "site0", 16, 8, noise_key=bytes(32)), cfg


def test_each_release_is_the_honest_sites_shares_sized_for_the_run(
    privacy: tuple[SitePrivacy, RunConfig], monkeypatch: pytest.MonkeyPatch
) -> None:
    site, cfg = privacy
    assert site.alpha_shared and site.colluders == 1
    sized: list[int] = []
    original = site.alpha_share

    def spy(clipped: np.ndarray, participants: int, noise: Any) -> np.ndarray:
        sized.append(participants)
        return original(clipped, participants, noise)

    monkeypatch.setattr(site, "alpha_share", spy)
    payload = alpha_share_lower_bound(site, cfg, 40, 10, 0.95, np.random.default_rng(0))
    assert sized == [5] * (40 * 4)  # n − c = 4 honest shares a release, each sized for n = 5
    assert payload["mechanism"] == "alpha_scalars" and payload["population"] == "validation"
    assert payload["noise"] == "shares" and payload["participants"] == 5 and payload["colluders"] == 1
    assert payload["noise_multiplier"] == site.alpha_sigma
    assert "less c = 1 colluders' shares" in payload["adversary_view"]
    assert check_record(payload)[1] is None  # the record `audit verify` re-derives ε̂ from


def test_the_view_carries_the_charged_noise(privacy: tuple[SitePrivacy, RunConfig]) -> None:
    """Four honest shares of σ_α·C_α/√4 add up to σ_α·C_α (measured on 4,000 draws)."""
    from secure_fed.dp.keystream import NoiseStream

    site, _ = privacy
    noise = NoiseStream(bytes(32))
    draws = np.array([sum(site.alpha_share(np.zeros(3), 5, noise) for _ in range(4)) for _ in range(4000)])
    ratio = float(draws.std() / (site.alpha_sigma * site.alpha_clip))
    assert 0.97 < ratio < 1.03, ratio


def test_the_report_says_what_the_alpha_audit_measured(privacy: tuple[SitePrivacy, RunConfig]) -> None:
    from secure_fed.verifier.report import _empirical_html
    from secure_fed.verifier.report_data import ReportData
    from secure_fed.verifier.verdict import verdict

    site, cfg = privacy
    data = ReportData()
    data.empirical_audits = [alpha_share_lower_bound(site, cfg, 40, 10, 0.95, np.random.default_rng(1))]
    page = _empirical_html(data, verdict(data.verification))
    assert "the α sum as a server with c = 1 colluding sites sees it" in page
    assert "the 5 sites&#x27; noise shares less the colluders&#x27;" in page  # escaped as HTML
