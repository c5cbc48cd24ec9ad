"""What a site runtime asks of an algorithm's site learner (`secure_fed.registry`, by `data.kind`).

The runtime owns everything around the learning: the guard, the DP plan and ledger, the lifetime
budget, the released values, the audit trail. A learner owns its data, its model and its local
step; it sees the site's privacy only as the gradient rule it is handed and, in `start`, the plan
its own releases (FedTAR's GMM histogram) are charged to.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from secure_fed.config import RunConfig
from secure_fed.site.coarsen import private_weight as private_weight  # re-exported for the learners
from secure_fed.site.training import PatientGradients

if TYPE_CHECKING:
    from secure_fed.dp.site_ledger import SiteLedger
    from secure_fed.site.private import SitePrivacy
    from secure_fed.site.trail import SiteTrail


@dataclass
class LocalUpdate:
    upload: np.ndarray  # before the server's factor: the runtime scales and releases it
    steps: int
    mean_loss: float


@dataclass
class SiteStart:
    """What a learner may use once the site's DP plan and lifetime ledger are open."""

    site: str
    folder: Path
    run_id: str
    privacy: SitePrivacy | None
    lifetime: SiteLedger | None
    trail: SiteTrail | None


class Learner(Protocol):
    n_train: int  # training patients: DP's population
    n_val: int  # validation patients: charged only when the method releases α scalars
    n_test: int

    def passes(self, method: str) -> int:
        """Local stages per round, each of `train.local_epochs` epochs of DP-SGD."""
        ...

    def releases_alpha(self, method: str) -> bool:
        """Whether `method`'s server asks this site for α hypergradient scalars."""
        ...

    def start(self, setup: SiteStart) -> None: ...

    def dim(self) -> int: ...

    def local_update(
        self,
        round_id: int,
        method: str,
        global_vec: np.ndarray,
        gradients: Callable[[], PatientGradients] | None,
        options: dict[str, Any],
    ) -> LocalUpdate: ...

    def distributed_dim(self, method: str) -> int:
        """`dp.noise = "distributed"`: the length of `method`'s one private step, the vector the
        sites' noise shares cover (the trainable adapters times the copies the method trains)."""
        ...

    def distributed_options(self, method: str, options: dict[str, Any]) -> dict[str, Any]:
        """`dp.noise = "distributed"`: the public inputs of `method`'s release that the training
        instruction carries (FedTAR's round α), checked before the round is charged; ValueError
        on a malformed one, which the site refuses."""
        ...

    def distributed_update(
        self,
        round_id: int,
        method: str,
        global_vec: np.ndarray,
        privacy: SitePrivacy,
        options: dict[str, Any] | None = None,
    ) -> tuple[np.ndarray, int, float]:
        """`dp.noise = "distributed"`: (the site's encoded share of a clipped gradient sum, steps,
        loss). `options`: what `distributed_options` returned. Only a learner the config admits for
        distributed noise has one."""
        ...

    def hypergradients(self, final: np.ndarray, directions: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """(per validation patient × direction scalars, per-patient validation losses)."""
        ...

    def score(self, global_vec: np.ndarray) -> dict[str, float]: ...

    def memory(self) -> dict[str, np.ndarray]:
        """Local state a Flower node keeps between messages (its context.state); `restore` reads it."""
        ...

    def restore(self, memory: dict[str, np.ndarray]) -> None: ...


LearnerFactory = Callable[[RunConfig, str, Path, "bytes | None"], Learner]
