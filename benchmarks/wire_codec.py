"""What putting an array into a Flower message and taking it out costs, per megabyte; prints JSON.

Issue 53's item 2: a round's vectors (the global state, an update, a masked SecAgg+ vector) cross
`secure_fed.protocol.wire` twice a message (`to_records` at the sender, `from_records` at the receiver).
Flower's own `Array(ndarray)` writes the array with `np.save` into a BytesIO and reads it with
`np.load`; ours carries the array's bytes as they lie in memory (`wire.RAW_STYPE`, one copy each
way, dtype and length checked on the way in). Both are timed on the same arrays, interleaved, on
the arrays a round sends: float64 (the server's state and a plain update), float32 (the model's own
precision) and uint32 (a SecAgg+ ring vector). Neither includes Flower's message framing, which is
the same for both.

    .venv/bin/python benchmarks/wire_codec.py             # 1 M values, 31 interleaved repeats
    .venv/bin/python benchmarks/wire_codec.py --quick     # smoke: 10,000 values, 3 repeats
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, RecordDict

from secure_fed.protocol.wire import from_records, to_records

DTYPES = ("float64", "float32", "uint32")


def flower_round_trip(value: np.ndarray) -> np.ndarray:
    """Flower's default: np.save into the Array, np.load out of it."""
    records = RecordDict({"arrays": ArrayRecord({"v": Array(np.ascontiguousarray(value))})})
    return records.array_records["arrays"]["v"].numpy()


def ours_round_trip(value: np.ndarray) -> np.ndarray:
    return from_records(to_records({"v": value}))["v"]


def _timed(fn: Callable[[np.ndarray], np.ndarray], value: np.ndarray) -> float:
    start = time.perf_counter()
    back = fn(value)
    elapsed = time.perf_counter() - start
    if not np.array_equal(back, value) or back.dtype != value.dtype:
        raise RuntimeError(f"{fn.__name__} did not bring the array back exactly")
    return elapsed


def measure(values: int, repeats: int, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    arrays = {
        "float64": rng.normal(size=values),
        "float32": rng.normal(size=values).astype(np.float32),
        "uint32": rng.integers(0, 2**32, size=values, dtype=np.uint32),
    }
    rows = []
    for name in DTYPES:
        value = arrays[name]
        megabytes = value.nbytes / 1e6
        times: dict[str, list[float]] = {"flower": [], "ours": []}
        for warm_up in (flower_round_trip, ours_round_trip):  # not kept
            _timed(warm_up, value)
        for _ in range(repeats):  # interleaved, so drift on a shared machine hits both alike
            times["flower"].append(_timed(flower_round_trip, value) * 1e3 / megabytes)
            times["ours"].append(_timed(ours_round_trip, value) * 1e3 / megabytes)
        summary = {
            k: {"median": statistics.median(v), "min": min(v), "max": max(v)} for k, v in times.items()
        }
        rows.append(
            {
                "dtype": name,
                "values": values,
                "megabytes": megabytes,
                "ms_per_mb": summary,
                "ratio_ours_to_flower": summary["ours"]["median"] / summary["flower"]["median"],
            }
        )
    return {"values": values, "repeats": repeats, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--values", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=31)
    parser.add_argument("--quick", action="store_true", help="smoke run: 10,000 values, 3 repeats")
    args = parser.parse_args()
    if args.quick:
        args.values, args.repeats = 10_000, 3
    print(json.dumps(measure(args.values, args.repeats), indent=1))


if __name__ == "__main__":
    main()
