"""What a sweep's cells are, for whoever reads them: the methods a grid holds, a cell's
configuration and folder, a row's label, the ε a cell spent per site, the cell groups a share of the
non-private gain is taken over (with their paired seeds) and the t quantile the intervals use. The
sweep (secure_fed/lab/sweep.py, which runs the cells), its records, references, statistics and
tables, and the share-kept tables (secure_fed/lab/share_kept.py) all build on these."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from secure_fed import registry
from secure_fed.config import RunConfig
from secure_fed.dp.accountants import RDP, accountant_named

BASE = "base"  # the pretrained base with untrained adapters: the "no federated training" reference
LOCAL = "local"  # each site alone
CENTRAL = "central"  # pooled, non-private: the ceiling
REFERENCES: tuple[str, ...] = (BASE, LOCAL, CENTRAL)
# the paper table's row order; a method registered for report data since follows, by name
_ROW_ORDER = (
    "fedtar",
    "fedtar-no-gmm",
    "fedtar-no-temporal",
    "fedavg",
    "fedprox",
    "fedadam",
    "scaffold",
    "drfa",
)
FEDERATED: tuple[str, ...] = tuple(
    sorted(registry.methods_for("reports"), key=lambda m: (_ROW_ORDER.index(m) if m in _ROW_ORDER else 99, m))
)
# The FedTAR paper's protocol for its baselines: time points pooled (as every baseline here pools
# them) and a plain adapter, without the patient hyper-LoRA that our baselines get
PLAIN = "-plain"  # suffix: the method with model.hyper_lora = false
PLAIN_BASELINES: tuple[str, ...] = tuple(
    m + PLAIN for m in ("fedavg", "fedprox", "scaffold", "fedadam", "drfa")
)
CONVEX = "-convex"  # suffix: FedTAR (or an ablation) with train.fedtar_chain = "convex"
CONVEX_VARIANTS: tuple[str, ...] = tuple(
    m + CONVEX for m in ("fedtar", "fedtar-no-gmm", "fedtar-no-temporal")
)
VARIANTS: tuple[str, ...] = PLAIN_BASELINES + CONVEX_VARIANTS
FINE_TUNE = "-ft"  # suffix: the federated method's final model, fine-tuned at each site
FINE_TUNED: tuple[str, ...] = tuple(m + FINE_TUNE for m in ("fedavg", "fedtar"))
# suffix: the private recipe's sampling, steps and clipping with no noise (dp.noise_free_reference),
# a non-private reference that runs at ε = ∞ only
NOISE_FREE = "-clip"
NOISE_FREE_METHODS: tuple[str, ...] = tuple(m + NOISE_FREE for m in (CENTRAL, "fedavg", "fedtar"))
METHODS: tuple[str, ...] = REFERENCES + FEDERATED + VARIANTS + FINE_TUNED + NOISE_FREE_METHODS

# Two-sided 95 % Student t quantiles by degrees of freedom (no scipy at run time).
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def t975(df: int) -> float:
    return _T975.get(df, 2.228 if df < 15 else 2.0)  # df 10-14: ≤ 2.228 (conservative), then ≈ 2


def labelled(method: str, epsilon: float | None) -> str:
    """A table row's name that says its privacy either way: "fedavg ε=∞", "fedavg ε=8"."""
    return f"{method} ε={'∞' if epsilon is None else f'{epsilon:g}'}"


def spent_per_site(privacy: dict[str, Any] | None) -> list[float]:
    """Each site's per-patient ε spent by the accountant its budget guard enforced (the cell's
    ``accountant``; RDP where the cell names none or PRV was not computed); one pooled value for
    ``central``; none without DP."""
    values: list[float] = []
    counted = accountant_named((privacy or {}).get("accountant") or RDP)
    for v in ((privacy or {}).get("epsilon") or {}).values():
        if isinstance(v, dict):
            chosen, _ = counted.pick(v)
            v = chosen if chosen is not None else v.get("epsilon")
        if isinstance(v, int | float):
            values.append(float(v))
    return values


def _order(method: str, epsilon: float | None) -> tuple[int, float]:
    """Methods in METHODS order; per method ε = ∞ first, then the weaker privacy first."""
    return (
        METHODS.index(method) if method in METHODS else 99,
        -(epsilon if epsilon is not None else math.inf),
    )


def kept_groups(runs: list[dict[str, Any]]) -> Iterator[tuple[str, float | None, list[int]]]:
    """Each (method, ε) of a method whose share of the non-private gain is reported (federated,
    site-fine-tuned, ``central``; the non-private cell too), with the seeds it, the method without
    DP and ``base`` all have, in table order; groups with no such seed are left out."""
    seeds: dict[tuple[str, float | None], set[int]] = {}
    for run in runs:
        seeds.setdefault((run["method"], run["epsilon"]), set()).add(run["seed"])
    for method, epsilon in sorted(seeds, key=lambda k: (k[0], -(k[1] or math.inf))):
        if method not in (*FEDERATED, *VARIANTS, *FINE_TUNED, CENTRAL):
            continue
        common = seeds.get((BASE, None), set()) & seeds.get((method, None), set()) & seeds[(method, epsilon)]
        if common:
            yield method, epsilon, sorted(common)


def run_label(method: str, epsilon: float | None) -> str:
    return method if epsilon is None else f"{method} ε={epsilon:g}"


def cell_folder(out: Path, method: str, epsilon: float | None, seed: int) -> Path:
    return out / f"{method}-eps{epsilon if epsilon is not None else 'inf'}-seed{seed}"


def seed_config(base: RunConfig, method: str, epsilon: float | None, seed: int) -> RunConfig:
    """The cell's config: the same cohort, split and seed for every method (paired seeds).

    With ``data.split_seed`` set the data is held: every seed trains on the config's cohort and
    split, so the spread over seeds is the training's alone.
    """
    cfg = base.model_copy(deep=True, update={"seed": seed})
    name = method.removesuffix(FINE_TUNE).removesuffix(NOISE_FREE)
    if name in PLAIN_BASELINES:
        name = name.removesuffix(PLAIN)
        cfg.model.hyper_lora = False
    elif name in CONVEX_VARIANTS:
        name = name.removesuffix(CONVEX)
        cfg.train.fedtar_chain = "convex"
    if name in FEDERATED:
        cfg.fed.method = name  # type: ignore[assignment]
    if base.data.split_seed is None:
        cfg.data.synth.seed = seed
    if method in NOISE_FREE_METHODS:
        if epsilon is not None:
            raise ValueError(f"{method} adds no noise: it runs at ε = ∞ only, not at ε = {epsilon:g}")
        # validated whole: the switch is refused beside a target, which must go in the same step
        data = cfg.model_dump()
        data["dp"] |= {
            "enabled": True,
            "noise_free_reference": True,
            "target_epsilon": None,
            "noise_multiplier": None,
            "budget_epsilon": None,
            "ledger_dir": None,  # charged nowhere, as the non-private cells
        }
        return RunConfig.model_validate(data)
    if epsilon is not None:
        cfg.dp.target_epsilon = epsilon  # before enabling: the validator needs it
        cfg.dp.enabled = True
    return cfg
