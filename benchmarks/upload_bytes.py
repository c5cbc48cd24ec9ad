"""Bytes one site uploads per round: FedTAR's T adapter copies vs full-model FedAvg, plain vs SecAgg+;
prints JSON.

The upload is the vector `SiteRuntime.train` stashes for the secure sum: FedTAR sends, per visit
index t, its weighted adapter delta and its weight (T × (P_adapters + 1) values); the pooled
baselines of this system send one adapter copy (P_adapters + 1); full-model FedAvg, the paper's
baseline that fine-tunes the whole backbone, would send every parameter (P_total + 1).

Two figures per case:
- `payload_bytes`: the vector alone: float64 in a plain round, ring words (+1 clipped-count word)
  under SecAgg+, whose word size follows from the modulus the round needs;
- `wire_bytes_sent_per_site`: everything a site sends in one secure-sum round, measured by running
  that round (`secure_fed.crypto.vectors.sum_vectors`) with dummy vectors of the right length,
  over the in-memory byte codec and over Flower's message encoding (records → protobuf), so
  SecAgg+'s keys, shares and framing are included.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from secure_fed.config import SecAggConfig, build_config
from secure_fed.crypto.quantize import ring_dtype
from secure_fed.crypto.secagg_protocol import SecAggSettings, round_params
from secure_fed.crypto.transport import LocalTransport
from secure_fed.crypto.vectors import sum_vectors
from secure_fed.model.setup import build_report_model
from secure_fed.model.vectors import flatten

sys.path.insert(0, str(Path(__file__).resolve().parent))
# the SecAgg benchmark's Flower-encoding transport, and its signed sites: SecAgg+ refuses a site
# without an identity, so a round of unsigned sites would measure nothing
from secagg import RecordsTransport, _identities, _site_step  # noqa: E402


def parameter_counts(preset: str, cache: Path) -> dict[str, int]:
    # pretrain_steps = 0: the counts do not depend on the base weights, so skip pretraining
    cfg = build_config({"model": {"preset": preset, "cache_dir": str(cache), "pretrain_steps": 0}})
    model = build_report_model(cfg)
    return {
        "total": sum(p.numel() for p in model.parameters()),
        "adapters": int(flatten(model.trainable_state()).numel()),
    }


def measured_round(dim: int, sites: int, settings: SecAggSettings | None, flower: bool) -> dict[str, Any]:
    rng = np.random.default_rng(dim)
    # small values: FedTAR deltas are far inside the clipping range; the bytes do not depend on them
    inputs = {node: rng.normal(0.0, 0.01, dim) for node in range(1, sites + 1)}
    for x in inputs.values():
        x.flags.writeable = False  # as SiteRuntime stashes an update (its fingerprint vouches for it)
    identities = _identities(list(inputs))
    secrets = {n: (x, identities[n], {}) for n, x in inputs.items()}
    transport = (RecordsTransport if flower else LocalTransport)(secrets, _site_step)
    result = sum_vectors(transport, list(inputs), dim, settings, round_id=1)
    if transport.errors or len(result.survivors) != sites:
        raise RuntimeError(f"round lost sites: {transport.errors}")
    return {
        "wire_bytes_sent_per_site": int(np.mean(list(transport.bytes_sent.values()))),
        "wire_bytes_received_per_site": int(np.mean(list(transport.bytes_received.values()))),
    }


def case(dim: int, sites: int, settings: SecAggSettings, measure: bool) -> dict[str, Any]:
    word = ring_dtype(round_params(sites, dim, settings).modulus_bits)
    out: dict[str, Any] = {
        "values": dim,
        "plain": {"payload_bytes": 8 * dim, "dtype": "float64"},
        "secagg": {"payload_bytes": word.itemsize * (dim + 1), "dtype": str(word)},
    }
    if measure:
        for key, secagg in (("plain", None), ("secagg", settings)):
            out[key]["codec"] = measured_round(dim, sites, secagg, flower=False)
            out[key]["flower_records"] = measured_round(dim, sites, secagg, flower=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--presets", nargs="+", default=["tiny", "small"])
    parser.add_argument("--T", type=int, nargs="+", default=[3, 5], help="visit indices (FedTAR copies)")
    parser.add_argument("--sites", type=int, default=3, help="sites in the measured secure-sum round")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "secure_fed_bench_cache")
    parser.add_argument("--quick", action="store_true", help="payload sizes only, no measured rounds")
    args = parser.parse_args()
    settings = SecAggSettings.from_config(SecAggConfig())  # what `secure-fed run --secagg` uses
    rows = []
    for preset in args.presets:
        counts = parameter_counts(preset, args.cache)
        methods: dict[str, Any] = {
            f"fedtar_T{t}": case(t * (counts["adapters"] + 1), args.sites, settings, not args.quick)
            for t in args.T
        }
        methods["pooled_adapters"] = case(counts["adapters"] + 1, args.sites, settings, not args.quick)
        methods["full_model_fedavg"] = case(counts["total"] + 1, args.sites, settings, not args.quick)
        full = methods["full_model_fedavg"]["plain"]["payload_bytes"]
        for row in methods.values():
            row["plain_over_full_model_plain"] = row["plain"]["payload_bytes"] / full
            row["secagg_over_plain"] = row["secagg"]["payload_bytes"] / row["plain"]["payload_bytes"]
        rows.append({"preset": preset, "parameters": counts, "methods": methods})
    print(json.dumps({"sites": args.sites, "secagg": settings.__dict__, "results": rows}, indent=2))


if __name__ == "__main__":
    main()
