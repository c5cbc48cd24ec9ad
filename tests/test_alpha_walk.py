"""benchmarks/alpha_walk.py: FedTAR's meta-learner (the real classes) driven by noise alone. Seeded and
data-free, so the committed table is recomputed here in full, and the behaviour RESULTS reads from it
is asserted directly: many Adam steps at the configs' ψ rate saturate α on noise, a tenth of the
rate over as many steps does not, and still follows a steady pull."""

from __future__ import annotations

import json

import numpy as np

from tests.scripts import ROOT, load_script

walk = load_script("benchmarks/alpha_walk.py")


def test_committed_table_is_what_the_script_computes() -> None:
    committed = json.loads((ROOT / "docs" / "results" / "fedtar-alpha-walk.json").read_text(encoding="utf-8"))
    assert committed["rows"] == walk.rows(), "stale: run python benchmarks/alpha_walk.py --write"


def test_fifty_steps_at_the_configs_rate_saturate_alpha_on_noise_and_a_tenth_of_it_does_not() -> None:
    seeds = range(10)
    fast = [walk.walk(50, 5e-2, s, 0.0).max() for s in seeds]
    slow = [walk.walk(50, 5e-3, s, 0.0).max() for s in seeds]
    assert np.median(fast) > 0.9  # one-hot on an index the noise chose
    assert max(slow) < 0.3  # uniform is 0.2
    # under a steady pull the slow walk ends on the pulled index where the fast one often does not
    pulled_slow = [walk.walk(50, 5e-3, s, walk.PULL) for s in seeds]
    pulled_fast = [walk.walk(50, 5e-2, s, walk.PULL) for s in seeds]
    wrong = [sum(int(np.argmax(a) != 0) for a in runs) for runs in (pulled_slow, pulled_fast)]
    assert wrong[0] < wrong[1], wrong
    assert all(a[0] > 0.2 for a in pulled_slow)


def test_at_the_retuned_recipes_200_steps_the_configs_rate_saturates_and_the_scaled_rate_follows_a_pull() -> (
    None
):
    seeds = range(10)
    assert np.median([walk.walk(200, 5e-2, s, 0.0).max() for s in seeds]) > 0.9
    # lr × steps held at the 5-round recipe's 0.25: noise leaves α near uniform, a steady pull wins
    assert max(walk.walk(200, 1.25e-3, s, 0.0).max() for s in seeds) < 0.3
    assert all(np.argmax(walk.walk(200, 1.25e-3, s, walk.PULL)) == 0 for s in seeds)
