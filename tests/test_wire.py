"""Every protocol payload survives Flower's records: what the Flower transports carry is exactly
what the in-process engine carries (SecAgg+ and CKKS phases included)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
import tenseal as ts
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from secure_fed.crypto import scalars as scalar_sum
from secure_fed.crypto.ckks import make_context, serialize_public
from secure_fed.crypto.scalars import HESettings, sum_scalars
from secure_fed.crypto.secagg_identity import SecAggIdentity
from secure_fed.crypto.secagg_protocol import SecAggSettings
from secure_fed.crypto.vectors import sum_vectors
from secure_fed.protocol.wire import from_records, load_state, store_state, to_records
from tests.crypto.test_secagg_rounds import site_step, with_identities


class RecordsTransport:
    """Routes every request, reply and client state through Flower RecordDicts."""

    def __init__(self, step: Any, inputs: Mapping[int, Any]) -> None:
        self.step, self.inputs = step, inputs
        self.states: dict[int, Any] = {}

    def exchange(self, phase: str, requests: Mapping[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
        replies = {}
        for node, request in requests.items():
            from flwr.app import RecordDict

            context_state = self.states.setdefault(node, RecordDict())
            state = load_state(context_state, "p")
            reply, state = self.step(phase, from_records(to_records(request)), state, self.inputs[node])
            store_state(context_state, "p", state)
            replies[node] = from_records(to_records(reply))
        return replies


def test_secagg_round_over_flower_records_equals_plain_sum():
    rng = np.random.default_rng(0)
    vectors = {n: rng.uniform(-0.5, 0.5, 257) for n in range(4)}
    transport = RecordsTransport(site_step, with_identities(vectors))
    result = sum_vectors(transport, list(vectors), 257, SecAggSettings(clip=8.0, bits=24), round_id=3)
    assert sorted(result.survivors) == [0, 1, 2, 3]
    assert np.max(np.abs(result.total - sum(vectors.values()))) <= result.quantisation_bound + 1e-12


def test_ckks_round_over_flower_records_equals_plain_sum():
    secret = make_context()
    public = ts.context_from(serialize_public(secret))
    rng = np.random.default_rng(1)
    values = {n: rng.normal(size=5) for n in range(3)}
    signing = {f"site{n}": Ed25519PrivateKey.generate() for n in values}
    public_keys = {site: key.public_key() for site, key in signing.items()}

    def step(phase: str, request: dict, state: dict, mine: tuple[int, np.ndarray]) -> tuple[dict, dict]:
        site = f"site{mine[0]}"
        identity = SecAggIdentity(site, "run", signing[site], public_keys)
        return scalar_sum.client_step(phase, request, state, mine[1], secret, identity, 3)

    total = sum_scalars(
        RecordsTransport(step, {n: (n, v) for n, v in values.items()}),
        list(values),
        7,
        HESettings(public, min_participants=3),
    )
    assert np.allclose(total, sum(values.values()), atol=1e-6)


@pytest.mark.parametrize(
    "value", [b"", [], [b"a", b"b"], {"7": [b"k"]}, np.zeros((2, 3), np.uint32), 2**63 - 1]
)
def test_payload_values_round_trip(value):
    back = from_records(to_records({"v": value}))["v"]
    if isinstance(value, np.ndarray):
        assert back.dtype == value.dtype and np.array_equal(back, value)
    else:
        assert back == value


def test_arrays_travel_raw_and_come_back_exact_and_writable():
    from secure_fed.protocol.wire import RAW_STYPE

    rng = np.random.default_rng(2)
    values = {
        "f64": rng.normal(size=1000),
        "f32": rng.normal(size=(10, 7)).astype(np.float32),
        "strided": rng.normal(size=(6, 8))[:, ::2],  # not contiguous: sent in C order
        "big_endian": np.arange(5, dtype=">u8"),
        "empty": np.zeros((0, 3)),
    }
    records = to_records(values)
    assert {a.stype for a in records.array_records["arrays"].values()} == {RAW_STYPE}
    back = from_records(records)
    for key, value in values.items():
        assert back[key].dtype == value.dtype and back[key].shape == value.shape, key
        assert np.array_equal(back[key], value), key
        back[key][...] = 0  # a receiver may update what it was sent in place
    assert np.array_equal(from_records(records)["f64"], values["f64"])  # the record is not changed


def test_flower_made_arrays_are_still_read_and_malformed_raw_arrays_are_refused():
    from flwr.app import Array, ArrayRecord, RecordDict

    from secure_fed.protocol.wire import RAW_STYPE

    flower_made = RecordDict({"arrays": ArrayRecord({"v": Array(np.arange(4.0))})})
    assert np.array_equal(from_records(flower_made)["v"], np.arange(4.0))
    bad = {
        "short data": Array(dtype="<f8", shape=(3,), stype=RAW_STYPE, data=bytes(16)),
        "objects": Array(dtype="|O", shape=(1,), stype=RAW_STYPE, data=bytes(8)),
        "negative shape": Array(dtype="<f8", shape=(-1,), stype=RAW_STYPE, data=b""),
    }
    for array in bad.values():  # each refused with its shape named, not read short or as objects
        with pytest.raises(ValueError, match="malformed array"):
            from_records(RecordDict({"arrays": ArrayRecord({"v": array})}))
    with pytest.raises(TypeError):
        to_records({"v": np.array([None, 1])})
