"""Vector crypto split across threads gives the single-thread result, bit for bit."""

import os
import threading
import time

import numpy as np
import pytest

from secure_fed.crypto import threads
from secure_fed.crypto.masking import Keystream, add_masks, keystream_words
from secure_fed.crypto.quantize import quantise_into
from secure_fed.crypto.threads import (
    MIN_PARALLEL,
    THREADS_ENV,
    coordinate_ranges,
    crypto_threads,
    over_ranges,
)

# long enough to be split, and not a multiple of any alignment or thread count
N = 2 * MIN_PARALLEL + 7


@pytest.mark.parametrize(("n", "parts", "align"), [(N, 3, 4), (10, 4, 4), (5, 8, 2), (1, 2, 4), (4096, 4, 4)])
def test_ranges_cover_in_order_with_aligned_starts(n, parts, align):
    ranges = coordinate_ranges(n, parts, align)
    assert len(ranges) <= parts
    assert ranges[0][0] == 0 and ranges[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
    assert all(start % align == 0 and start < stop for start, stop in ranges)


def test_thread_count_from_environment(monkeypatch):
    monkeypatch.setenv(THREADS_ENV, "3")
    assert crypto_threads() == 3
    for bad in ("0", "-1", "two"):
        monkeypatch.setenv(THREADS_ENV, bad)
        with pytest.raises(ValueError, match=THREADS_ENV):
            crypto_threads()
    monkeypatch.delenv(THREADS_ENV)
    assert 1 <= crypto_threads() <= 4


def test_large_work_runs_on_several_threads_small_work_inline(monkeypatch):
    monkeypatch.setenv(THREADS_ENV, "2")
    seen: set[int] = set()
    both = threading.Barrier(2, timeout=10)  # breaks unless two ranges run at the same time

    def record(start: int, stop: int) -> int:
        seen.add(threading.get_ident())
        both.wait()
        return stop - start

    assert sum(over_ranges(record, N, 4)) == N and len(seen) == 2
    seen.clear()

    def inline(start: int, stop: int) -> int:
        seen.add(threading.get_ident())
        return stop - start

    assert over_ranges(inline, MIN_PARALLEL - 1, 4) == [MIN_PARALLEL - 1]
    assert seen == {threading.get_ident()}


def test_a_keystream_seeks_to_any_block():
    key = bytes(range(32))
    whole = keystream_words(key, 64, np.uint32)
    part = np.empty(40, np.uint32)
    Keystream(key, 16 * 3).fill(part)  # block 3 = words 12..
    assert np.array_equal(part, whole[12:52])
    with pytest.raises(ValueError, match="multiple of 16"):
        Keystream(key, 8)


@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
def test_masks_do_not_depend_on_the_thread_count(monkeypatch, dtype):
    rng = np.random.default_rng(0)
    start = rng.integers(0, np.iinfo(dtype).max, N, dtype=dtype, endpoint=True)
    masks = [(rng.bytes(32), +1), (rng.bytes(32), -1), (rng.bytes(32), +1)]
    results = []
    for count in ("1", "2", "3"):
        monkeypatch.setenv(THREADS_ENV, count)
        acc = start.copy()
        add_masks(acc, masks)
        results.append(acc)
    # one thread is the plain definition: acc + PRG(k1) - PRG(k2) + PRG(k3), wrapping
    expected = start.copy()
    for key, sign in masks:
        words = keystream_words(key, N, np.dtype(dtype))
        expected = expected + words if sign > 0 else expected - words
    for acc in results:
        assert np.array_equal(acc, expected)


def test_masks_need_a_contiguous_unsigned_vector():
    with pytest.raises(ValueError, match="contiguous 1-D"):
        add_masks(np.zeros(8, np.int64), [(bytes(32), 1)])
    with pytest.raises(ValueError, match="contiguous 1-D"):
        add_masks(np.zeros(16, np.uint32)[::2], [(bytes(32), 1)])


def test_rounding_does_not_depend_on_the_thread_count(monkeypatch):
    x = np.random.default_rng(1).normal(0, 0.3, N)
    outs = []
    for count in ("1", "4"):
        monkeypatch.setenv(THREADS_ENV, count)
        out = np.empty(N, np.int32)
        clipped = quantise_into(x, 1.0, 20, np.random.default_rng(7), out)
        outs.append((out, clipped))
    assert np.array_equal(outs[0][0], outs[1][0]) and outs[0][1] == outs[1][1]


def test_pool_follows_the_configured_size(monkeypatch):
    monkeypatch.setenv(THREADS_ENV, "3")
    over_ranges(lambda a, b: None, N, 4)
    assert threads._pool_size == 2  # the calling thread works one range itself


def test_a_forked_child_gets_a_pool_of_its_own(monkeypatch):
    """Threads do not survive fork(): a child must not queue work to its parent's pool."""
    monkeypatch.setenv(THREADS_ENV, "2")
    over_ranges(lambda a, b: None, N, 4)  # the parent's pool exists
    pid = os.fork()
    if pid == 0:  # child: would hang on the inherited pool; exit 0 only if the work completes
        ok = False
        try:
            ok = sum(over_ranges(lambda a, b: b - a, N, 4)) == N
        finally:
            os._exit(0 if ok else 1)  # never return into the parent's pytest
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise AssertionError("the forked child hung on its parent's thread pool")
