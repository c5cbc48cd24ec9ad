"""benchmarks/alpha_walk.py: FedTAR's meta-learner (the real classes) driven by noise alone. Seeded and
data-free, so the committed table is recomputed here in full, and the behaviour RESULTS reads from it
is asserted directly: many Adam steps at the configs' ψ rate saturate α on noise, a tenth of the
rate over as many steps does not, and still follows a steady pull."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from tests.scripts import ROOT, load_script

walk = load_script("benchmarks/alpha_walk.py")


@pytest.mark.slow
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


@pytest.mark.slow
def test_at_the_retuned_recipes_200_steps_the_configs_rate_saturates_and_the_scaled_rate_follows_a_pull() -> (
    None
):
    seeds = range(10)
    assert np.median([walk.walk(200, 5e-2, s, 0.0).max() for s in seeds]) > 0.9
    # lr × steps held at the 5-round recipe's 0.25: noise leaves α near uniform, a steady pull wins
    assert max(walk.walk(200, 1.25e-3, s, 0.0).max() for s in seeds) < 0.3
    assert all(np.argmax(walk.walk(200, 1.25e-3, s, walk.PULL)) == 0 for s in seeds)


# -- the default that replaced it (issue 63): floor, torch init, SGD at train.meta_travel / rounds --


def floored_committed() -> dict[str, Any]:
    return json.loads(
        (ROOT / "docs" / "results" / "fedtar-alpha-walk-floored.json").read_text(encoding="utf-8")
    )


@pytest.mark.slow
def test_the_committed_floored_table_is_what_the_script_computes_where_the_rule_binds() -> None:
    """Its rows at 5, 10 and 20 steps recomputed in full (every travel: where the noise walk is
    largest, so where the rule decides); the longer rows cost minutes and follow the same code."""
    committed = floored_committed()["rows"]
    short = walk.floored_rows(step_counts=(5, 10, 20))
    assert [r for r in committed if r[1] <= 20] == short, "stale: run python benchmarks/alpha_walk.py --write"
    assert len(committed) == len(walk.TRAVELS) * len(walk.STEP_COUNTS)


def test_the_config_default_travel_is_the_rules_choice_on_the_committed_rows() -> None:
    from secure_fed.config import TrainConfig

    defaults = TrainConfig()
    assert defaults.meta_travel == walk.chosen_travel(floored_committed()["rows"])
    assert (defaults.meta_optimizer, defaults.alpha_floor, defaults.meta_lr) == ("sgd", walk.FLOOR, None)


@pytest.mark.slow
def test_the_default_keeps_alpha_in_bounds_on_noise_and_follows_a_steady_pull() -> None:
    """At the default travel: on noise alone α stays near uniform at every length of run (where Adam
    at the old 5e-2 went one-hot by 50 steps), no α_t ever leaves [0.1, 0.6], and a steady pull half
    the noise's size puts the largest α on the pulled index in every seed by 200 steps."""
    from secure_fed.config import TrainConfig

    travel, seeds = TrainConfig().meta_travel, range(10)
    for steps in (5, 50, 200):
        noise = [walk.walk_floored(steps, travel, s, 0.0) for s in seeds]
        assert np.median([a.max() for a in noise]) <= walk.NOISE_LIMIT
        assert all(a.min() >= 0.1 - 1e-9 and a.max() <= 0.6 + 1e-9 for a in noise)
    old = [walk.walk(50, 5e-2, s, 0.0).max() for s in seeds]
    assert np.median(old) > 0.9
    pulled = [walk.walk_floored(200, travel, s, walk.PULL) for s in seeds]
    assert all(int(np.argmax(a)) == 0 and a[0] > 0.21 for a in pulled)
    # a steady pull alone (no noise) carries α₀ well above uniform but never past the floor's top
    alone = [walk.walk_floored(200, travel, s, walk.PULL, noise=0.0)[0] for s in seeds]
    assert min(alone) > 0.3 and max(alone) <= 0.6 + 1e-9
