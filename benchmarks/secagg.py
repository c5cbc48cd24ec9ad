"""SecAgg+ round vs plain round, in one process: wall time, ratio, bytes per site; prints JSON.

Both rounds go through `LocalTransport`, which serialises every payload as the wire would, so the
plain round pays for moving float vectors and the SecAgg+ round for its extra phases, keys,
shares and masks. `critical_path_s` estimates a deployment where sites compute in parallel:
the round's wall time with each phase's client work replaced by that phase's slowest client.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from secure_fed.crypto.secagg_protocol import SecAggSettings
from secure_fed.crypto.transport import LocalTransport
from secure_fed.crypto.vectors import client_step, sum_vectors


def _critical_path(wall: float, transport: LocalTransport) -> float:
    serial = sum(sum(t.values()) for t in transport.client_seconds.values())
    slowest = sum(max(t.values(), default=0.0) for t in transport.client_seconds.values())
    return wall - serial + slowest


def _one_round(
    inputs: dict[int, np.ndarray], dim: int, settings: SecAggSettings | None, round_id: int
) -> dict:
    transport = LocalTransport(inputs, client_step)
    start = time.perf_counter()
    result = sum_vectors(transport, list(inputs), dim, settings, round_id)
    wall = time.perf_counter() - start
    if transport.errors or len(result.survivors) != len(inputs):
        raise RuntimeError(f"round lost sites: {transport.errors}")
    return {
        "wall_s": wall,
        "critical_path_s": _critical_path(wall, transport),
        "client_s_by_phase": {p: sum(t.values()) for p, t in transport.client_seconds.items()},
        "server_and_codec_s": wall - sum(sum(t.values()) for t in transport.client_seconds.values()),
        "bytes_sent_per_site": int(np.mean(list(transport.bytes_sent.values()))),
        "bytes_received_per_site": int(np.mean(list(transport.bytes_received.values()))),
        "total": result.total,
        "bound": result.quantisation_bound,
    }


def bench(dim: int, sites: int, repeats: int, settings: SecAggSettings, dtype: np.dtype) -> dict:
    rng = np.random.default_rng(dim + sites)
    inputs = {node: rng.normal(0.0, 1.0, dim).astype(dtype) for node in range(1, sites + 1)}
    expected = np.sum([v.astype(np.float64) for v in inputs.values()], axis=0)
    plain, secure = [], []
    for r in range(repeats):
        plain.append(_one_round(inputs, dim, None, r))
        secure.append(_one_round(inputs, dim, settings, r))
    err = max(float(np.max(np.abs(s["total"] - expected))) for s in secure)
    if err > secure[0]["bound"]:
        raise RuntimeError(f"SecAgg+ sum off by {err}, bound {secure[0]['bound']}")

    def med(rows: list[dict], key: str) -> float:
        return float(np.median([row[key] for row in rows]))

    return {
        "dim": dim,
        "sites": sites,
        "repeats": repeats,
        "plain_round_s": med(plain, "wall_s"),
        "secagg_round_s": med(secure, "wall_s"),
        "ratio": med(secure, "wall_s") / med(plain, "wall_s"),
        "plain_critical_path_s": med(plain, "critical_path_s"),
        "secagg_critical_path_s": med(secure, "critical_path_s"),
        "critical_path_ratio": med(secure, "critical_path_s") / med(plain, "critical_path_s"),
        "plain_bytes_sent_per_site": plain[0]["bytes_sent_per_site"],
        "secagg_bytes_sent_per_site": secure[0]["bytes_sent_per_site"],
        "secagg_bytes_received_per_site": secure[0]["bytes_received_per_site"],
        "secagg_time_split_s": {
            "clients_by_phase": {
                p: float(np.median([row["client_s_by_phase"][p] for row in secure]))
                for p in secure[0]["client_s_by_phase"]
            },
            "server_and_codec": med(secure, "server_and_codec_s"),
        },
        "max_abs_error": err,
        "quantisation_bound": secure[0]["bound"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dims", type=int, nargs="+", default=[10_000, 1_000_000])
    parser.add_argument("--sites", type=int, nargs="+", default=[5, 10])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", default="float32", help="dtype of the plain update vectors")
    args = parser.parse_args()
    settings = SecAggSettings()
    rows = [bench(d, s, args.repeats, settings, np.dtype(args.dtype)) for d in args.dims for s in args.sites]
    print(json.dumps({"settings": settings.__dict__, "dtype": args.dtype, "results": rows}, indent=2))


if __name__ == "__main__":
    main()
