"""Every sentence of the report is true for the run its logs record (issue 33 items 3, 4 and 8).

Each scenario writes the logs the parties of such a run write, with the real AuditLog API and the
record shapes of the real writers (run_config sections, `instruction`, `privacy` with Opacus ε,
`secagg_round`, `site_budget`, `run_aborted`, `run_end`, copies in the server's log): a non-DP run,
a DP run, a DP + CKKS run, an interrupted run (its logs simply stop), one interrupted by a signal
(signed `run_aborted`), a resumed run, a deployment whose site3 was killed mid-round, and a third run
on the same data (a lifetime ledger). `claims_hold` then reads the summary as a reader does and
checks every claim of encryption, evaluation, completion, interruption, dropout and ε against the
records. A real in-process DP + CKKS run is checked the same way in tests/e2e (its cost is a run).
"""

from __future__ import annotations

import html as htmllib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from secure_fed.audits.keys import load_public_keys, write_key_pair
from secure_fed.audits.log import AuditLog
from secure_fed.verifier.report import report_main, write_report
from secure_fed.verifier.verdict import population_words
from secure_fed.verifier.verify import EXIT_DROPOUT, EXIT_INTERRUPTED
from secure_fed.verifier.verify_console import verify_main

from .conftest import DELTA, instruction, mechanism_json, opacus_epsilon
from .tamper import read_records

SITES = ("site0", "site1", "site2")
RELEASED = "what left the site: protection"
Q, SIGMA, STEPS = 0.5, 1.2, 4
ALPHA_SIGMA = 2.0
BUDGET = 20.0


@dataclass
class Scenario:
    dp: bool = True
    he: bool = False
    rounds: int = 3
    stop_after: int | None = None  # every log stops after this round: no end, no head (Ctrl-C, kill)
    signal: str | None = None  # with stop_after: each party first signs run_aborted {"signal", "round"}
    site_signal: str | None = None  # with signal: what the sites' own run_aborted names (a deployment)
    resume: bool = False  # with stop_after: the run is resumed there and finishes
    drop: str | None = None  # this site dies in round 2's secure sum after its training reply
    drop_signal: str | None = None  # with drop: the dropped site's node was stopped and signed its stop
    lifetime_start: float | None = None  # ε earlier runs spent on the same data (a site ledger)
    sites: int = 3  # site0, site1, …
    decline: str | None = None  # this site declines the last round: it would exceed its budget


@dataclass
class Written:
    paths: list[Path]
    keys: Path


def _run_config(s: Scenario) -> dict[str, Any]:
    return {
        "seed": 0,
        "fed": {"method": "fedtar", "rounds": s.rounds},
        "dp": {"enabled": s.dp, "accountant": "rdp", "budget_epsilon": BUDGET if s.dp else None},
        "secagg": {"enabled": None},
        "he": {"enabled": s.he},
    }


def write_run(root: Path, s: Scenario) -> Written:
    names = tuple(f"site{index}" for index in range(s.sites))
    keys = {party: Ed25519PrivateKey.generate() for party in ("server", *names)}
    for party, key in keys.items():
        write_key_pair(root / "keys", party, key)
    paths = {party: root / "audit" / f"{party}.jsonl" for party in keys}
    run_id = "run-truth"
    logs = {party: AuditLog(paths[party], party, run_id, keys[party]) for party in keys}
    server = logs["server"]
    history: dict[str, list[tuple[float, float, int]]] = {site: [] for site in names}
    alpha_history: dict[str, list[tuple[float, float, int]]] = {site: [] for site in names}
    alive = list(names)
    mode = "secagg+" if s.dp else "plain"  # secagg.enabled = None: on exactly when DP is on

    def copy(record: dict[str, Any], site: str) -> None:
        server.copy_record(record, keys[site].public_key())

    def privacy(site: str, round_: int, mechanism: str, population: str, events: list[Any]) -> None:
        payload = {
            "site": site,
            "population": population,
            "mechanism": mechanism,
            "event": mechanism_json(*events[-1]),
            "delta": DELTA,
            "epsilon": {"rdp": opacus_epsilon(events), "prv": None},
            "budget": BUDGET,
        }
        if mechanism == "dp_sgd":
            payload |= {"clip_norm": 1.0, "population_bucket": "32-63", "steps": STEPS}
        else:
            payload |= {"population_bucket": "8-15"}
        copy(logs[site].append("privacy", payload, round=round_), site)

    def start(resumed: bool) -> None:
        server.append("run_config", _run_config(s))
        for site in alive:
            logs[site].append("instruction", instruction("hello", None))
            if s.lifetime_start is not None and not resumed:
                logs[site].append("site_budget", _budget(site, run_id, s.lifetime_start))

    def train(round_: int) -> None:
        declined = [s.decline] if s.decline in alive and round_ == s.rounds else []
        for site in declined:
            refusal = {
                "site": site,
                "population": "train",
                "epsilon_after": BUDGET + 1.0,
                "budget": BUDGET,
                "reason": "the round would exceed the site's privacy budget",
            }
            copy(logs[site].append("budget_refusal", refusal, round=round_), site)
        for site in [site for site in alive if site not in declined]:
            logs[site].append("instruction", instruction("train", round_), round=round_)
            if s.dp:
                history[site].append((Q, SIGMA, STEPS))
                privacy(site, round_, "dp_sgd", "train", history[site])
                alpha_history[site].append((1.0, ALPHA_SIGMA, 1))
                privacy(site, round_, "alpha_scalars", "validation", alpha_history[site])
        dropped = [s.drop] if s.drop in alive and round_ == 2 else []
        server.append(
            "secagg_round",
            {
                "round": round_,
                "mode": mode,
                "participants": [site for site in alive if site not in declined],
                "survivors": [site for site in alive if site not in dropped + declined],
                "dropped": dropped,
            },
            round=round_,
        )
        for site in dropped:
            alive.remove(site)
            if s.drop_signal is not None:
                logs[site].append("run_aborted", {"signal": s.drop_signal, "round": round_}, round=round_)
            logs[site].abandon()  # killed: its log stops here, no head record
        server.append("alpha", {"alpha": [0.5, 0.3, 0.2]}, round=round_)

    start(False)
    first = 1
    if s.stop_after is not None:
        for round_ in range(1, s.stop_after + 1):
            train(round_)
        if s.signal is not None:
            for party, log in logs.items():
                said = s.signal if party == "server" or s.site_signal is None else s.site_signal
                log.append("run_aborted", {"signal": said, "round": s.stop_after}, round=s.stop_after)
        if not s.resume:
            for log in logs.values():
                log.abandon()
            return Written([paths["server"], *(paths[site] for site in names)], root / "keys")
        for party in logs:  # a new process continues each log's chain (AuditLog reopens it)
            logs[party].abandon()
            logs[party] = AuditLog(paths[party], party, run_id, keys[party])
        server = logs["server"]
        start(True)
        first = s.stop_after + 1
    for round_ in range(first, s.rounds + 1):
        train(round_)
    for site in alive:
        logs[site].append("instruction", instruction("evaluate", None))
        if s.lifetime_start is not None:
            run = opacus_epsilon(history[site])
            logs[site].append("site_budget", _budget(site, run_id, s.lifetime_start, run))
        logs[site].append("instruction", instruction("finish", None))
        logs[site].append("run_end", {"stopped_early": None})
        logs[site].close()
    server.append("model_hash", {"sha256": "ab" * 32})
    server.close()
    return Written([paths["server"], *(paths[site] for site in names)], root / "keys")


def _budget(site: str, run_id: str, start: float, run: float | None = None) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "site": site,
        "dataset": "d" * 16,
        "run_id": run_id,
        "lifetime_start": {"train": {"rdp": start, "prv": None}},
        "delta": {"train": DELTA, "validation": DELTA},
        "budget": BUDGET,
    }
    if run is not None:
        # what a ledger composing both would log: more than either part (a stand-in figure)
        payload |= {"run": {"train": {"rdp": run}}, "lifetime": {"train": {"rdp": start + run * 0.9}}}
    return payload


# -- the reader's check --------------------------------------------------------------------------
def summary_text(page: str) -> str:
    block = re.search(r'<div class="summary" id="summary">(.*?)</div>', page, re.DOTALL)
    assert block, "no summary"
    return htmllib.unescape(re.sub(r"<[^>]+>", "", block.group(1)))


def site_table(page: str) -> list[dict[str, str]]:
    """The summary's table as a reader sees it: one {column: cell text} per site."""
    table = re.search(r"<table id='sites'>(.*?)</table>", page, re.DOTALL)
    assert table, "no site table"
    rows = re.findall(r"<tr>(.*?)</tr>", table.group(1), re.DOTALL)
    cells = [
        [htmllib.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", r)]
        for r in rows
    ]
    return [dict(zip(cells[0], row, strict=True)) for row in cells[1:]]


def _all_records(paths: list[Path]) -> list[dict[str, Any]]:
    out = []
    for path in paths:
        for record in read_records(path) if path.exists() else []:
            out.append(record)
            if record["event"] == "site_record":
                out.append(record["payload"])
    return out


def _g3(value: float) -> str:
    return f"{value:.3g}"


def claims_hold(page: str, paths: list[Path]) -> str:
    """Every claim of the summary that a record must back is backed; returns the summary text."""
    text = summary_text(page)
    records = _all_records(paths)
    events = {r["event"] for r in records}
    he_on = any(
        r["payload"].get("he", {}).get("enabled") is True for r in records if r["event"] == "run_config"
    )
    he_off = any(
        r["payload"].get("he", {}).get("enabled") is False for r in records if r["event"] == "run_config"
    )
    # encryption
    if re.search(r"CKKS|under encryption|encrypted", text + page):
        assert he_on, "the report claims encryption, the run_config says he is off"
    if he_off:
        assert "CKKS" not in page and "under encryption" not in page
    # evaluation: each site whose row lists test-set scores as released logged the scoring
    table = site_table(page) if "<table id='sites'>" in page else []
    for row in table:
        if "test-set scores: not covered by ε" in row["what left the site: protection"]:
            assert any(
                r["event"] == "instruction"
                and r["party"] == row["site"]
                and r["payload"]["phase"] == "evaluate"
                and r["payload"]["outcome"] == "acted"
                for r in records
            ), f"{row['site']}: scores claimed, no scoring logged"
    if not any(r["event"] == "instruction" and r["payload"]["phase"] == "evaluate" for r in records):
        assert "released once at the end" not in text
    # completion
    own_logs = [read_records(path) for path in paths if path.exists()]
    unfinished = [log for log in own_logs if log and log[-1]["event"] != "head"]
    if "the run finished" in text:
        assert "model_hash" in events, "finished, but no model hash logged"
        last_aborts = [log for log in own_logs if log and log[-1]["event"] == "run_aborted"]
        assert not last_aborts
    if "run_aborted" not in events and not unfinished:
        assert not re.search(r"interrupted|aborted|stops", text), "an interruption nothing records"
    if re.search(r"interrupted|aborted|stops", text):
        assert "run_aborted" in events or unfinished
    # dropout
    for site, round_ in re.findall(r"(\w+) dropped out in round (\d+)", text):
        assert any(
            r["party"] == "server"
            and r["event"] in ("secagg_round", "round_skipped")
            and r["round"] == int(round_)
            and site in r["payload"].get("dropped", [])
            for r in records
        ), f"{site} said dropped in round {round_}: no server record says so"
    # ε: every figure stated is a logged one (a privacy record's or a ledger's), never made up
    logged = {_g3(r["payload"]["epsilon"]["rdp"]) for r in records if r["event"] == "privacy"}
    for r in records:
        if r["event"] == "site_budget":
            for key in ("lifetime_start", "lifetime", "run"):
                for value in (r["payload"].get(key) or {}).values():
                    logged.add(_g3(value["rdp"]))
    logged.add("0")
    budgets = {_g3(r["payload"]["budget"]) for r in records if r["event"] in ("privacy", "site_budget")}
    for figure in re.findall(r"ε = ([0-9]+(?:\.[0-9]+)?)", text):
        assert _g3(float(figure)) in logged | budgets, f"ε = {figure} is in no record"
    for row in table:
        for column in ("ε this run", "ε all runs", "budget ε"):
            figure = re.match(r"[0-9]+(?:\.[0-9]+)?", row.get(column, ""))
            if figure:
                assert _g3(float(figure.group())) in logged | budgets, f"{row['site']}: {column} {figure}"
    if not any(r["event"] == "privacy" for r in records):
        assert "re-derived with dp_accounting" not in page
        assert all(row["ε this run"] in ("∞ (no DP)", "—") for row in table)
    return text


# -- scenarios ------------------------------------------------------------------------------------
def _report(root: Path, s: Scenario) -> tuple[str, dict[str, Any], Written]:
    written = write_run(root, s)
    page, json_path, _ = write_report(written.paths, root / "report.html", load_public_keys(written.keys))
    return page.read_text(encoding="utf-8"), json.loads(json_path.read_text()), written


def test_non_dp_run(tmp_path: Path) -> None:
    page, data, written = _report(tmp_path, Scenario(dp=False))
    text = claims_hold(page, written.paths)
    assert data["verification"]["ok"] and "no privacy record in them, so no ε to re-derive" in page
    assert "plain values" in text and "the run finished" in text
    assert [row["ε this run"] for row in site_table(page)] == ["∞ (no DP)"] * 3


def test_dp_run(tmp_path: Path) -> None:
    page, data, written = _report(tmp_path, Scenario(dp=True))
    text = claims_hold(page, written.paths)
    assert (
        data["verification"]["ok"] and "18 privacy records re-derived with dp_accounting and matching" in page
    )
    assert "test-set scores (every site)" in text and "the run finished" in text
    # he off: the α scalars' words say plain values, in the summary and in the mechanism table
    words = re.search(r"<ul id='mechanism-words'>(.*?)</ul>", page, re.DOTALL)
    assert words and "plain values" in words.group(1) and "encryption (" not in words.group(1)
    # no ledger logged: this run's ε is the bound, beside the budget it was held to
    for row, g in zip(site_table(page), data["guarantees"], strict=True):
        whose = population_words(g["population"])
        assert row["ε this run"] == f"{g['epsilon']:.3g} ({whose})" and row["budget ε"] == f"{BUDGET:g}"
        assert "ε all runs" not in row and "test-set scores: not covered by ε" in row[RELEASED]


def test_dp_ckks_run(tmp_path: Path) -> None:
    page, data, written = _report(tmp_path, Scenario(dp=True, he=True))
    text = claims_hold(page, written.paths)
    assert "summed under CKKS encryption" in text
    words = re.search(r"<ul id='mechanism-words'>(.*?)</ul>", page, re.DOTALL)
    assert words and "under CKKS encryption" in words.group(1)


def test_interrupted_run(tmp_path: Path) -> None:
    page, data, written = _report(tmp_path, Scenario(stop_after=1))
    text = claims_hold(page, written.paths)
    assert "The logs of server, site0, site1, site2 stop after round 1 with no end record" in text
    assert "the run finished" not in text and "test-set scores: none released" in text
    assert not data["verification"]["ok"]  # a log cut short that no server record explains


def test_run_interrupted_by_a_signal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page, data, written = _report(tmp_path, Scenario(stop_after=1, signal="SIGINT"))
    text = claims_hold(page, written.paths)
    assert "The run was interrupted by SIGINT in round 1 and did not finish" in text
    assert "test-set scores: none released" in text and "the run finished" not in text
    # each log ends with its own party's signed run_aborted naming the signal: an interruption, its
    # own verdict and exit code, not "truncated" (it read as tampering: "cannot be relied on")
    verdict = data["verification"]
    assert verdict["ok"] and not verdict["complete"], verdict["problems"]
    assert sorted((i["party"], i["signal"], i["round"]) for i in verdict["interruptions"]) == [
        (party, "SIGINT", 1) for party in ("server", *SITES)
    ]
    assert page.startswith("<!DOCTYPE html>") and "<h1 id='title'>INCOMPLETE — " in page
    assert "Every finding below is unverified" not in text
    assert verify_main(written.paths, written.keys) == EXIT_INTERRUPTED
    out = " ".join(capsys.readouterr().out.split())
    assert "INCOMPLETE: the run was interrupted (SIGINT in round 1: server, site0, site1, site2)" in out
    assert report_main(written.paths, tmp_path / "r2.html", written.keys) == EXIT_INTERRUPTED


def test_deployment_stopped_by_flwr_stop(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A deployment stopped with `flwr stop`: the ServerApp signs "flwr stop", each site's runner
    signs its own stop (SIGTERM from its node's service manager): an interruption, not tampering."""
    written = write_run(tmp_path, Scenario(stop_after=1, signal="flwr stop", site_signal="SIGTERM"))
    assert verify_main(written.paths, written.keys) == EXIT_INTERRUPTED
    out = " ".join(capsys.readouterr().out.split())
    assert "INCOMPLETE: the run was interrupted" in out and "interrupted by flwr stop in round 1" in out
    for site in SITES:
        assert f"{site}'s log ends with its signed run_aborted: the run was interrupted by SIGTERM" in out


def test_a_dropped_site_that_signed_its_stop_is_a_dropout(tmp_path: Path) -> None:
    """A site whose node was stopped mid-run (SIGTERM: its runner signs run_aborted) while the run
    went on without it: the server's signed log says it left in that round, so it is a dropout
    (exit 3), not a log cut after the run went on."""
    page, data, written = _report(tmp_path, Scenario(drop="site2", drop_signal="SIGTERM"))
    assert [(d["site"], d["round"]) for d in data["verification"]["dropouts"]] == [("site2", 2)]
    assert verify_main(written.paths, written.keys) == EXIT_DROPOUT
    # the site's own stop ended its part, not the run: the report must not say the run was interrupted
    text = summary_text(page)
    assert "site2 dropped out in round 2" in text and "the run finished" in text
    assert "interrupted" not in text and "did not finish" not in text


def test_a_resumed_log_cut_back_to_its_run_aborted_is_not_an_interruption(tmp_path: Path) -> None:
    """Attack: hide the rounds a site ran after a resume by cutting its log back to its signed
    run_aborted. The server's log went on and closed, so the site's log cannot end in an interruption."""
    from secure_fed.verifier.verify import verify_logs

    written = write_run(tmp_path, Scenario(stop_after=1, signal="SIGINT", resume=True))
    site0 = written.paths[1]
    lines = site0.read_text().splitlines(keepends=True)
    cut = max(i for i, line in enumerate(lines) if '"event":"run_aborted"' in line)
    site0.write_text("".join(lines[: cut + 1]))
    result = verify_logs(written.paths, load_public_keys(written.keys))
    assert not result.ok and not result.interruptions
    assert any(problem.path == str(site0) and "truncated" in str(problem) for problem in result.problems)


def test_resumed_run(tmp_path: Path) -> None:
    page, data, written = _report(tmp_path, Scenario(stop_after=1, signal="SIGINT", resume=True))
    text = claims_hold(page, written.paths)
    assert data["verification"]["ok"], data["verification"]["problems"]
    assert "interrupted by SIGINT in round 1 and resumed" in text and "did not finish" not in text
    assert "the run finished" in text and "test-set scores (every site)" in text
    assert "rounds 1, 2, 3 of 3 planned" in text


def test_deployment_with_a_dropped_site(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page, data, written = _report(tmp_path, Scenario(drop="site2"))
    text = claims_hold(page, written.paths)
    verdict = data["verification"]
    assert verdict["ok"] and not verdict["complete"]
    assert [(d["site"], d["round"]) for d in verdict["dropouts"]] == [("site2", 2)]
    assert "site2 dropped out in round 2" in text and "unverified" not in text
    assert "test-set scores (2 of 3 sites)" in text and "site2 released no test-set scores" in text
    assert "<h1 id='title'>VERIFIED WITH A DROPOUT — " in page
    assert [row["rounds taken part in"] for row in site_table(page)] == ["1–3", "1–3", "1–2 (left in 2)"]
    # its own exit code, distinct from tampering (1) and from a complete run (0)
    assert verify_main(written.paths, written.keys) == EXIT_DROPOUT
    out = capsys.readouterr().out
    assert "site2 dropped out in round 2" in out and "no head record" in out
    assert report_main(written.paths, tmp_path / "r2.html", written.keys) == EXIT_DROPOUT


def test_a_cut_log_is_not_a_dropout(tmp_path: Path) -> None:
    """A site the server never said left, whose log is cut: tampering or loss, exit 1."""
    written = write_run(tmp_path, Scenario())
    site = written.paths[1]
    lines = site.read_text().splitlines(keepends=True)
    site.write_text("".join(lines[:6]))
    assert verify_main(written.paths, written.keys) == 1


def test_a_dropped_sites_log_that_goes_on_is_not_a_dropout(tmp_path: Path) -> None:
    """The server says site2 left in round 2, but its cut log holds round 3: not a dropout."""
    written = write_run(tmp_path, Scenario())
    server = written.paths[0]
    records = read_records(server)
    from .tamper import reseal_from, write_records

    index = next(i for i, r in enumerate(records) if r["event"] == "secagg_round" and r["round"] == 2)
    records[index]["payload"]["dropped"] = ["site2"]
    key = _private(written.keys, "server")
    write_records(server, reseal_from(records, index, key))
    site2 = written.paths[3]
    lines = site2.read_text().splitlines(keepends=True)
    keep = next(i for i, line in enumerate(lines) if '"evaluate"' in line)
    site2.write_text("".join(lines[:keep]))  # holds round 3, no end: cut after the run went on
    assert verify_main(written.paths, written.keys) == 1


def _private(keys: Path, party: str) -> Ed25519PrivateKey:
    from secure_fed.audits.keys import load_private_key

    return load_private_key(keys, party)


def test_third_run_on_the_same_data(tmp_path: Path) -> None:
    page, data, written = _report(tmp_path, Scenario(lifetime_start=7.63))
    text = claims_hold(page, written.paths)
    guarantee = {g["site"]: g for g in data["guarantees"]}["site0"]
    run = opacus_epsilon([(Q, SIGMA, STEPS)] * 3)
    assert guarantee["lifetime"] == pytest.approx(7.63 + run * 0.9)
    # the lifetime ε against the lifetime budget, this run's share beside it
    row = site_table(page)[0]
    whose, all_runs = (
        population_words(guarantee["population"]),
        population_words(guarantee["lifetime_population"]),
    )
    assert row["site"] == "site0" and row["ε all runs"] == f"{guarantee['lifetime']:.3g} ({all_runs})"
    assert row["ε this run"] == f"{guarantee['epsilon']:.3g} ({whose})" and row["δ"] == f"{DELTA:g}"
    assert row["budget ε"] == f"{BUDGET:g} (all runs)"
    assert "ε all runs counts every run on the same patients' data" in text
    # the plot starts where the earlier runs left the patients
    plot = re.search(r"id='plot'>(.*?)</div>", page, re.DOTALL)
    assert plot and "all runs on this data (ledger)" in plot.group(1)


def test_a_lifetime_over_budget_is_exceeded(tmp_path: Path) -> None:
    page, data, written = _report(tmp_path, Scenario(lifetime_start=16.0))
    text = claims_hold(page, written.paths)
    assert "Privacy budget EXCEEDED at site0, site1, site2" in text
    assert all(row["budget ε"] == "20 (all runs) EXCEEDED" for row in site_table(page))
    assert "exceeded its privacy budget" not in text  # the no-exceptions line is not said


def test_wrong_keys_still_count_the_privacy_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    written = write_run(tmp_path / "a", Scenario())
    other = write_run(tmp_path / "b", Scenario())
    assert verify_main(written.paths, other.keys) == 1
    table = capsys.readouterr().out
    # 3 sites × 3 rounds × 2 releases, each in its site's log and copied into the server's
    assert re.search(r"server\s*│\s*\d+\s*│\s*18\s*│", table), table


def test_a_skipped_round_names_who_declined(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    path = tmp_path / "server.jsonl"
    with AuditLog(path, "server", "run-x", key) as log:
        log.append(
            "round_skipped",
            {"reason": "too few survivors", "dropped": [], "declined": {"site1": "charged before a restart"}},
            round=2,
        )
    page, _, _ = write_report([path], tmp_path / "r.html", {"server": key.public_key()})
    text = summary_text(page.read_text(encoding="utf-8"))
    assert "round 2 (sites gone: none; declined: site1 (charged before a restart))" in text


def test_a_skipped_round_in_the_verdict_names_who_was_gone() -> None:
    """A run that lost a site mid-round and finished its other rounds on the rest (the deployment
    drill): INCOMPLETE as `secure-fed run`'s exit 3 says, and the verdict names who was gone."""
    from secure_fed.verifier.report_data import run_facts
    from secure_fed.verifier.report_types import ReportData
    from secure_fed.verifier.verdict import verdict

    data = ReportData(
        planned_rounds=2,
        rounds_done=[2],
        skipped_rounds=[{"round": 1, "reason": "site left", "dropped": ["site3"], "declined": {}}],
    )
    facts = run_facts(data)
    assert facts["skipped_rounds"] == [1] and facts["skipped_gone"] == {"1": ["site3"]}
    said = verdict({"ok": True, "keys_checked": True, "rederived": 15}, facts)
    assert said.word == "INCOMPLETE" and said.exit_code == EXIT_INTERRUPTED, said
    assert said.why.startswith("1 of 2 planned rounds completed (round 1 skipped, site3 gone);"), said.why
