"""FM2 (federated dual mixture-of-experts for heterogeneous imaging modalities), seed 001 §3, and
the imaging baselines' site step. Registered with the core on import (`secure_fed.registry`)."""

from __future__ import annotations

from pathlib import Path

from secure_fed import registry
from secure_fed.algorithms.fm2.learner import ImagingLearner, initial_imaging_state
from secure_fed.algorithms.fm2.strategy import FM2
from secure_fed.config import RunConfig


def _imaging_learner(
    cfg: RunConfig, site: str, folder: Path, site_key: bytes | None = None
) -> ImagingLearner:
    return ImagingLearner.create(cfg, site, folder)  # the imaging records carry no keyed ids


# FM2's site step is its learner's own (two stages, the class-wise experts kept): the default hook
registry.register_method(registry.Method("fm2", lambda dim, t_max, cfg: FM2(dim, cfg), ("imaging",)))
registry.register_learner("imaging", _imaging_learner)
registry.register_initial_state("imaging", initial_imaging_state)
