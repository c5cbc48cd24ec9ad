"""Partial participation samples the stated fraction, reproducibly, never below the round's floor."""

from __future__ import annotations

from collections import Counter

import pytest

from secure_fed.server.participation import sample_sites


@pytest.mark.parametrize(("fraction", "expected"), [(0.5, 5), (0.3, 3), (1.0, 10), (0.05, 3)])
def test_the_stated_fraction_is_sampled(fraction: float, expected: int) -> None:
    nodes = list(range(10))
    picks = [sample_sites(nodes, fraction, seed=1, round_id=r, floor=3) for r in range(1, 200)]
    assert {len(p) for p in picks} == {expected}
    assert all(set(p) <= set(nodes) and p == sorted(set(p)) for p in picks)
    if expected < 10:  # every site gets its turn, about equally
        counts = Counter(n for p in picks for n in p)
        share = [counts[n] / len(picks) for n in nodes]
        assert min(share) > 0.6 * expected / 10 and max(share) < 1.4 * expected / 10


def test_the_sample_is_reproducible_per_seed_and_round() -> None:
    nodes = list(range(8))
    assert sample_sites(nodes, 0.5, 3, 4, 2) == sample_sites(list(reversed(nodes)), 0.5, 3, 4, 2)
    rounds = {tuple(sample_sites(nodes, 0.5, 3, r, 2)) for r in range(1, 30)}
    assert len(rounds) > 5  # rounds differ


def test_a_bad_fraction_is_refused() -> None:
    with pytest.raises(ValueError, match="fed.participation"):
        sample_sites([1, 2, 3], 0.0, 0, 1, 1)


@pytest.mark.slow
def test_a_run_trains_only_the_sampled_sites_and_charges_only_them(make_config) -> None:
    """DP + SecAgg+ over 4 sites at participation 0.5: each round samples max(3, 2) sites (a secure
    sum never has fewer than 3), the sample is in the server's log, and each site's ledger holds
    DP-SGD releases for exactly the rounds it was sampled in."""
    import json
    from pathlib import Path

    from secure_fed.launch.runner import run_inprocess

    cfg = make_config(
        data__synth__sites=4,
        dp__enabled=True,
        dp__target_epsilon=8.0,
        fed__rounds=2,
        fed__participation=0.5,
        fed__method="fedavg",
    )
    metrics = run_inprocess(cfg, cfg.out).metrics

    def log(party: str) -> list[dict]:
        return [json.loads(x) for x in (Path(cfg.out) / "audit" / f"{party}.jsonl").read_text().splitlines()]

    sampled = {r["round"]: r["payload"]["sampled"] for r in log("server") if r["event"] == "participation"}
    assert sorted(sampled) == [1, 2] and all(len(s) == 3 for s in sampled.values())
    assert [sorted(r["participants"]) for r in metrics["per_round"]] == [sorted(sampled[r]) for r in (1, 2)]
    for site in ("site0", "site1", "site2", "site3"):
        charged = sorted(
            r["round"] for r in log(site) if r["event"] == "privacy" and r["payload"]["mechanism"] == "dp_sgd"
        )
        assert charged == [r for r, s in sampled.items() if site in s], site
