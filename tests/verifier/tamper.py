"""What an attacker with file access (and, for some tests, a signing key) would do to a log."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from secure_fed.audits.records import canonical_json, seal


def read_records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def write_records(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_text("".join(canonical_json(record) + "\n" for record in records), encoding="utf-8")


def reseal_from(records: list[dict[str, Any]], start: int, key: Ed25519PrivateKey) -> list[dict[str, Any]]:
    """Re-hash and re-sign records[start:] (fixing prev_hash and the head), as a key holder could."""
    out = records[:start]
    for record in records[start:]:
        body = {k: v for k, v in record.items() if k not in ("hash", "signature")}
        body["prev_hash"] = out[-1]["hash"] if out else "0" * 64
        if body["event"] == "head":
            body["payload"] = {"count": body["seq"], "last_hash": body["prev_hash"]}
        out.append(seal(body, key))
    return out


def first_index(records: list[dict[str, Any]], event: str, **payload: Any) -> int:
    for index, record in enumerate(records):
        if record["event"] == event and all(record["payload"].get(k) == v for k, v in payload.items()):
            return index
    raise LookupError(f"no {event} record with {payload}")


def subject(record: dict[str, Any]) -> dict[str, Any]:
    """The record a line is about: the embedded original for a `site_record` copy, else the record."""
    return record["payload"] if record["event"] == "site_record" else record


def remove_records(
    path: Path, key: Ed25519PrivateKey, drop: Callable[[dict[str, Any]], bool]
) -> list[dict[str, Any]]:
    """Delete the records whose subject `drop` selects, renumber and re-sign the whole chain with
    `key`: what the holder of that log's key can do undetected within its own log. Returns what went."""
    records = read_records(path)
    gone = [record for record in records if drop(subject(record))]
    kept = [record for record in records if not drop(subject(record))]
    for seq, record in enumerate(kept):
        record["seq"] = seq
    write_records(path, reseal_from(kept, 0, key))
    return gone
