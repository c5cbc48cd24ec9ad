"""What the distributed-noise benchmarks share: the sites' test vectors and one timing.
Benchmarks only (benchmarks/ is on sys.path when they run as scripts)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def site_vectors(sites: int, dim: int, norm: float, rng: np.random.Generator) -> list[np.ndarray]:
    """`sites` random vectors of `dim` coordinates, each of norm `norm` (a site's clipped sum)."""
    out = []
    for _ in range(sites):
        v = rng.normal(size=dim)
        out.append(v * (norm / float(np.linalg.norm(v))))
    return out


def median_ms(fn: Callable[[], Any], repeats: int) -> float:
    """The median wall time of `repeats` calls of `fn`, in milliseconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)
