"""`audit verify`'s re-derivation of α's noise shares from the sites' records (pure: `alpha_shares`)."""

from __future__ import annotations

import math
from typing import Any

from secure_fed.verifier.alpha_shares import alpha_share_findings
from secure_fed.verifier.distributed_checks import SiteRounds

SIGMA, CLIP = 9.06, 0.01
SITES = [f"site{i}" for i in range(5)]
MEMBERS = [[i, s] for i, s in enumerate(SITES)]
PLAN = {"type": "skellam_sum", "mu_total": 100.0, "honest_min": 4, "colluders": 1}


def _share(m: int = 5, c: int = 1, **change: Any) -> dict[str, Any]:
    return {
        "participants": m,
        "colluders": c,
        "members": MEMBERS[:m],
        "alpha_sigma": SIGMA,
        "clip_norm": CLIP,
        "share_std": SIGMA * CLIP / math.sqrt(max(m - c, 1)),
        "share_over_sigma": 1 / math.sqrt(max(m - c, 1)),
        **change,
    }


def _site(name: str, share: dict[str, Any] | None = None, **charge: Any) -> SiteRounds:
    log = SiteRounds(f"{name}.jsonl", name)
    log.plans[1] = (3, PLAN)
    log.alpha_charges[1] = (
        4,
        {
            "event": {"type": "gaussian", "noise_multiplier": SIGMA},
            "clip_norm": CLIP,
            "noise": "shares",
            **charge,
        },
    )
    log.alpha_shares[1] = [(9, share or _share())]
    return log


def _reasons(logs: list[SiteRounds]) -> list[str]:
    return [f.reason for f in alpha_share_findings(logs)]


def test_shares_sized_by_the_rule_for_one_list_pass() -> None:
    assert _reasons([_site(s) for s in SITES]) == []
    assert _reasons([_site(s, _share(4)) for s in SITES[:4]]) == []


def test_a_recorded_m_that_is_not_the_participants_listed_is_named() -> None:
    inflated = _share(5, members=MEMBERS[:4])  # std for five, four listed
    [finding] = alpha_share_findings([_site("site0", inflated)])
    assert finding.path == "site0.jsonl" and finding.line == 9
    assert finding.reason.startswith(
        "round 1: site0 logged an α share sized for m = 5 participants but lists 4"
    )


def test_a_share_smaller_than_the_rule_gives_is_named() -> None:
    small = _share(share_std=SIGMA * CLIP / 3, share_over_sigma=1 / 3)
    [reason] = _reasons([_site("site0", small)])
    assert "drew an α share of std 0.0302 (0.333333 × σ_α·C_α) for m = 5, c = 1" in reason


def test_a_share_sized_for_another_sigma_or_c_than_charged_is_named() -> None:
    [reason] = _reasons([_site("site0", _share(alpha_sigma=SIGMA / 2, share_std=SIGMA * CLIP / 4))])
    assert "sized its α share for σ_α = 4.53" in reason and "charged σ_α = 9.06" in reason
    [reason] = _reasons([_site("site0", _share(5, 0, share_std=SIGMA * CLIP / math.sqrt(5)))])
    assert "sized its α share for c = 0 colluders; its distributed plan says c = 1" in reason
    [reason] = _reasons([_site("site0", noise=None)])
    assert "whose α release its privacy record calls its own" in reason


def test_no_honest_share_two_shares_and_a_sum_it_is_not_in_are_named() -> None:
    [reason] = _reasons([_site("site0", _share(2, 2, members=MEMBERS[:2], share_std=1.0))])
    assert "for m = 2 participants with c = 2: no honest share" in reason
    log = _site("site0")
    log.alpha_shares[1].append((12, _share()))
    [finding] = alpha_share_findings([log])
    assert finding.line == 12 and "drew 2 α noise shares" in finding.reason
    [reason] = _reasons([_site("site4", _share(4))])
    assert "for a sum it is not listed in" in reason


def test_sites_that_sized_for_different_lists_are_named() -> None:
    logs = [_site("site0", _share(5))] + [_site(s, _share(4)) for s in SITES[1:4]]
    [finding] = alpha_share_findings(logs)
    assert finding.path == "site0.jsonl"
    assert "the sites sized their α shares for different participant lists" in finding.reason
    assert "site1, site2, site3 for 4 participants; site0 for 5 participants" in finding.reason
