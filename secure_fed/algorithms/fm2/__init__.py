"""FM2 (federated dual mixture-of-experts for heterogeneous imaging modalities), seed 001 §3, and
the imaging baselines' site step. Registered with the core on import (`secure_fed.registry`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from secure_fed import registry

if TYPE_CHECKING:
    from secure_fed.config import RunConfig

# The registry imports this folder whenever a config names a method, so its heavy halves (torch,
# the model) are imported only when a run builds them.


def _imaging_learner(cfg: RunConfig, site: str, folder: Path, site_key: bytes | None = None) -> Any:  # noqa: ANN401
    from secure_fed.algorithms.fm2.learner import ImagingLearner

    return ImagingLearner.create(cfg, site, folder)  # the imaging records carry no keyed ids


# FM2's site step is its learner's own (two stages, the class-wise experts kept): the default hook
registry.register_method(
    registry.Method("fm2", registry.deferred_strategy(f"{__name__}.strategy", "FM2"), ("imaging",))
)
registry.register_learner("imaging", _imaging_learner)
registry.register_initial_state("imaging", registry.deferred(f"{__name__}.learner", "initial_imaging_state"))
