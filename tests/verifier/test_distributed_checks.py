"""`audit verify`'s distributed-DP checks on what the sites' logs say (pure: `distributed_checks`)."""

from __future__ import annotations

from secure_fed.verifier.distributed_checks import SiteRounds, distributed_findings

PLAN = {"type": "skellam_sum", "mu_total": 100.0, "gamma": 0.01, "bits": 32, "honest_min": 3, "colluders": 1}


def _site(
    name: str, plan: dict | None = None, survivors: tuple[str, ...] | None = None, unmasked: bool = True
) -> SiteRounds:
    log = SiteRounds(f"{name}.jsonl", name)
    log.plans[1] = (3, plan or PLAN)
    if survivors is not None:
        log.survivors[1] = (7, survivors, 3)
    if unmasked:
        log.unmasked.add(1)
    return log


ALL = ("site0", "site1", "site2")


def test_one_plan_and_one_confirmed_set_of_h_sites_passes() -> None:
    assert distributed_findings([_site(s, survivors=ALL) for s in ALL]) == []


def test_a_site_on_another_plan_is_named_with_the_round_and_the_fields() -> None:
    logs = [
        _site("site0", {**PLAN, "mu_total": 40.0}, ALL),
        _site("site1", survivors=ALL),
        _site("site2", survivors=ALL),
    ]
    [finding] = distributed_findings(logs)
    assert finding.path == "site0.jsonl" and finding.line == 3
    assert finding.reason.startswith(
        "round 1: site0's distributed-DP plan differs from site1, site2's in mu_total"
    )


def test_sites_that_confirmed_different_survivor_sets_are_named() -> None:
    logs = [
        _site("site0", survivors=ALL),
        _site("site1", survivors=ALL),
        _site("site2", survivors=("site0", "site2", "site3")),
    ]
    [finding] = distributed_findings(logs)
    assert finding.path == "site2.jsonl"
    assert "round 1: the sites confirmed different survivor sets" in finding.reason
    assert "site0, site1 confirmed {site0, site1, site2}" in finding.reason


def test_a_set_below_h_and_an_unmask_without_a_confirmed_set_fail() -> None:
    small = _site("site0", survivors=("site0", "site1"))
    missing = _site("site1")
    reasons = [f.reason for f in distributed_findings([small, missing])]
    assert "round 1: site0 confirmed a survivor set of 2 sites, fewer than h = 3" in reasons
    assert any(
        r.startswith("round 1: site1 answered an unmask request under distributed DP but its log holds no")
        for r in reasons
    )


def test_site_mode_logs_are_not_held_to_it() -> None:
    log = SiteRounds("site0.jsonl", "site0")
    log.unmasked.add(1)  # SecAgg+ in site mode: no skellam_sum event, no consistency step
    assert distributed_findings([log]) == []


def test_a_site_whose_plan_changes_between_its_rounds_is_named() -> None:
    """Issue 62: every site of each round on one plan, yet the plan of a site changed mid-run (a
    round count a later hello moved): each round is consistent, the run is not."""
    logs = [_site(s, survivors=ALL) for s in ALL]
    for log in logs:
        log.plans[2] = (9, {**PLAN, "mu_total": 40.0})
        log.survivors[2] = (11, ALL, 3)
        log.unmasked.add(2)
    reasons = [(f.path, f.line, f.reason) for f in distributed_findings(logs)]
    assert [(path, line) for path, line, _ in reasons] == [(f"{s}.jsonl", 9) for s in ALL]
    assert all(
        r.startswith(f"round 2: {s}'s distributed-DP plan differs from its own plan of round 1 in mu_total")
        for (_, _, r), s in zip(reasons, ALL, strict=True)
    )


def test_a_site_in_a_rounds_sum_without_a_share_charged_for_it_is_named() -> None:
    """Issue 62: a release of round 1 re-sent into round 2's secure sum; the others charged round 2."""
    victim = _site("site0", survivors=None, unmasked=False)
    victim.survivors[2] = (12, ALL, 3)
    victim.unmasked.add(2)
    others = []
    for name in ALL[1:]:
        log = SiteRounds(f"{name}.jsonl", name)
        log.plans[2] = (3, PLAN)
        log.survivors[2] = (7, ALL, 3)
        log.unmasked.add(2)
        others.append(log)
    [finding] = distributed_findings([victim, *others])
    assert finding.path == "site0.jsonl" and finding.line == 12
    assert finding.reason.startswith(
        "round 2: site0 took part in round 2's secure sum but its log charges no distributed-DP share "
        "for round 2 (its shares are charged for round(s) 1)"
    )
