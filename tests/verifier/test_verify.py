from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from secure_fed.audits.keys import load_public_keys
from secure_fed.audits.log import AuditLog
from secure_fed.audits.records import seal
from secure_fed.verifier.verdict import verdict
from secure_fed.verifier.verify import verification_json, verify_logs
from secure_fed.verifier.verify_console import verify_main

from .conftest import DELTA, Run, instruction, mechanism_json
from .tamper import first_index, read_records, remove_records, reseal_from, write_records


def _verify(run: Run, *parties: str):
    paths = [run.paths[party] for party in parties] if parties else run.all_paths
    return verify_logs(paths, load_public_keys(run.keys_dir))


def _first(result) -> str:
    assert not result.ok and result.problems
    return str(result.problems[0])


def test_untouched_logs_verify_and_match_opacus_within_1_percent(pristine: Run) -> None:
    result = _verify(pristine)
    assert result.ok, [str(p) for p in result.problems]
    assert all(log.closed for log in result.logs)
    # Every privacy record re-derived once (copies share their original's hash).
    assert len(result.rederived) == sum(pristine.privacy_count.values()) == 12
    logged = {}
    for path in pristine.all_paths[:2]:
        for record in read_records(path):
            if record["event"] == "privacy":
                logged[record["hash"]] = record["payload"]["epsilon"]["rdp"]
    for digest, epsilon in logged.items():
        again = result.rederived[digest]
        assert abs(again.rdp - epsilon) / epsilon < 0.01
        assert again.pld < again.rdp  # the tight value is below the RDP bound
    # The server's log alone carries the sites' signed records and verifies on its own.
    assert _verify(pristine, "server").ok


def test_changed_number_is_a_hash_mismatch(run: Run) -> None:
    path = run.paths["site-0"]
    lines = path.read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if '"dp_sgd"' in line)
    lines[index] = lines[index].replace('"noise_multiplier":1.1', '"noise_multiplier":1.5')
    path.write_text("\n".join(lines) + "\n")
    assert _first(_verify(run, "site-0")) == f"{path}:{index + 1}: hash mismatch (record was modified)"


def test_deleted_record(run: Run) -> None:
    path = run.paths["site-0"]
    records = read_records(path)
    del records[3]
    write_records(path, records)
    assert _first(_verify(run, "site-0")) == f"{path}:4: seq 4 expected 3 (record deleted or reordered)"


def test_swapped_records(run: Run) -> None:
    path = run.paths["site-0"]
    records = read_records(path)
    records[2], records[3] = records[3], records[2]
    write_records(path, records)
    problems = [str(p) for p in _verify(run, "site-0").problems]
    assert problems[0] == f"{path}:3: seq 3 expected 2 (record deleted or reordered)"
    assert f"{path}:4: seq 2 expected 4 (record deleted or reordered)" in problems


def test_inserted_forged_record(run: Run) -> None:
    path = run.paths["site-0"]
    records = read_records(path)
    forged = seal(
        {
            **{k: v for k, v in records[2].items() if k not in ("hash", "signature")},
            "seq": 3,
            "prev_hash": records[2]["hash"],
            "event": "policy",
            "payload": {"budget": 1000.0},
        },
        Ed25519PrivateKey.generate(),  # the forger does not hold site-0's key
    )
    records.insert(3, forged)
    write_records(path, records)
    problems = [str(p) for p in _verify(run, "site-0").problems]
    assert problems[0] == f"{path}:4: signature does not verify with site-0's key"
    assert f"{path}:5: seq 3 expected 4 (record deleted or reordered)" in problems


def test_missing_head_is_truncation(run: Run) -> None:
    path = run.paths["site-1"]
    records = read_records(path)
    write_records(path, records[:-3])
    result = _verify(run, "site-1")
    assert [str(p) for p in result.problems] == [
        f"{path}:{len(records) - 3}: truncated: no head record (log cut short or not closed cleanly)"
    ]
    assert not result.logs[0].closed


def test_torn_last_line(run: Run) -> None:
    path = run.paths["site-1"]
    data = path.read_bytes()
    lines = data.count(b"\n")
    path.write_bytes(data[:-25])
    assert _first(_verify(run, "site-1")).startswith(f"{path}:{lines}: torn last line")


def test_record_signed_with_another_key(run: Run) -> None:
    path = run.paths["site-0"]
    records = read_records(path)
    body = {k: v for k, v in records[4].items() if k not in ("hash", "signature")}
    records[4] = seal(body, run.keys["site-1"])  # same content and hash, signed by another site
    write_records(path, records)
    assert [str(p) for p in _verify(run, "site-0").problems] == [
        f"{path}:5: signature does not verify with site-0's key"
    ]


def _forge_epsilon(run: Run, party: str) -> tuple[Path, int, float]:
    """Halve the ε of the last dp_sgd record and re-sign the chain with the party's real key."""
    path = run.paths[party]
    records = read_records(path)
    index = max(i for i, r in enumerate(records) if r["payload"].get("mechanism") == "dp_sgd")
    original = records[index]["payload"]["epsilon"]["rdp"]
    records[index]["payload"]["epsilon"]["rdp"] = original / 2
    write_records(path, reseal_from(records, index, run.keys[party]))
    return path, index, original


def test_forged_epsilon_is_caught_only_by_rederivation(run: Run) -> None:
    path, index, original = _forge_epsilon(run, "site-0")
    problems = [str(p) for p in _verify(run, "site-0").problems]
    assert len(problems) == 1, problems
    match = re.fullmatch(
        rf"{re.escape(str(path))}:{index + 1}: RDP epsilon ([0-9.]+) does not match mechanism parameters "
        r"\(re-derived ([0-9.]+) with RDP; site-0's training patients, δ=1e-05\)",
        problems[0],
    )
    assert match, problems[0]
    assert float(match.group(1)) == pytest.approx(original / 2, rel=1e-3)
    assert float(match.group(2)) == pytest.approx(original, rel=0.01)


def test_server_copy_must_match_the_site_log(run: Run) -> None:
    _forge_epsilon(run, "site-0")
    problems = [str(p) for p in _verify(run).problems]
    server = str(run.paths["server"])
    assert any(
        p.startswith(server) and "differs from" in p and "embedded site-0 record" in p for p in problems
    )


def test_edited_embedded_copy_is_detected(run: Run) -> None:
    path = run.paths["server"]
    records = read_records(path)
    index = first_index(records, "site_record")
    records[index]["payload"]["payload"]["epsilon"]["rdp"] = 0.01
    # Even the server's own key cannot make a site's record say something else.
    write_records(path, reseal_from(records, index, run.keys["server"]))
    inner_seq = records[index]["payload"]["seq"]
    assert _first(_verify(run, "server")) == (
        f"{path}:{index + 1}: embedded site-0 record seq {inner_seq}: hash mismatch (record was modified)"
    )


def test_prv_epsilon_is_rederived(tmp_path: Path) -> None:
    from opacus.accountants import PRVAccountant

    key = Ed25519PrivateKey.generate()
    accountant = PRVAccountant()
    accountant.history = [(1.1, 0.25, 24)]
    prv = float(accountant.get_epsilon(delta=DELTA))
    path = tmp_path / "site-0.jsonl"

    def write(prv_value: float) -> None:
        path.unlink(missing_ok=True)
        with AuditLog(path, "site-0", "run-1", key) as log:
            rdp = 8.405205789654573  # Opacus RDP for q=0.25, σ=1.1, 24 steps, δ=1e-5
            log.append(
                "privacy",
                {
                    "site": "site-0",
                    "population": "train",
                    "mechanism": "dp_sgd",
                    "event": mechanism_json(0.25, 1.1, 24),
                    "delta": DELTA,
                    "epsilon": {"rdp": rdp, "prv": prv_value},
                    "budget": None,
                },
            )

    write(prv)
    result = verify_logs([path], {"site-0": key.public_key()})
    assert result.ok, result.problems
    write(prv * 0.8)
    said = _first(verify_logs([path], {"site-0": key.public_key()}))
    assert "PRV epsilon" in said and "site-0's training patients" in said, said


def test_without_keys_nothing_is_ok_and_only_what_was_checked_is_reported(pristine: Run) -> None:
    result = verify_logs(pristine.all_paths, None)
    assert not result.ok and not result.keys_checked
    # The copies are in the server's log: without keys only their signatures go unchecked, so no
    # "copy dropped" (nor a missing-key problem per log and party): the verdict says it once.
    assert result.problems == [], [str(p) for p in result.problems]
    assert len(result.rederived) == 12
    said = verdict(verification_json(result))
    assert (said.word, said.exit_code) == ("NOT VERIFIED", 1)
    assert said.why.startswith("signatures not checked: no keys given")


def test_without_keys_a_changed_record_still_fails(run: Run) -> None:
    path = run.paths["site-0"]
    lines = path.read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if '"dp_sgd"' in line)
    lines[index] = lines[index].replace('"noise_multiplier":1.1', '"noise_multiplier":1.5')
    path.write_text("\n".join(lines) + "\n")
    result = verify_logs(run.all_paths, None)
    said = verdict(verification_json(result))
    assert said.word == "FAILED" and "signatures not checked: no keys given" in said.why
    assert f"site-0.jsonl:{index + 1}: hash mismatch (record was modified)" in said.why
    assert str(path.parent) not in said.why  # the file's name, not the folder it was read from


def test_a_missing_key_is_named_once_and_its_copies_still_cross_checked(pristine: Run) -> None:
    keys = load_public_keys(pristine.keys_dir)
    del keys["site-0"]
    result = verify_logs(pristine.all_paths, keys)
    reasons = [p.reason for p in result.problems]
    assert all("no public key for party 'site-0'" in reason for reason in reasons), reasons
    assert len(reasons) == 2  # site-0's own log, and its copies in the server's log
    assert not [reason for reason in reasons if "copy dropped" in reason]


def test_malformed_privacy_record_is_reported(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    path = tmp_path / "a.jsonl"
    with AuditLog(path, "site-0", "run-1", key) as log:
        record = log.append("policy", {"budget": 1.0})
    records = read_records(path)
    records[0] = seal(
        {**{k: v for k, v in record.items() if k not in ("hash", "signature")}, "event": "privacy"}, key
    )
    write_records(path, reseal_from(records, 0, key))
    assert "privacy record unreadable" in _first(verify_logs([path], {"site-0": key.public_key()}))


def test_verify_main_output_and_exit_codes(run: Run, capsys: pytest.CaptureFixture[str]) -> None:
    assert verify_main(run.all_paths, run.keys_dir) == 0
    assert "VERIFIED: every log is complete and unmodified" in capsys.readouterr().out
    assert verify_main(run.all_paths, None) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "NOT VERIFIED: signatures not checked: no keys given" in out
    assert out.count("signatures not checked") == 1 and "copy dropped" not in out
    records = read_records(run.paths["site-1"])
    write_records(run.paths["site-1"], records[:-1])
    assert verify_main(run.all_paths, run.keys_dir) == 1
    out = capsys.readouterr().out
    assert "\nFAILED: 1 problem in the logs; the first: site-1.jsonl:" in out
    assert f"{run.paths['site-1']}:{len(records) - 1}: truncated: no head record" in out
    assert verify_main(run.all_paths, run.root / "nowhere") == 1
    assert "Cannot load keys" in capsys.readouterr().out


def test_missing_file_is_a_problem(pristine: Run, tmp_path: Path) -> None:
    result = verify_logs([tmp_path / "gone.jsonl"], load_public_keys(pristine.keys_dir))
    assert not result.ok and "cannot read" in str(result.problems[0])


def test_a_run_folder_instead_of_its_logs_names_the_logs_to_pass(pristine: Run, tmp_path: Path) -> None:
    """`audit verify runs/demo-…` (the folder a run prints) said only "cannot read: Is a directory"."""
    run = tmp_path / "run"
    (run / "audit").mkdir(parents=True)
    result = verify_logs([run], load_public_keys(pristine.keys_dir))
    assert not result.ok
    assert f"{run}: a folder, not a log: pass its logs, {run / 'audit'}/*.jsonl" in str(result.problems[0])


def test_json_lines_are_canonical(pristine: Run) -> None:
    line = pristine.paths["site-0"].read_text().splitlines()[0]
    assert line == json.dumps(json.loads(line), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def test_instruction_records_verify_and_are_shape_checked(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    path = tmp_path / "site-0.jsonl"
    with AuditLog(path, "site-0", "run-1", key) as log:
        log.append("instruction", instruction("train", 1), round=1)
        log.append("instruction", instruction("hypergrad", 1, "refused", "alpha_already_released"), round=1)
        log.append("instruction", {**instruction("evaluate", None, "error", "internal"), "detail": "boom"})
    keys = {"site-0": key.public_key()}
    assert verify_logs([path], keys).ok
    records = read_records(path)
    records[1]["payload"].update(outcome="ignored", digest="not-a-digest", round="1")
    write_records(path, reseal_from(records, 1, key))  # signed by the site itself: only the shape is wrong
    problem = _first(verify_logs([path], keys))
    assert problem.startswith(f"{path}:2: instruction record malformed: ")
    for part in ("outcome", "digest", "round"):
        assert part in problem


def test_append_refuses_a_malformed_instruction(tmp_path: Path) -> None:
    with AuditLog(tmp_path / "a.jsonl", "site-0", "run-1", Ed25519PrivateKey.generate()) as log:
        for broken in (
            {**instruction("train", 1), "outcome": "maybe"},
            {**instruction("train", 1), "digest": "ab" * 8},
            {k: v for k, v in instruction("train", 1).items() if k != "code"},
            {**instruction("train", 1), "round": True},
            instruction("train", 2),  # the payload's round must be the record's
        ):
            with pytest.raises(ValueError, match="instruction"):
                log.append("instruction", broken, round=1)


def _drop_privacy_of(run: Run, site: str, round_: int, parties: tuple[str, ...]) -> list[dict]:
    def chosen(record: dict) -> bool:
        return record["event"] == "privacy" and record["party"] == site and record["round"] == round_

    return [gone for party in parties for gone in remove_records(run.paths[party], run.keys[party], chosen)]


def test_participant_without_privacy_record_is_a_problem(run: Run) -> None:
    # site-0 trained in round 3 (the server lists it) but no log holds a privacy record of that
    # round: both chains re-signed by their own keys, so only the cross-check can see it.
    assert len(_drop_privacy_of(run, "site-0", 3, ("site-0", "server"))) == 4
    problems = [str(p) for p in _verify(run).problems]
    server = str(run.paths["server"])
    line = next(
        i
        for i, r in enumerate(read_records(run.paths["server"]), 1)
        if r["event"] == "secagg_round" and r["round"] == 3
    )
    assert problems == [
        f"{server}:{line}: round 3: site-0 took part, but no log holds a privacy record of site-0 for "
        "round 3 (DP is on in the run_config)"
    ]


def test_a_run_without_dp_needs_no_privacy_records(pristine_plain: Run) -> None:
    result = _verify(pristine_plain)
    assert result.ok, [str(p) for p in result.problems]
    assert result.warnings == []


def test_unsupplied_site_logs_are_named_not_passed_silently(
    pristine: Run, capsys: pytest.CaptureFixture[str]
) -> None:
    result = _verify(pristine, "server", "site-1")
    assert result.ok, [str(p) for p in result.problems]
    assert result.unsupplied == ["site-0"]
    assert result.warnings == [
        "site-0: log not supplied; its records were checked only as copied by the server"
    ]
    assert verify_main([pristine.paths["server"]], pristine.keys_dir) == 0
    out = capsys.readouterr().out
    for site in ("site-0", "site-1"):
        assert f"{site}: log not supplied; its records were checked only as copied by the server" in out


def test_a_missing_copy_of_a_retried_round_is_a_warning(run: Run) -> None:
    # Crash and resume: site-0 had answered round 3 (its log holds the records) but the server
    # never copied them; the retried round is answered without them. site-0's log shows the retry.
    gone = remove_records(
        run.paths["server"],
        run.keys["server"],
        lambda r: r["event"] == "privacy" and r["party"] == "site-0" and r["round"] == 3,
    )
    path = run.paths["site-0"]
    records = read_records(path)
    retry = next(i for i, r in enumerate(records) if r["event"] == "instruction" and r["round"] == 3)
    # the retry comes after the last record (times run forward in a log)
    records.insert(len(records) - 1, {**records[retry], "seq": len(records) - 1, "time": records[-2]["time"]})
    records[-1]["seq"] = len(records) - 1
    write_records(path, reseal_from(records, retry, run.keys["site-0"]))
    result = _verify(run)
    assert result.ok, [str(p) for p in result.problems]
    server = run.paths["server"]
    assert [w for w in result.warnings if "acted twice" in w] == [
        f"site-0 record seq {record['payload']['seq']} (privacy, round 3) has no copy in {server}, which "
        "lists site-0 as a participant of round 3; site-0 acted twice on an instruction of that round "
        "(retried after a restart?), so only site-0's own log shows this release"
        for record in gone
    ]
