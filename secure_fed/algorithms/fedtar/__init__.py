"""FedTAR (temporal residual aggregation with patient-adaptive hyper-LoRA) over the report model:
its head (`hyper_lora.py`, the patient GMM `profile_gmm.py` / `profile.py`), its site step
(`learner.py`: per-visit-index copies, α hypergradients `hypergrad.py`; the report-data baselines'
pooled step too) and its server side (`temporal.py`, `strategy.py`). Registered with the core on
import (`secure_fed.registry`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from secure_fed import registry

if TYPE_CHECKING:
    import numpy as np

    from secure_fed.config import RunConfig

# The registry imports this folder whenever a config names a method, so its heavy halves (torch,
# the model) are imported only when a run builds them.


def initial_report_state(cfg: RunConfig) -> np.ndarray:
    from secure_fed.model.setup import build_report_model
    from secure_fed.model.vectors import flatten

    return flatten(build_report_model(cfg).trainable_state()).numpy()


def _strategy(name: str) -> registry.StrategyFactory:
    def make(dim: int, t_max: int, cfg: RunConfig) -> Any:  # noqa: ANN401
        from secure_fed.algorithms.fedtar.distributed import DistributedFedTAR
        from secure_fed.algorithms.fedtar.strategy import FedTAR

        # one private step a round, taken on the decoded sum of the sites' noise shares
        kind = DistributedFedTAR if cfg.dp.enabled and cfg.dp.noise == "distributed" else FedTAR
        return kind(dim, t_max, cfg, temporal=name != "fedtar-no-temporal", name=name)

    return make


def _report_learner(*args: Any, **kwargs: Any) -> Any:  # noqa: ANN401
    from secure_fed.algorithms.fedtar.learner import ReportLearner

    return ReportLearner.create(*args, **kwargs)


for _name in ("fedtar", "fedtar-no-gmm", "fedtar-no-temporal"):
    # FedTAR's site step is its learner's own (per-visit copies, α hypergradients): the default hook
    registry.register_method(
        registry.Method(_name, _strategy(_name), ("reports",), pooled=False, distributed=True)
    )
registry.register_learner("reports", _report_learner)
registry.register_initial_state("reports", initial_report_state)
registry.register_model_head("patient", registry.deferred(f"{__name__}.hyper_lora", "add_patient_head"))
