"""What an attacker with file access (and, for some tests, a signing key) would do to a log."""

from __future__ import annotations

import json
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
