"""One round's site update of each baseline, pinned: moving a method's site half out of FedTAR's
and FM2's learners into its own plugin (issue 66) must not move a single number.

The pins were taken from the learners as they branched on method names (commit ecbd2fc), before
the plugins: each is a summary of the upload (its length, sum, sum of squares and both ends), at
a tolerance far below any training effect (one step moves these sums by ~1e-3). SCAFFOLD runs two
rounds from a non-zero server control, with its site control kept through `memory`/`restore`, so
the control variates' correction and their carried state are both in the pin. A pin holds on the
CPU kind it was taken on (float32 kernels dispatch by CPU): a run must equal one kind's pin.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from secure_fed import registry
from secure_fed.site.learner import SiteStart
from tests.conftest import small_config

# The machine the pins were first taken on (ecbd2fc, before the plugins), and an AMD EPYC with
# AVX-512 (the development machine from 2026-12-08), taken at 5a10167: its site code is that of
# 9527ebc, whose suite passed against the first pins on the first machine.
ECBD2FC_MACHINE = "the machine of ecbd2fc"
AMD_EPYC_AVX512 = "AMD EPYC, AVX-512"
# (data.kind, method) → each CPU kind's pin: (length, sum, sum of squares, first value, last value)
# of each round's upload. float32 kernels dispatch by CPU, and a summary of sums over a pretrained
# base differs between kinds by far more than 1e-9 (reports/fedavg's sum: 0.0144 against 0.0125), so
# each kind the code was checked on has its own pin, and a run must equal one of them.
Summary = tuple[int, float, float, float, float]
PINS: dict[tuple[str, str], dict[str, list[Summary]]] = {
    ("reports", "fedtar"): {
        ECBD2FC_MACHINE: [
            (204003, 0.01606309681469753, 0.00010366116520676156, -5.813213647343218e-06, 0.0029296875)
        ],
        AMD_EPYC_AVX512: [
            (204003, 0.015666740203961638, 0.00010334402936058718, -5.8134610299021006e-06, 0.0029296875)
        ],
    },
    ("reports", "fedavg"): {
        ECBD2FC_MACHINE: [
            (67977, 0.014363162309143807, 0.00027445224015658245, 1.1618656571954489e-05, 0.015625)
        ],
        AMD_EPYC_AVX512: [
            (67977, 0.01251320762916075, 0.00027412931685582724, -1.1622993042692542e-05, 0.015625)
        ],
    },
    ("reports", "fedprox"): {
        ECBD2FC_MACHINE: [
            (67977, 0.013997342965956339, 0.00027092069963175543, 1.1618656571954489e-05, 0.015625)
        ],
        AMD_EPYC_AVX512: [
            (67977, 0.012756931659657855, 0.000271252335406177, -1.1622993042692542e-05, 0.015625)
        ],
    },
    ("reports", "scaffold"): {
        ECBD2FC_MACHINE: [
            (135953, 20.84807366067802, 14.973370639030447, 3.125600051134825e-05, 0.015563887543976307),
            (135953, -18.618926935296223, 16.605722976356198, -3.125003422610462e-05, -0.015641354955732822),
        ],
        AMD_EPYC_AVX512: [
            (135953, 19.44568475075952, 14.936739742981185, 3.123760689049959e-05, 0.015531524084508419),
            (135953, -16.371288858865192, 16.60593494823567, -3.1249976018443704e-05, -0.015641354955732822),
        ],
    },
    ("imaging", "fedavg"): {
        ECBD2FC_MACHINE: [
            (17515, -0.8907954099318669, 0.03558257580254375, 0.0013836909110978013, 0.03515625)
        ],
        AMD_EPYC_AVX512: [
            (17515, -0.8907971866702393, 0.03558257781397241, 0.0013836910420650383, 0.03515625)
        ],
    },
    ("imaging", "fedprox"): {
        ECBD2FC_MACHINE: [
            (17515, -0.5406464579184966, 0.021002574990885644, 0.0013528258623409783, 0.03515625)
        ],
        AMD_EPYC_AVX512: [
            (17515, -0.540648083517608, 0.021002568553448876, 0.0013528258623409783, 0.03515625)
        ],
    },
    ("imaging", "fedrep"): {
        ECBD2FC_MACHINE: [
            (16865, 0.7743539330444111, 0.031643516287221965, 0.0008235695113398833, 0.03515625)
        ],
        AMD_EPYC_AVX512: [
            (16865, 0.7743549827959288, 0.03164351588867622, 0.0008235704281105427, 0.03515625)
        ],
    },
    ("imaging", "fedbn"): {
        ECBD2FC_MACHINE: [
            (17355, -0.7675994184024386, 0.03527443976026842, 0.0013836909110978013, 0.03515625)
        ],
        AMD_EPYC_AVX512: [
            (17355, -0.767601197727414, 0.03527444173767171, 0.0013836910420650383, 0.03515625)
        ],
    },
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
    matched = [machine for machine, want in PINS[(kind, method)].items() if _equal(got, want)]
    assert matched, f"{kind}/{method}: {got} equals no machine's pin: {PINS[(kind, method)]}"


def _equal(got: list[Summary], want: list[Summary]) -> bool:
    return len(got) == len(want) and all(
        g[0] == w[0] and np.allclose(g[1:], w[1:], rtol=1e-9, atol=1e-12)
        for g, w in zip(got, want, strict=True)
    )
