"""Split a vector's coordinates across a process-wide thread pool.

The vector arithmetic of secure aggregation — AES-CTR keystreams (OpenSSL through `cryptography`)
and numpy ufuncs — releases the GIL, so a site's masks and stochastic rounding can use its cores.
Work is split by coordinate range, never by mask or by key: every coordinate is computed exactly
as a single thread would (keystreams are seeked to the range's offset), so results are
bit-identical for any number of threads.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import numpy as np

T = TypeVar("T")

THREADS_ENV = "SECURE_FED_CRYPTO_THREADS"
# below this many coordinates a hand-off to another thread costs more than it saves
MIN_PARALLEL = 1 << 17
_MAX_DEFAULT_THREADS = 4

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_local = threading.local()


def _forget_pool_after_fork() -> None:
    # a forked child inherits the executor object but none of its threads: work queued to it would
    # wait forever, so the child starts a pool of its own on first use
    global _pool, _pool_size, _lock
    _pool, _pool_size, _lock = None, 0, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool_after_fork)


def crypto_threads() -> int:
    """Threads for vector crypto: $SECURE_FED_CRYPTO_THREADS, else the usable cores (at most 4)."""
    raw = os.environ.get(THREADS_ENV)
    if raw is not None:
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"{THREADS_ENV} must be a positive integer, got {raw!r}") from None
        if value < 1:
            raise ValueError(f"{THREADS_ENV} must be a positive integer, got {raw!r}")
        return value
    return max(1, min(_MAX_DEFAULT_THREADS, len(os.sched_getaffinity(0))))


def coordinate_ranges(n: int, parts: int, align: int) -> list[tuple[int, int]]:
    """At most `parts` contiguous [start, stop) ranges covering [0, n), every start a multiple of `align`."""
    if n <= 0:
        return [(0, n)]
    step = -(-n // parts)  # ceil
    step = -(-step // align) * align
    return [(start, min(start + step, n)) for start in range(0, n, step)]


def _executor(size: int) -> ThreadPoolExecutor:
    global _pool, _pool_size
    with _lock:
        if _pool is None or _pool_size != size:
            if _pool is not None:
                _pool.shutdown(wait=False)
            _pool = ThreadPoolExecutor(max_workers=size, thread_name_prefix="secure_fed-crypto")
            _pool_size = size
        return _pool


def over_ranges(work: Callable[[int, int], T], n: int, align: int) -> list[T]:
    """`work(start, stop)` over ranges covering [0, n), in parallel when n is large enough."""
    parts = crypto_threads() if n >= MIN_PARALLEL else 1
    ranges = coordinate_ranges(n, parts, align)
    if len(ranges) == 1:
        return [work(*ranges[0])]
    # the calling thread takes the first range itself: one hand-off fewer, one pool thread fewer.
    # The pool is sized by the thread count, not by this call's ranges (short vectors yield fewer),
    # so it is built once, not rebuilt whenever the vector length changes.
    pool = _executor(parts - 1)
    pending = [pool.submit(work, *r) for r in ranges[1:]]
    return [work(*ranges[0]), *(f.result() for f in pending)]


def scratch(name: str, count: int, dtype: np.dtype | type) -> np.ndarray:
    """A reusable uninitialised buffer of `count` words for the calling thread.

    Fresh multi-megabyte arrays in worker threads come from per-thread malloc arenas, which hand
    large blocks straight back to the OS: every call would pay its page faults again (a 4 MB
    scratch per mask pass cost more than the parallelism saved). Each thread keeps its largest
    buffer per `name` and returns a view; callers must not hold it across calls."""
    buffers: dict[str, np.ndarray] = _local.__dict__.setdefault("buffers", {})
    dtype = np.dtype(dtype)
    held = buffers.get(name)
    if held is None or held.dtype != dtype or held.shape[0] < count:
        held = buffers[name] = np.empty(count, dtype=dtype)
    return held[:count]
