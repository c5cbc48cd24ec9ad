"""The server's request fields, each checked for its type before a phase reads it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from secure_fed.crypto.secagg_protocol import (
    SecAggRefused,
)


def _int(request: Mapping[str, Any], key: str) -> int:
    value = request.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise SecAggRefused(f"request field {key!r} must be an int")
    return value


def _float(request: Mapping[str, Any], key: str) -> float:
    value = request.get(key)
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise SecAggRefused(f"request field {key!r} must be a number")
    return float(value)


def _ids(request: Mapping[str, Any], key: str) -> list[int]:
    value = request.get(key)
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise SecAggRefused(f"request field {key!r} must be a list of ints")
    if len(set(value)) != len(value):
        raise SecAggRefused(f"request field {key!r} repeats a node")
    return value


def _blobs(request: Mapping[str, Any], key: str, count: int, size: int | None = None) -> list[bytes]:
    value = request.get(key)
    if not isinstance(value, list) or len(value) != count or not all(isinstance(v, bytes) for v in value):
        raise SecAggRefused(f"request field {key!r} must be a list of {count} byte strings")
    if size is not None and any(len(v) != size for v in value):
        raise SecAggRefused(f"request field {key!r} must hold {size}-byte values")
    return value


def _strs(request: Mapping[str, Any], key: str, count: int) -> list[str]:
    value = request.get(key)
    if not isinstance(value, list) or len(value) != count or not all(isinstance(v, str) for v in value):
        raise SecAggRefused(f"request field {key!r} must be a list of {count} strings")
    return value


def _round_id(request: Mapping[str, Any]) -> int | str:
    value = request.get("round_id")
    if not isinstance(value, int | str) or isinstance(value, bool):
        raise SecAggRefused("request field 'round_id' must be an int or str")
    return value
