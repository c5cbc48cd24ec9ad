from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from secure_fed.audits.log import EVENTS, AuditLog, AuditLogError
from secure_fed.audits.records import GENESIS_HASH, record_hash
from secure_fed.verifier.verify import verify_logs

from .conftest import DELTA, mechanism_json


def _privacy_payload(epsilon: float = 1.0) -> dict:
    return {
        "site": "site-0",
        "population": "train",
        "mechanism": "dp_sgd",
        "event": mechanism_json(0.25, 1.1, 8),
        "delta": DELTA,
        "epsilon": {"rdp": epsilon, "prv": None},
        "budget": 10.0,
    }


def test_record_fields_hash_and_signature(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    log = AuditLog(tmp_path / "a.jsonl", "site-0", "run-1", key)
    first = log.append("policy", {"budget": 3.0, "note": "Zürich"})
    second = log.append("alpha", {"alpha": [0.5, 0.5]}, round=2)
    log.close()
    assert set(first) == {
        "seq",
        "time",
        "run_id",
        "round",
        "event",
        "party",
        "payload",
        "prev_hash",
        "hash",
        "signature",
    }
    assert (first["seq"], second["seq"]) == (0, 1)
    assert first["prev_hash"] == GENESIS_HASH and second["prev_hash"] == first["hash"]
    assert second["round"] == 2 and first["round"] is None
    assert first["time"].endswith("+00:00")
    # The hash is SHA-256 over the canonical JSON of the record without hash and signature.
    body = {k: v for k, v in first.items() if k not in ("hash", "signature")}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert "Zürich" in canonical
    assert first["hash"] == hashlib.sha256(canonical.encode("utf-8")).hexdigest() == record_hash(first)
    key.public_key().verify(base64.b64decode(first["signature"]), bytes.fromhex(first["hash"]))
    lines = (tmp_path / "a.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines[:2]] == [first, second]
    head = json.loads(lines[-1])
    assert head["event"] == "head" and head["payload"] == {"count": 2, "last_hash": second["hash"]}


def test_reopen_continues_the_chain(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    path = tmp_path / "a.jsonl"
    log = AuditLog(path, "site-0", "run-1", key)
    log.append("policy", {"budget": 3.0})
    log.abandon()  # a crash: no head record, a resumed run goes on with the chain
    log = AuditLog(path, "site-0", "run-1", key)
    assert log.next_seq == 1 and not log.closed
    record = log.append("alpha", {"alpha": 1.0}, round=1)
    log.close()
    assert record["seq"] == 1 and record["prev_hash"] == json.loads(path.read_text().splitlines()[0])["hash"]
    result = verify_logs([path], {"site-0": key.public_key()})
    assert result.ok, result.problems


def test_reopen_refuses_a_torn_last_line(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    path = tmp_path / "a.jsonl"
    log = AuditLog(path, "site-0", "run-1", key)
    log.append("policy", {"budget": 3.0})
    log.append("alpha", {"alpha": 1.0})
    log.abandon()
    data = path.read_bytes()
    path.write_bytes(data[:-40])  # a crash in the middle of writing the second record
    with pytest.raises(AuditLogError, match=r"a\.jsonl:2: torn last line"):
        AuditLog(path, "site-0", "run-1", key)
    assert path.read_bytes() == data[:-40]


@pytest.mark.parametrize("change", ["key", "run_id", "edited"])
def test_reopen_checks_the_tail(tmp_path: Path, change: str) -> None:
    key = Ed25519PrivateKey.generate()
    path = tmp_path / "a.jsonl"
    with AuditLog(path, "site-0", "run-1", key) as log:
        log.append("policy", {"budget": 3.0})
    run_id = "run-2" if change == "run_id" else "run-1"
    other = Ed25519PrivateKey.generate() if change == "key" else key
    if change == "edited":
        path.write_text(path.read_text().replace('"count":1', '"count":7'))
    expected = {
        "key": "not signed with site-0's key",
        "run_id": "run 'run-1'",
        "edited": "hash does not match",
    }
    with pytest.raises(AuditLogError, match=expected[change]):
        AuditLog(path, "site-0", run_id, other)


def test_second_writer_is_refused(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    log = AuditLog(tmp_path / "a.jsonl", "site-0", "run-1", key)
    with pytest.raises(AuditLogError, match="another process"):
        AuditLog(tmp_path / "a.jsonl", "site-0", "run-1", key)
    log.close()


def test_append_rejects_what_would_break_the_contract(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "a.jsonl", "site-0", "run-1", Ed25519PrivateKey.generate())
    with pytest.raises(ValueError, match="unknown audit event 'typo'"):
        log.append("typo", {})
    with pytest.raises(ValueError, match="unknown audit event 'head'"):
        log.append("head", {})
    bad = _privacy_payload()
    del bad["delta"]
    with pytest.raises(ValueError, match=r"missing \['delta'\]"):
        log.append("privacy", bad)
    with pytest.raises(ValueError, match="NaN"):
        log.append("alpha", {"alpha": float("nan")})
    record = log.append("privacy", {**_privacy_payload(), "epsilon": {"rdp": np.float64(2.5), "prv": None}})
    assert record["payload"]["epsilon"]["rdp"] == 2.5 and isinstance(
        record["payload"]["epsilon"]["rdp"], float
    )
    stored = log.append("alpha", {"alpha": np.array([0.25, 0.75], dtype=np.float32)})
    assert stored["payload"]["alpha"] == [0.25, 0.75]
    log.close()
    with pytest.raises(AuditLogError, match="closed"):
        log.append("alpha", {"alpha": 1.0})


def test_unclean_stop_writes_no_head(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    path = tmp_path / "a.jsonl"
    with pytest.raises(RuntimeError), AuditLog(path, "site-0", "run-1", key) as log:
        log.append("policy", {"budget": 3.0})
        raise RuntimeError("crash")
    assert [json.loads(line)["event"] for line in path.read_text().splitlines()] == ["policy"]


def test_copy_record_embeds_verbatim_and_checks_it(tmp_path: Path) -> None:
    site_key, server_key = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    site = AuditLog(tmp_path / "site-0.jsonl", "site-0", "run-1", site_key)
    record = site.append("privacy", _privacy_payload(), round=1)
    server = AuditLog(tmp_path / "server.jsonl", "server", "run-1", server_key)
    copy = server.copy_record(record, site_key.public_key())
    assert copy["event"] == "site_record" and copy["payload"] == record and copy["round"] == 1
    with pytest.raises(ValueError, match="signature does not verify with site-0's key"):
        server.copy_record(record, server_key.public_key())
    with pytest.raises(ValueError, match="hash does not match"):
        server.copy_record({**record, "round": 2})


def test_every_event_is_documented() -> None:
    import secure_fed.audits.log as module

    for name in (
        "run_config",
        "policy",
        "key_fingerprints",
        "privacy",
        "budget_refusal",
        "secagg_round",
        "alpha",
        "model_hash",
        "site_record",
        "head",
    ):
        assert name in EVENTS and f"`{name}`" in (module.__doc__ or "")
