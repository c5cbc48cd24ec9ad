"""The audit record format: canonical JSON, its SHA-256 hash and the Ed25519 signature over it.

A record is a JSON object with exactly the fields in `FIELDS`. `hash` is the SHA-256 (hex) of the
canonical JSON of the record without `hash` and `signature`; `signature` is Ed25519 over the 32 raw
digest bytes, base64-encoded. Canonical JSON = sorted keys, separators (",", ":"), UTF-8 kept as is
(ensure_ascii=False), no NaN/Infinity (they are not JSON, and a verifier in another language would
hash something else).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

FIELDS: frozenset[str] = frozenset(
    {"seq", "time", "run_id", "round", "event", "party", "payload", "prev_hash", "hash", "signature"}
)
UNSIGNED_FIELDS: frozenset[str] = frozenset({"hash", "signature"})
# prev_hash of the first record of a log: there is nothing before it.
GENESIS_HASH = "0" * 64


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def record_hash(record: dict[str, Any]) -> str:
    """SHA-256 hex of the canonical JSON of `record` without its hash and signature."""
    body = {key: value for key, value in record.items() if key not in UNSIGNED_FIELDS}
    return hashlib.sha256(canonical_json(body).encode("utf-8")).hexdigest()


def sign_hash(hash_hex: str, key: Ed25519PrivateKey) -> str:
    return base64.b64encode(key.sign(bytes.fromhex(hash_hex))).decode("ascii")


def signature_holds(hash_hex: str, signature_b64: str, key: Ed25519PublicKey) -> bool:
    try:
        key.verify(base64.b64decode(signature_b64, validate=True), bytes.fromhex(hash_hex))
    except (InvalidSignature, ValueError, binascii.Error, TypeError):
        return False
    return True


def seal(body: dict[str, Any], key: Ed25519PrivateKey) -> dict[str, Any]:
    """`body` (every field but hash and signature) completed with its hash and signature."""
    digest = record_hash(body)
    return {**body, "hash": digest, "signature": sign_hash(digest, key)}


def shape_problem(record: object) -> str | None:
    """Why `record` is not shaped like an audit record, or None when it is."""
    if not isinstance(record, dict):
        return f"not a JSON object but {type(record).__name__}"
    missing, extra = FIELDS - set(record), set(record) - FIELDS
    if missing or extra:
        parts = [
            f"missing fields {sorted(missing)}" if missing else "",
            f"unexpected fields {sorted(extra)}" if extra else "",
        ]
        return "; ".join(part for part in parts if part)
    checks = {
        "seq": isinstance(record["seq"], int) and not isinstance(record["seq"], bool),
        "round": record["round"] is None
        or (isinstance(record["round"], int) and not isinstance(record["round"], bool)),
        "event": isinstance(record["event"], str),
        "party": isinstance(record["party"], str),
        "run_id": isinstance(record["run_id"], str),
        "time": isinstance(record["time"], str),
        "payload": isinstance(record["payload"], dict),
        "prev_hash": isinstance(record["prev_hash"], str),
        "hash": isinstance(record["hash"], str),
        "signature": isinstance(record["signature"], str),
    }
    wrong = [name for name, ok in checks.items() if not ok]
    return f"fields of the wrong type: {wrong}" if wrong else None
