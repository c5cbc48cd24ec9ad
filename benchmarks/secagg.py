"""SecAgg+ round vs plain round, in one process: wall time, ratio, bytes per site; prints JSON.

Two baselines, both reported:
- "codec": both rounds go through `LocalTransport`, whose byte codec is little more than a memory
  copy, so the plain round is close to free and the ratio is the protocol's cost against nothing.
- "records": both rounds go through `RecordsTransport`, which moves every payload as a Flower
  deployment does: `secure_fed.protocol.wire.to_records` → protobuf bytes → `from_records`. Reported twice:
  with float32 update vectors (the plain round ships 4 bytes per value, as many as SecAgg+'s ring
  words, so the ratio is the protocol's extra phases, keys, shares and masks alone; this is the
  comparison to Flower's own SecAgg+ on a float32 model) and with float64 vectors, as
  `SiteRuntime.train` uploads them today (the plain round then ships 8 bytes per value).
`critical_path_s` estimates a deployment where sites compute in parallel: the round's wall time
with each phase's client work replaced by that phase's slowest client.
Every site is a provisioned site with its own Ed25519 key (made here, in memory), as SecAgg+ needs:
the round includes signing and checking the advertised keys and partner lists.

glibc's allocator moves its mmap threshold as large buffers come and go, so a 1 M-value plain
round took 40 ms or 64 ms depending on what the code run before it left behind (the same code in
two states of the tree). The benchmark therefore re-executes itself with fixed thresholds
(`ALLOCATOR`), so that every round of every state of the code gets its 4-8 MB buffers the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from _secagg_floor import server_floor, site_floor  # benchmarks/ is on sys.path as a script
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from flwr.common.serde import recorddict_from_proto, recorddict_to_proto
from flwr.proto.recorddict_pb2 import RecordDict as ProtoRecordDict

from secure_fed.config import SecAggConfig
from secure_fed.crypto import secagg_channel as channel
from secure_fed.crypto.quantize import ring_dtype
from secure_fed.crypto.secagg_client import upload_fingerprint
from secure_fed.crypto.secagg_identity import SecAggIdentity, key_statement
from secure_fed.crypto.secagg_protocol import PLAIN_SUM, SecAggSettings, round_params
from secure_fed.crypto.secagg_shamir import SECRET_BYTES, combine_secret, split_secret
from secure_fed.crypto.threads import crypto_threads
from secure_fed.crypto.transport import LocalTransport, Received
from secure_fed.crypto.vectors import client_step, sum_vectors
from secure_fed.protocol.wire import from_records, to_records


def _over_flower(payload: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """A payload after the trip a Flower Message's content makes: records, protobuf bytes, back."""
    wire = recorddict_to_proto(to_records(payload)).SerializeToString()
    return from_records(recorddict_from_proto(ProtoRecordDict.FromString(wire))), len(wire)


@dataclass
class RecordsTransport(LocalTransport):
    """`LocalTransport` with Flower's message encoding in place of the byte codec; client state is
    kept as records too, as the ClientApp keeps it in `context.state`. No dropouts."""

    records_state: dict[int, Any] = field(default_factory=dict)

    def exchange(self, phase: str, requests: Mapping[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
        replies: dict[int, dict[str, Any]] = {}
        timings = self.client_seconds.setdefault(phase, {})
        for node, request in requests.items():
            delivered, size = _over_flower(request)
            self.bytes_received[node] = self.bytes_received.get(node, 0) + size
            state = from_records(self.records_state[node]) if node in self.records_state else {}
            start = time.perf_counter()
            try:
                reply, new_state = self.step(phase, delivered, state, self.inputs[node])
            except Exception as exc:  # noqa: BLE001 - as in LocalTransport: a failure is a non-answer
                self.errors[node] = exc
                continue
            finally:
                timings[node] = time.perf_counter() - start
            self.records_state[node] = to_records(new_state)
            replies[node], size = _over_flower(reply)
            self.bytes_sent[node] = self.bytes_sent.get(node, 0) + size
            self.received.append(Received(phase, node, replies[node]))
        return replies


def _identities(nodes: list[int]) -> dict[int, SecAggIdentity]:
    keys = {node: Ed25519PrivateKey.generate() for node in nodes}
    public = {f"site-{node}": key.public_key() for node, key in keys.items()}
    return {node: SecAggIdentity(f"site-{node}", "bench", key, public) for node, key in keys.items()}


def _site_step(
    phase: str,
    request: dict[str, Any],
    state: dict[str, Any],
    secret: tuple[np.ndarray, SecAggIdentity, dict[str, str]],
) -> tuple[dict[str, Any], dict[str, Any]]:
    vector, identity, memo = secret
    if phase != PLAIN_SUM and "fingerprint" not in memo:
        # as SiteRuntime: once per update (here per round, whose client time it counts), read-only
        memo["fingerprint"] = upload_fingerprint(vector)
    return client_step(phase, request, state, vector, identity=identity, fingerprint=memo.get("fingerprint"))


def _critical_path(wall: float, transport: LocalTransport) -> float:
    serial = sum(sum(t.values()) for t in transport.client_seconds.values())
    slowest = sum(max(t.values(), default=0.0) for t in transport.client_seconds.values())
    return wall - serial + slowest


def _one_round(
    inputs: dict[int, np.ndarray],
    dim: int,
    settings: SecAggSettings | None,
    round_id: int,
    transport_cls: type[LocalTransport],
) -> dict:
    # every round starts from fresh client state (a new transport): a site refuses to mask the same
    # update twice, and the benchmark sums the same updates round after round
    identities = _identities(list(inputs))
    transport = transport_cls({n: (x, identities[n], {}) for n, x in inputs.items()}, _site_step)
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


def _protocol_floor(inputs: dict[int, np.ndarray], dim: int, settings: SecAggSettings) -> dict[str, float]:
    """Time the vector arithmetic no SecAgg+ implementation can skip, alone (`_secagg_floor`).
    Added to the plain round it bounds from below what a SecAgg+ round can cost here."""
    params = round_params(len(inputs), dim, settings)
    rng = np.random.default_rng(0)
    sites = []
    for x in inputs.values():
        start = time.perf_counter()
        site_floor(x, params, settings, rng)
        sites.append(time.perf_counter() - start)
    total = np.zeros(dim + 1, dtype=ring_dtype(params.modulus_bits))
    start = time.perf_counter()
    server_floor(total, len(inputs), rng)
    server = time.perf_counter() - start
    return {"sites_s": sum(sites), "slowest_site_s": max(sites), "server_s": server}


def _fixed_crypto(inputs: dict[int, np.ndarray], dim: int, settings: SecAggSettings) -> dict[str, float]:
    """Time alone the per-round work of authenticated SecAgg+ that does not scale with the masks:
    per site one update fingerprint (once-only rule), two X25519 key pairs, 2k X25519 agreements
    with their HKDF (share channel, pairwise mask), one Ed25519 signature and k checks, one Shamir
    split and k share encryptions and decryptions; at the server one Shamir rebuild per site.
    Summed over the sites, as the one-process round runs them. Not part of `floor_s`: these are
    what this implementation spends, each counted once, not a bound for every implementation."""
    params = round_params(len(inputs), dim, settings)
    nodes = list(inputs)
    identities = _identities(nodes)
    parts = dict.fromkeys(("fingerprints_s", "x25519_s", "ed25519_s", "shamir_and_aead_s"), 0.0)
    shares: dict[int, list[bytes]] = {}
    for i, node in enumerate(nodes):
        me = identities[node]
        peers = [nodes[(i + j) % len(nodes)] for j in range(1, params.degree + 1)]
        peer_keys = [channel.new_keypair(os.urandom)[1] for _ in peers]
        statements = [
            key_statement("bench", 0, p, f"site-{p}", pk, pk) for p, pk in zip(peers, peer_keys, strict=True)
        ]
        signed = [(f"site-{p}", identities[p].sign(st), st) for p, st in zip(peers, statements, strict=True)]
        start = time.perf_counter()
        digests = {upload_fingerprint(inputs[node])}
        parts["fingerprints_s"] += time.perf_counter() - start
        start = time.perf_counter()
        (enc_sk, enc_pk), (mask_sk, mask_pk) = (
            channel.new_keypair(os.urandom),
            channel.new_keypair(os.urandom),
        )
        channel_keys = channel.channel_keys(enc_sk, peer_keys)
        channel.pairwise_mask_keys(mask_sk, peer_keys, 0)
        parts["x25519_s"] += time.perf_counter() - start
        start = time.perf_counter()
        me.sign(key_statement("bench", 0, node, me.site, enc_pk, mask_pk))
        checked = all(me.signed_by(site, sig, st) for site, sig, st in signed)
        parts["ed25519_s"] += time.perf_counter() - start
        start = time.perf_counter()
        seed = os.urandom(SECRET_BYTES)
        split = split_secret(seed, params.threshold, len(peers))
        sealed = [
            channel.seal(key, b"bench", share, os.urandom)
            for key, share in zip(channel_keys, split, strict=True)
        ]
        opened = [
            channel.open_sealed(key, b"bench", blob) for key, blob in zip(channel_keys, sealed, strict=True)
        ]
        parts["shamir_and_aead_s"] += time.perf_counter() - start
        if not checked or len(digests) != 1 or opened != split:
            raise RuntimeError("fixed-cost check went wrong")
        shares[node] = split
    start = time.perf_counter()
    for split in shares.values():
        combine_secret(split, params.threshold)
    parts["shamir_and_aead_s"] += time.perf_counter() - start
    return {**parts, "total_s": sum(parts.values())}


def bench(
    dim: int,
    sites: int,
    repeats: int,
    settings: SecAggSettings,
    dtype: np.dtype,
    transport_cls: type[LocalTransport] = LocalTransport,
) -> dict:
    rng = np.random.default_rng(dim + sites)
    # updates well inside the clip range, as count_scale keeps real uploads
    inputs = {node: rng.normal(0.0, settings.clip / 10, dim).astype(dtype) for node in range(1, sites + 1)}
    for x in inputs.values():
        x.flags.writeable = False  # as SiteRuntime stashes an update
    clipped = [np.clip(v.astype(np.float64), -settings.clip, settings.clip) for v in inputs.values()]
    expected = np.sum(clipped, axis=0)
    plain, secure = [], []
    for r in range(repeats):
        plain.append(_one_round(inputs, dim, None, r, transport_cls))
        secure.append(_one_round(inputs, dim, settings, r, transport_cls))
    floors = [_protocol_floor(inputs, dim, settings) for _ in range(repeats)]
    fixed = [_fixed_crypto(inputs, dim, settings) for _ in range(repeats)]
    err = max(float(np.max(np.abs(s["total"] - expected))) for s in secure)
    if err > secure[0]["bound"]:
        raise RuntimeError(f"SecAgg+ sum off by {err}, bound {secure[0]['bound']}")

    params = round_params(sites, dim, settings)

    def med(rows: list[dict], key: str) -> float:
        return float(np.median([row[key] for row in rows]))

    return {
        "dim": dim,
        "sites": sites,
        "repeats": repeats,
        "plain_round_s": med(plain, "wall_s"),
        "secagg_round_s": med(secure, "wall_s"),
        "ratio": med(secure, "wall_s") / med(plain, "wall_s"),
        # large fresh arrays make single rounds jump (page faults, allocator trimming): minima too
        "plain_round_s_min": min(row["wall_s"] for row in plain),
        "secagg_round_s_min": min(row["wall_s"] for row in secure),
        "ratio_of_minima": min(row["wall_s"] for row in secure) / min(row["wall_s"] for row in plain),
        "plain_critical_path_s": med(plain, "critical_path_s"),
        "secagg_critical_path_s": med(secure, "critical_path_s"),
        "critical_path_ratio": med(secure, "critical_path_s") / med(plain, "critical_path_s"),
        # the protocol's unavoidable vector arithmetic added to the plain round: no implementation
        # of SecAgg+ with these parameters can get its ratio below this in this one-process run
        "floor_s": {k: med(floors, k) for k in floors[0]},
        "floor_ratio": (med(plain, "wall_s") + med(floors, "sites_s") + med(floors, "server_s"))
        / med(plain, "wall_s"),
        "floor_critical_path_ratio": (
            med(plain, "critical_path_s") + med(floors, "slowest_site_s") + med(floors, "server_s")
        )
        / med(plain, "critical_path_s"),
        # outside the floor: the keys, signatures, fingerprints and shares of one round, timed alone
        "fixed_crypto_s": {k: med(fixed, k) for k in fixed[0]},
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
        "quantisation_bits": params.bits,
        "ring_word_bytes": ring_dtype(params.modulus_bits).itemsize,
    }


# large thresholds: big buffers come from the heap and are reused, never trimmed between rounds
ALLOCATOR = {"MALLOC_MMAP_THRESHOLD_": str(2**30), "MALLOC_TRIM_THRESHOLD_": str(2**30)}


def main() -> None:
    if any(os.environ.get(k) != v for k, v in ALLOCATOR.items()):  # glibc reads them at start only
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **ALLOCATOR})
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dims", type=int, nargs="+", default=[10_000, 1_000_000])
    parser.add_argument("--sites", type=int, nargs="+", default=[5, 10])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--dtype", default="float32", help="dtype of the update vectors, codec baseline")
    parser.add_argument("--quick", action="store_true", help="10k and 1M values, 5 sites, 2 repeats")
    args = parser.parse_args()
    if args.quick:
        args.sites, args.repeats = [5], 2
    settings = SecAggSettings.from_config(SecAggConfig())  # what `secure-fed run --secagg` uses
    grid = [(d, s) for d in args.dims for s in args.sites]
    codec = [bench(d, s, args.repeats, settings, np.dtype(args.dtype)) for d, s in grid]
    records32 = [bench(d, s, args.repeats, settings, np.dtype(np.float32), RecordsTransport) for d, s in grid]
    records64 = [bench(d, s, args.repeats, settings, np.dtype(np.float64), RecordsTransport) for d, s in grid]
    print(
        json.dumps(
            {
                "settings": settings.__dict__,
                "crypto_threads": crypto_threads(),
                "allocator": ALLOCATOR,
                "codec_baseline": {"dtype": args.dtype, "results": codec},
                "records_baseline": {"dtype": "float32", "results": records32},
                "records_float64_baseline": {"dtype": "float64", "results": records64},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
