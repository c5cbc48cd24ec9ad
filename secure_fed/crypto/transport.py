"""How a server-side protocol reaches its clients, and an in-memory stand-in for tests and benchmarks.

The Flower layer implements `Transport` with the Message API; `LocalTransport` runs the client steps
in this process but still pushes every payload through a byte codec, so that a test sees exactly
what the server would receive on the wire and a benchmark can count the bytes.
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

Payload = dict[str, Any]
ClientStep = Callable[[str, Payload, Payload, Any], tuple[Payload, Payload]]

_SCALARS = (bool, int, float, str, bytes)


class Transport(Protocol):
    def exchange(self, phase: str, requests: Mapping[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
        """Send `requests[node]` to each node; return the replies of the nodes that answered."""
        ...


def _encode_scalar(value: Any, blobs: list[bytes], offset: list[int]) -> list[Any]:
    # bool before int: bool is a subclass of int and must keep its type across the wire
    if isinstance(value, bool):
        return ["b", value]
    if isinstance(value, int):
        return ["i", value]
    if isinstance(value, float):
        return ["f", value]
    if isinstance(value, str):
        return ["s", value]
    if isinstance(value, bytes):
        blobs.append(value)
        offset[0] += len(value)
        return ["y", offset[0] - len(value), len(value)]
    raise TypeError(f"payload value of type {type(value).__name__} is not allowed")


def _encode_list(value: list[Any], blobs: list[bytes], offset: list[int]) -> list[Any]:
    # A SecAgg+ round's lists are all bytes (shares, confirmations) or all ints (node ids), one per
    # partner: at degree 49 tagging each item cost a quarter of the round, so a homogeneous list is
    # one header entry (bytes: one blob and the lengths); `type(v) is int` keeps bools out of "I".
    if value and all(type(v) is bytes for v in value):
        start = offset[0]
        blobs.append(b"".join(value))
        offset[0] += len(blobs[-1])
        return ["Y", start, [len(v) for v in value]]
    if value and all(type(v) is int for v in value):
        return ["I", value]
    return ["l", [_encode_scalar(v, blobs, offset) for v in value]]


def encode_payload(payload: Mapping[str, Any]) -> bytes:
    """Serialise a payload (the value types the Transport contract allows) to bytes.

    Raises TypeError for anything else (dicts, nested lists, numpy scalars, object arrays), so
    a protocol that would not survive Flower's records fails here first.
    """
    blobs: list[bytes] = []
    offset = [0]
    header: dict[str, Any] = {}
    for key, value in payload.items():
        if not isinstance(key, str):
            raise TypeError(f"payload key {key!r} is not a str")
        if isinstance(value, np.ndarray):
            if value.dtype.hasobject:
                raise TypeError(f"payload array {key!r} has dtype object")
            raw = np.ascontiguousarray(value).tobytes()
            blobs.append(raw)
            offset[0] += len(raw)
            header[key] = ["a", value.dtype.str, list(value.shape), offset[0] - len(raw), len(raw)]
        elif isinstance(value, list):
            header[key] = _encode_list(value, blobs, offset)
        else:
            header[key] = _encode_scalar(value, blobs, offset)
    head = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<I", len(head)) + head + b"".join(blobs)


def _decode_scalar(item: list[Any], body: memoryview) -> Any:
    tag = item[0]
    if tag == "y":
        return bytes(body[item[1] : item[1] + item[2]])
    if tag in ("b", "i", "f", "s"):
        return item[1]
    raise ValueError(f"unknown payload tag {tag!r}")


def _decode_bytes_list(start: int, lengths: list[int], body: memoryview) -> list[bytes]:
    valid = all(type(n) is int and n >= 0 for n in lengths)
    end = start + sum(lengths) if valid else -1
    if not valid or not 0 <= start <= end <= len(body):
        raise ValueError("malformed bytes list in payload")
    blob = bytes(body[start:end])
    out, at = [], 0
    for length in lengths:
        out.append(blob[at : at + length])
        at += length
    return out


def decode_payload(data: bytes) -> dict[str, Any]:
    """Inverse of `encode_payload`; arrays come back as read-only views of `data`."""
    (head_len,) = struct.unpack_from("<I", data)
    header = json.loads(data[4 : 4 + head_len])
    body = memoryview(data)[4 + head_len :]
    out: dict[str, Any] = {}
    for key, item in header.items():
        if item[0] == "a":
            _, dtype, shape, start, length = item
            out[key] = np.frombuffer(body[start : start + length], dtype=np.dtype(dtype)).reshape(shape)
        elif item[0] == "l":
            out[key] = [_decode_scalar(v, body) for v in item[1]]
        elif item[0] == "Y":
            out[key] = _decode_bytes_list(item[1], item[2], body)
        elif item[0] == "I":
            if not all(type(v) is int for v in item[1]):
                raise ValueError("malformed int list in payload")
            out[key] = list(item[1])
        else:
            out[key] = _decode_scalar(item, body)
    return out


@dataclass
class Received:
    """One reply as the server got it."""

    phase: str
    node: int
    payload: dict[str, Any]


@dataclass
class LocalTransport:
    """In-process transport: each node runs `step(phase, request, state, inputs[node])`.

    dropouts[phase] lists nodes that stop answering from that phase on (a crashed or disconnected
    site). A step that raises is treated like a node that did not answer (as a Flower error reply
    would be) and the exception is kept in `errors`. Client state is round-tripped through the
    codec after every step, which proves it fits Flower's `context.state`.
    """

    inputs: Mapping[int, Any]
    step: ClientStep
    dropouts: Mapping[str, Collection[int]] = field(default_factory=dict)
    received: list[Received] = field(default_factory=list)
    errors: dict[int, Exception] = field(default_factory=dict)
    bytes_sent: dict[int, int] = field(default_factory=dict)
    bytes_received: dict[int, int] = field(default_factory=dict)
    client_seconds: dict[str, dict[int, float]] = field(default_factory=dict)
    states: dict[int, bytes] = field(default_factory=dict)
    gone: set[int] = field(default_factory=set)

    def exchange(self, phase: str, requests: Mapping[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
        self.gone.update(self.dropouts.get(phase, ()))
        replies: dict[int, dict[str, Any]] = {}
        timings = self.client_seconds.setdefault(phase, {})
        for node, request in requests.items():
            wire_request = encode_payload(request)
            self.bytes_received[node] = self.bytes_received.get(node, 0) + len(wire_request)
            if node in self.gone or node in self.errors:
                continue
            state = decode_payload(self.states[node]) if node in self.states else {}
            start = time.perf_counter()
            try:
                reply, new_state = self.step(phase, decode_payload(wire_request), state, self.inputs[node])
            except Exception as exc:  # noqa: BLE001 - any client failure is a non-answer, as in Flower
                self.errors[node] = exc
                continue
            finally:
                timings[node] = time.perf_counter() - start
            self.states[node] = encode_payload(new_state)
            wire_reply = encode_payload(reply)
            self.bytes_sent[node] = self.bytes_sent.get(node, 0) + len(wire_reply)
            replies[node] = decode_payload(wire_reply)
            self.received.append(Received(phase, node, replies[node]))
        return replies
