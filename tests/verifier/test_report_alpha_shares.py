"""The report says which the α release was, from the run's logged configuration: the site's own
Gaussian release (site mode, or a sum in the clear), or a share of its CKKS sum's noise sized for
m − c of m participants (distributed DP with HE), with the c its ε holds against."""

from __future__ import annotations

from dataclasses import asdict
from types import SimpleNamespace
from typing import Any

from secure_fed.audits.payloads import run_settings
from secure_fed.verifier.report import mechanism_words
from secure_fed.verifier.report_sites import _releases


def _snapshot(noise: str, he: bool) -> dict[str, object]:
    return {
        "dp": {"enabled": True, "noise": noise, "honest_min": 4, "colluders": 1},
        "he": {"enabled": he},
        "secagg": {"enabled": True},
    }


def test_distributed_with_ckks_says_the_noise_is_shared_and_against_whom() -> None:
    words = mechanism_words("alpha_scalars", asdict(run_settings(_snapshot("distributed", True))))
    assert "each site added a share of σ·C/√(m − c)" in words
    assert "at most c = 1 colluding sites" in words and "added by the site itself" not in words


def test_site_mode_and_a_plain_sum_say_the_site_added_it_all() -> None:
    for noise, he in (("site", True), ("site", False), ("distributed", False)):
        words = mechanism_words("alpha_scalars", asdict(run_settings(_snapshot(noise, he))))
        assert "Gaussian noise of σ·C added by the site itself" in words and "share" not in words


def test_the_sites_release_line_names_its_share() -> None:
    row: Any = SimpleNamespace(mechanism="alpha_scalars")  # _releases reads a row's mechanism only
    shared = _releases([1], [row], {"secagg+"}, run_settings(_snapshot("distributed", True)), True, True)
    (alpha,) = [r for r in shared if r.what == "α scalars"]
    assert (
        "this site's share of the sum's noise, sized for m − c of the m sites in the sum (c = 1)" in alpha.how
    )
    own = _releases([1], [row], {"secagg+"}, run_settings(_snapshot("site", True)), True, True)
    (alpha,) = [r for r in own if r.what == "α scalars"]
    assert alpha.how.endswith("clipped and noised per patient first")
