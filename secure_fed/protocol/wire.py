"""Payload dicts ↔ Flower RecordDicts.

Protocol code (crypto/, the FedTAR round) speaks in plain dicts of scalars, bytes, lists and numpy
arrays; only this module knows Flower's record types. Arrays go to an ArrayRecord, byte strings to
a ConfigRecord; everything else (numbers, strings, lists, a dict of per-neighbour keys) is carried
as tagged JSON, never as pickle, so a message cannot make the receiver execute code.
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

_ARRAYS, _CONFIG = "arrays", "config"
# An array's bytes as they lie in memory (C order, the dtype's own byte order), dtype and shape in
# the Array's fields: np.save into a BytesIO and np.load back (Flower's "numpy.ndarray") cost
# ~2.5 ms a megabyte at the two ends, most of a plain round's encoding; this costs one copy.
RAW_STYPE = "secure_fed.raw"
_JSON = "~json"  # the ConfigRecord entry holding the JSON part (no protocol key starts with "~")


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"__b64__": base64.b64encode(value).decode()}
    if isinstance(value, np.ndarray):
        return {"__nd__": value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot send a {type(value).__name__}")


def _json_hook(obj: dict[str, Any]) -> Any:
    if "__b64__" in obj:
        return base64.b64decode(obj["__b64__"])
    if "__nd__" in obj:
        return np.asarray(obj["__nd__"], dtype=obj["dtype"])
    return obj


def _is_bytes_value(value: Any) -> bool:
    return isinstance(value, bytes) or (
        isinstance(value, list) and len(value) > 0 and all(isinstance(v, bytes) for v in value)
    )


def _to_array(value: np.ndarray) -> Array:
    if value.dtype.hasobject:
        raise TypeError("cannot send an array of Python objects")
    return Array(dtype=value.dtype.str, shape=tuple(value.shape), stype=RAW_STYPE, data=value.tobytes())


def _from_array(array: Array) -> np.ndarray:
    """The array a record carries: ours raw, Flower's own (np.save) through Flower. A raw array's
    dtype and length are checked against its bytes, so a malformed one is refused, not misread."""
    if array.stype != RAW_STYPE:
        return array.numpy()
    dtype = np.dtype(array.dtype)
    shape = tuple(int(n) for n in array.shape)
    if dtype.hasobject or any(n < 0 for n in shape) or math.prod(shape) * dtype.itemsize != len(array.data):
        raise ValueError(f"malformed array in message: {array.dtype} {shape}, {len(array.data)} bytes")
    # a writable copy: receivers may update what they are sent in place, as np.load's result allowed
    return np.frombuffer(array.data, dtype=dtype).reshape(shape).copy()


def to_records(payload: dict[str, Any]) -> RecordDict:
    """Arrays to an ArrayRecord; byte strings (keys, shares, ciphertexts) and one JSON string of all
    the rest (numbers, strings, lists, dicts) to one ConfigRecord. Flower's encoding costs a fixed
    overhead per record and per entry at both ends, which made SecAgg+'s small messages cost more
    than their cryptography; a record is sent only when the payload has something for it."""
    if _JSON in payload:
        raise ValueError(f"{_JSON!r} is the wire's own key, not a payload key")
    arrays, config, other = {}, {}, {}
    for key, value in payload.items():
        if isinstance(value, np.ndarray):
            arrays[key] = _to_array(value)
        elif _is_bytes_value(value):
            config[key] = value
        else:
            other[key] = value
    if other:
        config[_JSON] = json.dumps(other, default=_json_default)
    records = RecordDict()
    if arrays:
        records[_ARRAYS] = ArrayRecord(arrays)
    if config:
        records[_CONFIG] = ConfigRecord(config)
    return records


def from_records(records: RecordDict) -> dict[str, Any]:
    payload: dict[str, Any] = {}
    if _ARRAYS in records:
        payload.update({k: _from_array(v) for k, v in records.array_records[_ARRAYS].items()})
    if _CONFIG in records:
        config = dict(records.config_records[_CONFIG])
        other = config.pop(_JSON, None)
        payload.update(config)
        if other is not None:
            payload.update(json.loads(str(other), object_hook=_json_hook))
    return payload


def store_state(state: RecordDict, prefix: str, payload: dict[str, Any]) -> None:
    """Keep a payload in a Context's state (a RecordDict holds records, not nested RecordDicts)."""
    records = to_records(payload)
    for name in (_ARRAYS, _CONFIG):
        key = f"{prefix}.{name}"
        if name in records:
            state[key] = records[name]
        elif key in state:
            del state[key]  # what an earlier payload stored there is not part of this one


def load_state(state: RecordDict, prefix: str) -> dict[str, Any]:
    records = RecordDict()
    for name in (_ARRAYS, _CONFIG):
        key = f"{prefix}.{name}"
        if key in state:
            records[name] = state[key]
    return from_records(records)
