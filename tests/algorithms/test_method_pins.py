"""One round's site update of each baseline, pinned: moving a method's site half out of FedTAR's
and FM2's learners into its own plugin (issue 66) must not move a single number.

The pins were taken from the learners as they branched on method names (commit ecbd2fc), before
the plugins: each is a summary of the upload (its length, sum, sum of squares and both ends), at
a tolerance far below any training effect (one step moves these sums by ~1e-3). SCAFFOLD runs two
rounds from a non-zero server control, with its site control kept through `memory`/`restore`, so
the control variates' correction and their carried state are both in the pin.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from secure_fed import registry
from secure_fed.site.learner import SiteStart
from tests.conftest import small_config

# (data.kind, method) → (length, sum, sum of squares, first value, last value) of each round's upload
PINS: dict[tuple[str, str], list[tuple[int, float, float, float, float]]] = {
    ("reports", "fedtar"): [
        (204003, 0.01606309681469753, 0.00010366116520676156, -5.813213647343218e-06, 0.0029296875)
    ],
    ("reports", "fedavg"): [
        (67977, 0.014363162309143807, 0.00027445224015658245, 1.1618656571954489e-05, 0.015625)
    ],
    ("reports", "fedprox"): [
        (67977, 0.013997342965956339, 0.00027092069963175543, 1.1618656571954489e-05, 0.015625)
    ],
    ("reports", "scaffold"): [
        (135953, 20.84807366067802, 14.973370639030447, 3.125600051134825e-05, 0.015563887543976307),
        (135953, -18.618926935296223, 16.605722976356198, -3.125003422610462e-05, -0.015641354955732822),
    ],
    ("imaging", "fedavg"): [
        (17515, -0.8907954099318669, 0.03558257580254375, 0.0013836909110978013, 0.03515625)
    ],
    ("imaging", "fedprox"): [
        (17515, -0.5406464579184966, 0.021002574990885644, 0.0013528258623409783, 0.03515625)
    ],
    ("imaging", "fedrep"): [
        (16865, 0.7743539330444111, 0.031643516287221965, 0.0008235695113398833, 0.03515625)
    ],
    ("imaging", "fedbn"): [
        (17355, -0.7675994184024386, 0.03527443976026842, 0.0013836909110978013, 0.03515625)
    ],
}


def _summary(upload: np.ndarray) -> tuple[int, float, float, float, float]:
    return (len(upload), float(upload.sum()), float((upload**2).sum()), float(upload[0]), float(upload[-1]))


def _uploads(
    kind: str, method: str, cache_dir: Path, out: Path
) -> list[tuple[int, float, float, float, float]]:
    overrides: dict[str, object] = {"fed__method": method, "train__threads": 1}
    if kind == "imaging":
        overrides |= {"data__kind": "imaging", "data__imaging__per_class": 8, "data__imaging__sites": 3}
    cfg = small_config(cache_dir, out, **overrides)
    folder = out / "site0"
    folder.mkdir(parents=True)
    learner = registry.learner_factory(kind)(cfg, "site0", folder, None)
    learner.start(SiteStart("site0", folder, "pin-run", None, None, None))
    state = registry.initial_state(cfg)
    dim = learner.dim()
    options: dict[str, object] = {}
    if method == "scaffold":  # a non-zero server control, so the correction c − c_k is exercised
        options = {"control": np.linspace(-1e-3, 1e-3, dim)}
    summaries = []
    for round_id in (1, 2) if method == "scaffold" else (1,):
        update = learner.local_update(round_id, method, state, None, options)
        summaries.append(_summary(update.upload))
        memory = learner.memory()
        learner.restore({k: np.array(v) for k, v in memory.items()})
    return summaries


CASES = [
    ("reports", "fedtar"),
    ("reports", "fedavg"),
    ("reports", "fedprox"),
    ("reports", "scaffold"),
    ("imaging", "fedavg"),
    ("imaging", "fedprox"),
    ("imaging", "fedrep"),
    ("imaging", "fedbn"),
]


@pytest.mark.parametrize(("kind", "method"), CASES)
def test_one_round_of_each_baseline_is_unchanged(
    kind: str, method: str, cache_dir: Path, tmp_path: Path
) -> None:
    got = _uploads(kind, method, cache_dir, tmp_path)
    want = PINS[(kind, method)]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g[0] == w[0]
        np.testing.assert_allclose(g[1:], w[1:], rtol=1e-9, atol=1e-12)
