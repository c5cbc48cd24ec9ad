"""CKKS cost of aggregating the α scalars, per site per round; prints JSON.

For each T: the primitives (encrypt at a site, one homomorphic add at the server, decrypt at the
decryptor; medians over --reps) and ciphertext bytes, then one whole round through
`LocalTransport` (which serialises payloads as the wire would) against a plain round, with bytes
per site and the client time of each phase. Context sizes are those `keys init` writes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import tenseal as ts
from _identities import bench_identity  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

from secure_fed.crypto import ckks, keys
from secure_fed.crypto.scalars import HESettings, client_step, decryptor_for, sum_scalars
from secure_fed.crypto.transport import LocalTransport


def _median_ms(fn: Callable[[], Any], reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def _step(phase: str, request: dict[str, Any], state: dict[str, Any], inp: Any) -> tuple[dict, dict]:
    values, ctx = inp
    return client_step(phase, request, state, values, ctx, bench_identity(int(request.get("node_id", 0))))


def _round(sites: dict[int, tuple[np.ndarray, ts.Context | None]], settings: HESettings | None) -> dict:
    transport = LocalTransport(sites, _step)
    start = time.perf_counter()
    total = sum_scalars(transport, list(sites), 1, settings)
    wall = time.perf_counter() - start
    if transport.errors:
        raise RuntimeError(f"round lost sites: {transport.errors}")
    exact = np.sum([v for v, _ in sites.values()], axis=0)
    return {
        "wall_ms": 1e3 * wall,
        "bytes_sent_per_site": int(np.mean(list(transport.bytes_sent.values()))),
        "bytes_received_per_site": int(np.mean(list(transport.bytes_received.values()))),
        # under CKKS the decryptor also receives every ciphertext; the other sites only a request
        "bytes_received_by_decryptor": transport.bytes_received[decryptor_for(list(sites), 1)],
        "client_ms": {
            phase: {"median": 1e3 * statistics.median(t.values()), "max": 1e3 * max(t.values())}
            for phase, t in transport.client_seconds.items()
        },
        "max_abs_error": float(np.max(np.abs(total - exact))),
    }


def _for_t(t: int, n_sites: int, reps: int, secret: ts.Context, settings: HESettings) -> dict:
    public = settings.public_context
    rng = np.random.default_rng(t)
    values = rng.normal(size=t)
    ct = ckks.encrypt_vector(secret, values)
    cts = [ckks.encrypt_vector(secret, rng.normal(size=t)) for _ in range(n_sites)]
    add_ms = _median_ms(lambda: ckks.add_ciphertexts(public, cts), reps) / (n_sites - 1)
    sites = {1000 + i: (rng.normal(size=t), secret) for i in range(n_sites)}
    plain_sites = {n: (v, None) for n, (v, _) in sites.items()}
    he_round = _round(sites, settings)
    plain_round = _round(plain_sites, None)
    return {
        "T": t,
        "ciphertext_bytes": len(ct),
        "encrypt_ms": _median_ms(lambda: ckks.encrypt_vector(secret, values), reps),
        "add_ms_per_ciphertext": add_ms,
        "decrypt_ms": _median_ms(lambda: ckks.decrypt_vector(secret, ct), reps),
        "round_he": he_round,
        "round_plain": plain_round,
        "round_wall_ratio_he_over_plain": he_round["wall_ms"] / plain_round["wall_ms"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sites", type=int, default=5)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--t", type=int, nargs="+", default=[5, 64])
    parser.add_argument("--poly-modulus-degree", type=int, default=8192)
    parser.add_argument("--coeff-mod-bit-sizes", type=int, nargs="+", default=[60, 40, 40, 60])
    parser.add_argument("--scale-bits", type=int, default=40)
    parser.add_argument("--quick", action="store_true", help="3 reps at T = 5 only (smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.reps, args.t = 3, [5]
    if args.sites < 2:
        parser.error("--sites must be at least 2")

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "KEYS"
        start = time.perf_counter()
        keys.init_keys(
            root, ["server"], False, args.poly_modulus_degree, args.coeff_mod_bit_sizes, args.scale_bits
        )
        init_ms = 1e3 * (time.perf_counter() - start)
        secret = keys.load_he_context(keys.secret_context_path(root), True, keys.load_fingerprints(root))
        settings = HESettings.from_keys_dir(root)
        sizes = {
            "public_context_bytes": keys.public_context_path(root).stat().st_size,
            "secret_context_bytes": keys.secret_context_path(root).stat().st_size,
        }
    out = {
        "params": {
            "poly_modulus_degree": args.poly_modulus_degree,
            "coeff_mod_bit_sizes": args.coeff_mod_bit_sizes,
            "scale_bits": args.scale_bits,
        },
        "sites": args.sites,
        "keys_init_ms": init_ms,
        **sizes,
        "per_t": [_for_t(t, args.sites, args.reps, secret, settings) for t in args.t],
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
