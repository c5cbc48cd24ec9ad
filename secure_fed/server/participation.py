"""Partial participation: which sites the server asks to train in a round.

The sample is drawn from a generator keyed by (seed, round), so a resumed run asks the same sites
again, and it is logged. It is never smaller than the round's floor (`fed.min_sites`, and 3 under
SecAgg+: a secure sum of two tells each of them the other's update). Not being sampled costs a site
nothing: it trains on no patient, and its ledger is charged only for rounds it trains. No privacy
amplification by site sampling is claimed: the server picks the sample and knows it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def sample_sites(nodes: Sequence[int], fraction: float, seed: int, round_id: int, floor: int) -> list[int]:
    """max(floor, ⌈fraction · n⌉) of `nodes` (all of them when that is more than n), sorted."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fed.participation must be in (0, 1], got {fraction}")
    ordered = sorted(nodes)
    want = min(len(ordered), max(floor, math.ceil(fraction * len(ordered))))
    if want == len(ordered):
        return ordered
    rng = np.random.default_rng([seed, round_id, 0x5A4D])
    return sorted(int(n) for n in rng.choice(ordered, size=want, replace=False))
