"""`audit verify` re-derives noise sized for the confirmed survivors from each site's own signed
records (secure_fed.verifier.distributed_checks.reveal_findings / removal_findings): a reveal for a
survivor count m outside [h, the set the site confirmed], layers other than those its survivor
counts (from h) free at m, a kept variance other than mu_total/(r − c) for its largest count
r ≤ m, a second reveal of a round, and a server removal no site logged are each named, with the
round and the site."""

from __future__ import annotations

from typing import Any

import pytest

from secure_fed.verifier.distributed_checks import SiteRounds, distributed_findings, removal_findings

MU = 120.0
PLAN = {"type": "skellam_sum", "mu_total": MU, "honest_min": 4, "colluders": 1}
SET = tuple(f"site{k}@{k}" for k in range(5))


def _reveal(
    m: int = 5, layers: list[int] | None = None, kept: float | None = None, **extra: Any
) -> dict[str, Any]:
    return {
        "site": "site0",
        "survivors": m,
        "confirmed": [f"site{k}" for k in range(m)],
        "layers": list(range(m - 4)) if layers is None else layers,
        "kept_variance": MU / (m - 1) if kept is None else kept,
        "rungs": [4, 5],
        **extra,
    }


def _site(reveals: list[dict[str, Any]], survivors: tuple[str, ...] = SET) -> SiteRounds:
    log = SiteRounds("site0.jsonl", "site0")
    log.plans[1] = (3, PLAN)
    log.survivors[1] = (7, survivors, 4)
    log.unmasked = {1}
    log.reveals[1] = [(9 + k, r) for k, r in enumerate(reveals)]
    return log


def _reasons(log: SiteRounds) -> list[str]:
    return [f.reason for f in distributed_findings([log])]


@pytest.mark.parametrize("m", [4, 5])
def test_an_honest_reveal_verifies(m: int) -> None:
    assert _reasons(_site([_reveal(m)])) == []


def test_a_site_with_no_seeds_may_reveal_nothing() -> None:
    assert _reasons(_site([_reveal(5, layers=[], kept=MU / 3)])) == []


@pytest.mark.parametrize(
    ("reveal", "survivors", "says"),
    [
        (_reveal(5), SET[:4], "revealed noise layers for 5 survivors, outside [h = 4, the 4 it confirmed]"),
        (
            _reveal(5, confirmed=["site0", "site1", "site2", "site3"]),
            SET,
            "without naming 5 confirming sites",
        ),
        (_reveal(5, layers=[0, 1]), SET, "revealed noise layers [0, 1] for 5 survivors"),
        (_reveal(5, kept=MU / 5), SET, "logs a kept noise variance"),
        (_reveal(3, layers=[]), SET, "outside [h = 4"),
        (_reveal(5, rungs=[3, 4, 5]), SET, "do not start at h = 4"),
    ],
)
def test_a_reveal_the_records_do_not_bear_out_is_named(
    reveal: dict[str, Any], survivors: tuple[str, ...], says: str
) -> None:
    reasons = _reasons(_site([reveal], survivors))
    assert len(reasons) == 1 and reasons[0].startswith("round 1: site0 ") and says in reasons[0], reasons


def test_a_second_reveal_of_a_round_is_named() -> None:
    reasons = _reasons(_site([_reveal(5), _reveal(5)]))
    assert reasons == ["round 1: site0 revealed its noise layers 2 times; a site reveals once a round"]


def test_a_removal_no_site_logged_is_named() -> None:
    logs = [_site([_reveal(5)])]
    assert removal_findings(logs, [("server.jsonl", 4, 1, {"site0": 5})]) == []
    (finding,) = removal_findings(logs, [("server.jsonl", 4, 1, {"site0": 4})])
    assert finding.path == "server.jsonl" and "removed site0's noise layers for 4 survivors" in finding.reason
    (finding,) = removal_findings(
        [_site([_reveal(5, layers=[], kept=MU / 3)])], [("server.jsonl", 4, 1, {"site0": 5})]
    )
    assert "holds no reveal of layers for 5 survivors" in finding.reason
