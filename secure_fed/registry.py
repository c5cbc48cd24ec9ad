"""Where algorithm folders plug into the federation core.

The core (clients/, server/, model/, data/) looks an algorithm's pieces up here by name and never
imports one: each folder under `secure_fed/algorithms/` registers its server strategies, its site
learner and initial global state for the `data.kind` it trains on, and any model head, when it is
imported. `load_algorithms` imports the installed folders once, at the first lookup, so every
process (the CLI, a Ray actor, a SuperNode's ClientApp, the ServerApp) finds the same table.

The folders are plugins: `load_algorithms` finds them by listing the packages under
`secure_fed/algorithms/` at run time and names none of them, so no import statement leads from the
core (or from here) to an algorithm, while every algorithm imports the core: the package's import
graph has no cycle (tests/test_layers.py). Package metadata entry points would do the same for
installed packages only; a FAB and a source checkout carry no metadata, hence the listing.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import secure_fed.algorithms as algorithm_folders

if TYPE_CHECKING:
    import numpy as np

    from secure_fed.config import RunConfig

# method name → (dim, t_max, cfg) → Strategy (typed Any: the server's types are not imported here)
StrategyFactory = Callable[[int, int, "RunConfig"], Any]

_strategies: dict[str, StrategyFactory] = {}
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


def register_strategy(name: str, factory: StrategyFactory) -> None:
    _register(_strategies, "method", name, factory)


def register_learner(kind: str, create: Callable[..., Any]) -> None:
    """`create(cfg, site, folder, site_key)` → the site learner (`clients.learner.Learner`) for
    runs with `data.kind = kind`."""
    _register(_learners, "data kind", kind, create)


def register_initial_state(kind: str, initial: Callable[[RunConfig], np.ndarray]) -> None:
    """The global state round 1 starts from, for runs with `data.kind = kind`."""
    _register(_initial_states, "data kind", kind, initial)


def register_model_head(name: str, add: Callable[..., Any]) -> None:
    _register(_heads, "model head", name, add)


def strategy_factory(method: str) -> StrategyFactory | None:
    load_algorithms()
    return _strategies.get(method)


def strategy_names() -> list[str]:
    load_algorithms()
    return sorted(_strategies)


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
