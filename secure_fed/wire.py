"""Payload dicts ↔ Flower RecordDicts.

Protocol code (crypto/, the FedTAR round) speaks in plain dicts of scalars, bytes, lists and numpy
arrays; only this module knows Flower's record types. Arrays go to an ArrayRecord, scalars to a
ConfigRecord; anything else (e.g. a dict of per-neighbour keys) is carried as tagged JSON, never as
pickle, so a message cannot make the receiver execute code.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

_ARRAYS, _CONFIG, _JSON = "arrays", "config", "json"


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


def _is_config_value(value: Any) -> bool:
    scalar = (int, float, str, bytes, bool)
    if isinstance(value, scalar):
        return True
    return (
        isinstance(value, list)
        and len(value) > 0
        and all(isinstance(v, type(value[0])) for v in value)
        and isinstance(value[0], scalar)
    )


def to_records(payload: dict[str, Any]) -> RecordDict:
    arrays, config, other = {}, {}, {}
    for key, value in payload.items():
        if isinstance(value, np.ndarray):
            arrays[key] = Array(np.ascontiguousarray(value))
        elif isinstance(value, np.generic):
            config[key] = value.item()
        elif _is_config_value(value):
            config[key] = value
        else:
            other[key] = value
    records = RecordDict()
    records[_ARRAYS] = ArrayRecord(arrays)
    records[_CONFIG] = ConfigRecord(config)
    records[_JSON] = ConfigRecord({"payload": json.dumps(other, default=_json_default)})
    return records


def from_records(records: RecordDict) -> dict[str, Any]:
    payload: dict[str, Any] = {}
    if _ARRAYS in records:
        payload.update({k: v.numpy() for k, v in records.array_records[_ARRAYS].items()})
    if _CONFIG in records:
        payload.update(dict(records.config_records[_CONFIG]))
    if _JSON in records:
        payload.update(json.loads(str(records.config_records[_JSON]["payload"]), object_hook=_json_hook))
    return payload


def store_state(state: RecordDict, prefix: str, payload: dict[str, Any]) -> None:
    """Keep a payload in a Context's state (a RecordDict holds records, not nested RecordDicts)."""
    records = to_records(payload)
    for name in (_ARRAYS, _CONFIG, _JSON):
        state[f"{prefix}.{name}"] = records[name]


def load_state(state: RecordDict, prefix: str) -> dict[str, Any]:
    records = RecordDict()
    for name in (_ARRAYS, _CONFIG, _JSON):
        key = f"{prefix}.{name}"
        if key in state:
            records[name] = state[key]
    return from_records(records)
