"""FedTAR (temporal residual aggregation with patient-adaptive hyper-LoRA) over the report model:
its head (`hyper_lora.py`, the patient GMM `profile_gmm.py` / `profile.py`), its site step
(`learner.py`: per-visit-index copies, α hypergradients `hypergrad.py`; the report-data baselines'
pooled step too) and its server side (`temporal.py`, `strategy.py`). Registered with the core on
import (`secure_fed.registry`)."""

from __future__ import annotations

import numpy as np

from secure_fed import registry
from secure_fed.algorithms.fedtar.distributed import DistributedFedTAR
from secure_fed.algorithms.fedtar.hyper_lora import add_patient_head
from secure_fed.algorithms.fedtar.learner import ReportLearner
from secure_fed.algorithms.fedtar.strategy import FedTAR
from secure_fed.config import RunConfig
from secure_fed.model.setup import build_report_model
from secure_fed.model.vectors import flatten


def initial_report_state(cfg: RunConfig) -> np.ndarray:
    """The report model's adapters as every party builds them from the public run seed."""
    return flatten(build_report_model(cfg).trainable_state()).numpy()


def _strategy(name: str) -> registry.StrategyFactory:
    def make(dim: int, t_max: int, cfg: RunConfig) -> FedTAR:
        # one private step a round, taken on the decoded sum of the sites' noise shares
        kind = DistributedFedTAR if cfg.dp.enabled and cfg.dp.noise == "distributed" else FedTAR
        return kind(dim, t_max, cfg, temporal=name != "fedtar-no-temporal", name=name)

    return make


for _name in ("fedtar", "fedtar-no-gmm", "fedtar-no-temporal"):
    # FedTAR's site step is its learner's own (per-visit copies, α hypergradients): the default hook
    registry.register_method(
        registry.Method(_name, _strategy(_name), ("reports",), pooled=False, distributed=True)
    )
registry.register_learner("reports", ReportLearner.create)
registry.register_initial_state("reports", initial_report_state)
registry.register_model_head("patient", add_patient_head)
