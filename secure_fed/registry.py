"""Where algorithm folders plug into the federation core.

The core (clients/, server/, model/, data/, config/) looks an algorithm's pieces up here by name
and never imports one. A method is one plugin (`Method`): its server strategy, the data kinds it
runs on, whether it can run distributed DP, whether it trains one pooled adapter or FedTAR's
per-visit copies, and its site hook (`SiteHook`: a proximal term, control variates, a mask of what
is shared, stages trained in turn), which the site learners call instead of branching on names.
Each folder under `secure_fed/algorithms/` registers its methods with one `register_method` line
when it is imported, and a folder that owns a model registers its site learner and initial global
state for the `data.kind` it trains on, and any model head. `load_algorithms` imports the installed
folders once, at the first lookup, so every process (the CLI, a Ray actor, a SuperNode's ClientApp,
the ServerApp) finds the same table, and the config checks `fed.method` against it.

The folders are plugins: `load_algorithms` finds them by listing the packages under
`secure_fed/algorithms/` at run time and names none of them, so no import statement leads from the
core (or from here) to an algorithm, while every algorithm imports the core: the package's import
graph has no cycle (tests/test_layers.py). Package metadata entry points would do the same for
installed packages only; a FAB and a source checkout carry no metadata, hence the listing. This
module imports nothing of the package but the (empty) algorithms package, so the config may call
it lazily without a cycle.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import secure_fed.algorithms as algorithm_folders

if TYPE_CHECKING:
    import numpy as np
    import torch
    from torch import nn

# The config is typed Any here: importing secure_fed.config would close a cycle, since the config
# calls this module to check a method's name.
RunConfig = Any
# (dim, t_max, cfg) → Strategy (typed Any: the server's types are not imported here)
StrategyFactory = Callable[[int, int, RunConfig], Any]


class SiteHook:
    """A method's additions to a site's local round, called by whichever learner trains it (the
    defaults add nothing: FedAvg's site step). The report learner makes one per method it trains and
    keeps it, so a hook may carry the site's state between rounds (SCAFFOLD's control), through
    `memory` and `restore` across a Flower node's messages, and calls every hook below; the imaging
    learner calls `prox_mu`, `shared` and `stages` on a fresh one (no method registered for imaging
    data keeps state or uses control variates)."""

    def prox_mu(self, cfg: RunConfig) -> float:
        """μ of a proximal pull μ/2‖w − w_global‖² towards the round's global state (FedProx)."""
        return 0.0

    def shared(self, model: nn.Module, names: list[str]) -> list[str]:
        """The parameters this site uploads (their change), out of `names`, in model order; the
        rest stays at the site (FedRep's head, FedBN's normalisation layers)."""
        return names

    def stages(self, model: nn.Module) -> list[nn.Module] | None:
        """Parts of the model trained in turn, one pass each (FedRep: head, then body); None = the
        whole model in one pass."""
        return None

    def correction(
        self, template: dict[str, torch.Tensor], options: dict[str, Any]
    ) -> dict[str, torch.Tensor] | None:
        """A term added to every local gradient this round (SCAFFOLD's c − c_k), from the server's
        training options; None = none."""
        return None

    def extra_upload(
        self, start: dict[str, torch.Tensor], final: dict[str, torch.Tensor], steps: int, lr: float
    ) -> torch.Tensor | None:
        """A vector appended to the upload after the weighted change, times the same weight
        (SCAFFOLD's control change); None = nothing. Called once after each local round."""
        return None

    def memory(self) -> dict[str, np.ndarray]:
        return {}

    def restore(self, memory: dict[str, np.ndarray]) -> None:
        return None


@dataclass(frozen=True)
class Method:
    """One federated method, both halves; `register_method(Method(...))` is its one registry line."""

    name: str
    strategy: StrategyFactory  # the server half
    kinds: tuple[str, ...]  # the `data.kind`s it runs on; the first is the kind its name implies
    site: Callable[[], SiteHook] = SiteHook  # the site half, one per learner
    # report data: one adapter copy over all visits (False: FedTAR's copy per visit index)
    pooled: bool = True
    # dp.noise = "distributed": the server takes one private step a round on the decoded sum
    distributed: bool = False


_methods: dict[str, Method] = {}
_learners: dict[str, Callable[..., Any]] = {}
_initial_states: dict[str, Callable[[RunConfig], np.ndarray]] = {}
_heads: dict[str, Callable[..., Any]] = {}
_loaded = False


def load_algorithms() -> None:
    """Import every algorithm folder (each registers itself on import), once a process."""
    global _loaded
    if _loaded:
        return
    prefix = f"{algorithm_folders.__name__}."
    for found in pkgutil.iter_modules(algorithm_folders.__path__, prefix):
        if found.ispkg:  # an algorithm is a folder; a loose module there is no plugin
            importlib.import_module(found.name)
    _loaded = True


def _register(table: dict[str, Any], what: str, name: str, value: Any) -> None:  # noqa: ANN401
    if table.get(name, value) is not value:
        raise ValueError(f"two algorithms register the {what} {name!r}")
    table[name] = value


def deferred(module: str, name: str) -> Callable[..., Any]:
    """`module.name`, imported at its first call: the registry imports every algorithm folder
    whenever a config names a method, so a folder names its heavy halves (torch, the model) this
    way and they load only when a run builds them."""

    def call(*args: Any, **kwargs: Any) -> Any:  # noqa: ANN401
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    return call


def deferred_strategy(module: str, name: str) -> StrategyFactory:
    """A server strategy class built as `name(dim, cfg)` (every baseline's), imported at first use."""
    make = deferred(module, name)
    return lambda dim, t_max, cfg: make(dim, cfg)


def register_method(method: Method) -> None:
    _register(_methods, "method", method.name, method)


def register_learner(kind: str, create: Callable[..., Any]) -> None:
    """`create(cfg, site, folder, site_key)` → the site learner (`clients.learner.Learner`) for
    runs with `data.kind = kind`."""
    _register(_learners, "data kind", kind, create)


def register_initial_state(kind: str, initial: Callable[[RunConfig], np.ndarray]) -> None:
    """The global state round 1 starts from, for runs with `data.kind = kind`."""
    _register(_initial_states, "data kind", kind, initial)


def register_model_head(name: str, add: Callable[..., Any]) -> None:
    _register(_heads, "model head", name, add)


def method(name: str) -> Method:
    load_algorithms()
    if name not in _methods:
        raise ValueError(f"no method is registered as {name!r}; registered: {', '.join(sorted(_methods))}")
    return _methods[name]


def method_names() -> list[str]:
    load_algorithms()
    return sorted(_methods)


def methods_for(kind: str) -> list[str]:
    """The registered methods that run on `data.kind = kind`."""
    load_algorithms()
    return sorted(n for n, m in _methods.items() if kind in m.kinds)


def distributed_methods() -> list[str]:
    load_algorithms()
    return sorted(n for n, m in _methods.items() if m.distributed)


def strategy_factory(name: str) -> StrategyFactory | None:
    load_algorithms()
    found = _methods.get(name)
    return None if found is None else found.strategy


def learner_factory(kind: str) -> Callable[..., Any]:
    load_algorithms()
    if kind not in _learners:
        raise ValueError(f"no algorithm trains on data.kind = {kind!r}; known: {sorted(_learners)}")
    return _learners[kind]


def initial_state(cfg: RunConfig) -> np.ndarray:
    """The global state round 1 starts from (seeded from the public run seed: every party agrees)."""
    load_algorithms()
    kind = cfg.data.kind
    if kind not in _initial_states:
        raise ValueError(f"no algorithm trains on data.kind = {kind!r}; known: {sorted(_initial_states)}")
    return _initial_states[kind](cfg)


def model_head(name: str) -> Callable[..., Any]:
    load_algorithms()
    if name not in _heads:
        raise ValueError(f"no algorithm provides the model head {name!r}; known: {sorted(_heads)}")
    return _heads[name]
