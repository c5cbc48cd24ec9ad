"""Values made once per process, for benchmark helpers that Ray actors run.

Flower's simulation hands each actor the ClientApp anew with every message, and the benchmark's
functions travel by value (cloudpickle), their module globals with them: a cache kept in such a
global starts empty at every message, so a site paid again, in every SecAgg+ phase, for what a
real site holds in memory from one phase to the next (its update, its peers' public keys). A
module registered in the process's ``sys.modules`` outlives each unpickled copy."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Hashable
from typing import TypeVar

T = TypeVar("T")


def once_per_process(name: str, key: Hashable, make: Callable[[], T]) -> T:
    """``make()`` for ``key`` in the cache ``name``: made at the first call in this process, the
    same object at every later one."""
    module_name = f"_secure_fed_bench_cache_{name}"
    module = sys.modules.setdefault(module_name, types.ModuleType(module_name))
    values = module.__dict__.setdefault("values", {})
    if key not in values:
        values[key] = make()
    return values[key]
