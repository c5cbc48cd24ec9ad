from __future__ import annotations

import csv
import html as htmllib
import json
import re
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from secure_fed.audits.keys import load_public_keys
from secure_fed.audits.log import AuditLog
from secure_fed.verifier.report import mechanisms_csv_path, report_main, write_report

from .conftest import BUDGETS, DELTA, Run, mechanism_json, opacus_epsilon
from .tamper import read_records, remove_records, write_records


def _report(run: Run, tmp_path: Path, paths: list[Path] | None = None, keys: bool = True):
    html_path, json_path, csv_path = write_report(
        paths or run.all_paths,
        tmp_path / "out" / "report.html",
        load_public_keys(run.keys_dir) if keys else None,
    )
    mechanisms = mechanisms_csv_path(html_path)
    return html_path.read_text(), json.loads(json_path.read_text()), list(csv.DictReader(mechanisms.open()))


def _sites(html: str) -> dict[str, dict[str, str]]:
    """The summary's site table as a reader sees it, by site."""
    from .test_report_truth import site_table

    return {row["site"]: row for row in site_table(html)}


def test_report_figures(pristine: Run, tmp_path: Path) -> None:
    html, data, rows = _report(pristine, tmp_path)
    assert data["verification"]["ok"] is True and data["verification"]["problems"] == []
    guarantees = {g["site"]: g for g in data["guarantees"]}
    # site-0 took all 3 rounds: its train patients saw the GMM release and 24 DP-SGD steps.
    site0 = opacus_epsilon([(1.0, 5.0, 1), (0.25, 1.1, 8), (0.25, 1.1, 8), (0.25, 1.1, 8)])
    assert guarantees["site-0"]["epsilon"] == pytest.approx(site0)
    assert guarantees["site-0"]["delta"] == DELTA and guarantees["site-0"]["budget"] == BUDGETS["site-0"]
    assert guarantees["site-1"]["epsilon"] == pytest.approx(
        opacus_epsilon([(1.0, 5.0, 1), (0.25, 1.1, 8), (0.25, 1.1, 8)])
    )
    assert not any(g["exceeded"] for g in data["guarantees"])
    assert [(r["site"], r["round"]) for r in data["refusals"]] == [("site-1", 3)]
    assert [s["dropped"] for s in data["secagg_rounds"]] == [[], [], ["site-1"]]
    # Copies in the server's log are not counted twice.
    assert len(rows) == len(data["mechanisms"]) == 12
    dp_sgd = [r for r in rows if r["mechanism"] == "dp_sgd"]
    assert {(r["sampling_rate"], r["noise_multiplier"], r["steps"], r["clip_norm"]) for r in dp_sgd} == {
        ("0.25", "1.1", "8", "1.0")
    }
    assert all(r["matches"] == "True" for r in rows)
    sites = _sites(html)
    # each ε names whose it is: the population with the largest (training patients here)
    assert (sites["site-0"]["ε this run"], sites["site-0"]["δ"], sites["site-0"]["budget ε"]) == (
        "8.47 (training patients)",
        "1e-05",
        "10",
    )
    assert sites["site-1"]["refusals"] == "declined round 3"
    assert "site-1 declined round 3: the round would exceed the site's privacy budget." in _summary_text(html)
    assert "EXCEEDED" not in html
    assert "<svg" in html and "<h1 id='title'>VERIFIED — every site within budget: max ε " in html


def test_report_is_self_contained(pristine: Run, tmp_path: Path) -> None:
    html, _, _ = _report(pristine, tmp_path)
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:|//)""", html, re.IGNORECASE)
    assert not re.search(
        r"<(?:script|link|iframe|object)\b|@import|url\(\s*['\"]?https?:", html, re.IGNORECASE
    )
    assert "<!DOCTYPE svg" not in html


def test_report_from_the_server_log_alone(pristine: Run, tmp_path: Path) -> None:
    _, data, rows = _report(pristine, tmp_path, [pristine.paths["server"]])
    assert data["verification"]["ok"] and len(rows) == 12


def test_report_shows_failed_verification(run: Run, tmp_path: Path) -> None:
    records = read_records(run.paths["site-0"])
    write_records(run.paths["site-0"], records[:-1])
    html, data, _ = _report(run, tmp_path)
    assert data["verification"]["ok"] is False and data["verdict"]["word"] == "FAILED"
    # the failure leads: the title, the first line, then every finding of the summary marked
    assert "<title>FAILED — " in html and "<h1 id='title'>FAILED — privacy compliance report</h1>" in html
    first = re.search(r"<p class='verdict bad' id='verdict'>(.*?)</p>", html)
    assert first and f"site-0.jsonl:{len(records) - 1}: truncated: no head record" in first.group(1)
    assert _summary_text(html).startswith("Every finding below is unverified")
    block = re.search(r'<div class="summary" id="summary">(.*?)</div>', html, re.DOTALL)
    assert block
    findings = re.findall(r"<(?:p|li|caption)(?: id='(\w+)')?[^>]*>(.*?)</(?:p|li|caption)>", block.group(1))
    for key, finding in findings:
        if key not in ("unverified", "words"):
            assert finding.startswith("<b class='unv'>Unverified:</b>"), finding
    _, unsigned, _ = _report(run, tmp_path, keys=False)
    assert unsigned["verification"]["keys_checked"] is False and not unsigned["verification"]["ok"]


def test_exceeded_budget_is_said_plainly(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    path = tmp_path / "site-9.jsonl"
    with AuditLog(path, "site-9", "run-x", key) as log:
        log.append(
            "privacy",
            {
                "site": "site-9",
                "population": "train",
                "mechanism": "dp_sgd",
                "event": mechanism_json(0.25, 1.1, 8),
                "delta": DELTA,
                "epsilon": {"rdp": opacus_epsilon([(0.25, 1.1, 8)]), "prv": None},
                "budget": 2.0,
            },
            round=1,
        )
    html_path, json_path, _ = write_report([path], tmp_path / "r.html", {"site-9": key.public_key()})
    data = json.loads(json_path.read_text())
    assert data["guarantees"][0]["exceeded"] is True
    assert "Privacy budget EXCEEDED at site-9" in _summary_text(html_path.read_text())
    assert _sites(html_path.read_text())["site-9"]["budget ε"] == "2 EXCEEDED"


def test_report_main(pristine: Run, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r" / "report.html"
    assert report_main(pristine.all_paths, out, pristine.keys_dir) == 0
    assert out.exists() and out.with_suffix(".json").exists() and out.with_suffix(".csv").exists()
    assert "VERIFIED: every log is complete" in capsys.readouterr().out
    assert report_main(pristine.all_paths, out, None) == 1
    said = " ".join(capsys.readouterr().out.split())
    assert "NOT VERIFIED: signatures not checked: no keys given" in said
    assert said.count("signatures not checked") == 1
    assert "<h1 id='title'>NOT VERIFIED — " in out.read_text()


def _summary_text(html: str) -> str:
    """The plain-language summary as a reader sees it (tags dropped, entities decoded)."""
    block = re.search(r'<div class="summary" id="summary">(.*?)</div>', html, re.DOTALL)
    assert block, "no summary block"
    return htmllib.unescape(re.sub(r"<[^>]+>", "", block.group(1)))


def _first_sentence(html: str) -> str:
    """The summary's headline: what was released and whether differential privacy covered it."""
    block = re.search(r"<p id='headline'>(.*?)</p>", html, re.DOTALL)
    assert block, "no headline"
    text = htmllib.unescape(re.sub(r"<[^>]+>", "", block.group(1))) + " "
    return text[: text.index(". ") + 1]


def test_run_without_dp_says_so_first_and_claims_no_protection(pristine_plain: Run, tmp_path: Path) -> None:
    html, data, rows = _report(pristine_plain, tmp_path)
    assert data["verification"]["ok"], data["verification"]["problems"]
    first = _first_sentence(html)
    assert first.startswith("Patient data was released without differential privacy (ε = ∞)"), first
    # Per site, what left it, taken from the run's configuration and the server's round records.
    sites = {site["site"]: site for site in data["sites"]}
    assert set(sites) == {"site-0", "site-1"}
    for site in sites.values():
        assert site["dp"] is False and site["rounds"] == [1, 2]
        releases = {release["what"]: release for release in site["releases"]}
        assert set(releases) == {"model updates", "α scalars", "losses", "test-set scores"}
        assert "in the clear" in releases["losses"]["how"]
        assert (
            "plain" in releases["model updates"]["how"] and "SecAgg+" not in releases["model updates"]["how"]
        )
        assert "plain" in releases["α scalars"]["how"] and "CKKS" not in releases["α scalars"]["how"]
        assert "corpus-level" in releases["test-set scores"]["how"]
        assert not any(release["covered"] for release in site["releases"])
    listed = re.search(r"<ul id='releases'>(.*?)</ul>", html, re.DOTALL)
    assert listed and "model updates</b> (every site)" in listed.group(1)
    assert "test-set scores</b> (every site)" in listed.group(1)
    table = _sites(html)
    assert set(table) == {"site-0", "site-1"} and all(
        row["ε this run"] == "∞ (no DP)" for row in table.values()
    )
    assert "budget ε" not in next(iter(table.values()))  # no budget column where no site has DP
    # No guarantee, budget line or plot for a site without DP, and no word of noise anywhere.
    assert data["guarantees"] == [] and rows == []
    lowered = html.lower()
    assert "blurred" not in lowered and "noise" not in lowered
    assert "within its budget" not in html and "exceeded its privacy budget" not in html
    assert "<svg" not in html and "budget ε" not in html


def test_dp_run_still_reads_as_before_and_names_uncovered_releases(pristine: Run, tmp_path: Path) -> None:
    html, data, _ = _report(pristine, tmp_path)
    first = _first_sentence(html)
    assert first.startswith("In run run-2024-test"), first
    text = _summary_text(html)
    assert "every release of training data is covered by differential privacy" in text
    assert "adds random noise" in text  # DP-SGD in plain words, once
    assert "without differential privacy" not in text
    # The test-set scores are never DP: said plainly, and not folded into ε.
    assert "test-set scores" in text and "not covered by ε" in text
    for site in data["sites"]:
        assert site["dp"] is True
        covered = {release["what"]: release["covered"] for release in site["releases"]}
        assert covered == {"model updates": True, "α scalars": True, "test-set scores": False}
        assert "SecAgg+" in next(r["how"] for r in site["releases"] if r["what"] == "model updates")
    assert [site["rounds"] for site in data["sites"]] == [[1, 2, 3], [1, 2]]


def test_participant_without_privacy_record_gets_no_bound(run: Run, tmp_path: Path) -> None:
    # site-0 trained in round 3 (the server lists it) but no log holds a privacy record of that
    # round: its last releases, taken out of its log and of the server's copies, both re-signed.
    for party in ("site-0", "server"):
        remove_records(
            run.paths[party],
            run.keys[party],
            lambda r: r["party"] == "site-0" and r["round"] == 3 and r["event"] == "privacy",
        )
    html, data, _ = _report(run, tmp_path)
    # DP is on, so a participant without a privacy record is also a verification problem: it leads
    assert data["verdict"]["word"] == "FAILED" and "site-0 took part" in data["verdict"]["why"]
    first = _first_sentence(html)
    assert first.startswith(
        "Unverified: Patient data of site-0 was released without differential privacy (ε = ∞)"
    ), first
    sites = {site["site"]: site for site in data["sites"]}
    assert sites["site-0"]["dp"] is False and sites["site-0"]["uncovered_rounds"] == [3]
    assert sites["site-1"]["dp"] is True and sites["site-1"]["uncovered_rounds"] == []
    text = _summary_text(html)
    table = _sites(html)
    assert (
        table["site-1"]["ε this run"] not in ("∞ (no DP)", "—")
        and table["site-0"]["ε this run"] == "∞ (no DP)"
    )
    assert table["site-0"]["budget ε"] == "—"  # site-0's budget: not shown as kept
    assert "site-0 took part in round 3, but no privacy record covers that round" in text
    # Only site-1 gets a panel in the ε plot (matplotlib names each panel axes_N).
    plot = re.search(r"<div class='plot' id='plot'>(.*?)</div>", html, re.DOTALL)
    assert plot and len(re.findall(r'<g id="axes_\d+"', plot.group(1))) == 1


def test_refused_server_instructions_are_counted(pristine_plain: Run, tmp_path: Path) -> None:
    html, data, _ = _report(pristine_plain, tmp_path)
    text = _summary_text(html)
    assert "site-0 refused 3 server instructions: policy ×2, evaluate_repeated." in text
    assert "site-1 refused" not in text
    counts = {site["site"]: site["refused_instructions"] for site in data["sites"]}
    assert counts == {"site-0": {"policy": 2, "evaluate_repeated": 1}, "site-1": {}}


def test_report_from_the_server_log_alone_says_which_logs_were_missing(pristine: Run, tmp_path: Path) -> None:
    html, data, _ = _report(pristine, tmp_path, [pristine.paths["server"]])
    warning = "site-0: log not supplied; its records were checked only as copied by the server"
    assert warning in data["verification"]["warnings"]
    assert warning in htmllib.unescape(html)
    assert "Which server instructions site-0, site-1 refused is not known" in _summary_text(html)


def test_logs_naming_no_site_claim_no_protection(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    path = tmp_path / "server.jsonl"
    with AuditLog(path, "server", "run-x", key) as log:
        log.append("run_config", {"dp": {"enabled": True}})
    html_path, _, _ = write_report([path], tmp_path / "r.html", {"server": key.public_key()})
    text = _summary_text(html_path.read_text())
    assert "no release of patient data, and no protection of one either" in text
    assert "blurred" not in text and "budget" not in text


@pytest.mark.parametrize("modes", [("secagg+", "secagg+"), ("secagg+", "plain")])
def test_releases_follow_the_logged_sums(tmp_path: Path, modes: tuple[str, str]) -> None:
    key = Ed25519PrivateKey.generate()
    path = tmp_path / "server.jsonl"
    with AuditLog(path, "server", "run-x", key) as log:
        log.append(
            "run_config", {"dp": {"enabled": False}, "secagg": {"enabled": True}, "he": {"enabled": True}}
        )
        for round_, mode in enumerate(modes, start=1):
            log.append(
                "secagg_round", {"round": round_, "mode": mode, "participants": ["a"], "dropped": []}, round_
            )
            log.append("alpha", {"alpha": [0.5, 0.5]}, round_)
    _, json_path, _ = write_report([path], tmp_path / "r.html", {"server": key.public_key()})
    (site,) = json.loads(json_path.read_text())["sites"]
    how = {release["what"]: release["how"] for release in site["releases"]}
    assert site["rounds"] == [1, 2] and site["dp"] is False
    assert how["α scalars"].startswith("summed under CKKS encryption")
    # One round summed in the clear is enough to lose SecAgg+'s protection for that site.
    expected = "summed with SecAgg+" if "plain" not in modes else "sent for a plain sum"
    assert how["model updates"].startswith(expected)


def test_a_run_that_stopped_early_says_so_and_counts_each_refusal_once(tmp_path: Path) -> None:
    # The site and the server both log a budget refusal; the server also logs why the run stopped.
    logs = {
        p: AuditLog(tmp_path / f"{p}.jsonl", p, "r1", Ed25519PrivateKey.generate()) for p in ("s0", "server")
    }
    refusal = {"site": "s0", "population": "train", "budget": 3.0, "reason": "would exceed the budget"}
    logs["s0"].append("budget_refusal", refusal, round=2)
    logs["server"].append("budget_refusal", refusal, round=2)
    logs["server"].append("run_stopped", {"reason": "round 2: only 0 site(s) took part"}, round=2)
    for log in logs.values():
        log.close()
    html_path, json_path, _ = write_report(
        [tmp_path / "s0.jsonl", tmp_path / "server.jsonl"], tmp_path / "out" / "report.html", None
    )
    data = json.loads(json_path.read_text())
    assert [(r["site"], r["round"]) for r in data["refusals"]] == [("s0", 2)]
    assert data["stopped"] == "round 2: only 0 site(s) took part"
    assert "ended before its planned rounds: round 2: only 0 site(s) took part" in html_path.read_text()
    # s0 only declined: nothing left it, so nothing is called released without protection
    first = _first_sentence(html_path.read_text())
    assert (
        first.startswith("Unverified: The logs of run r1") and "none of which took part in a round" in first
    )
    assert "without differential privacy" not in html_path.read_text()


def test_a_run_without_population_ranges_shows_no_blank_patients_column_nor_raw_json(
    pristine_plain: Run, tmp_path: Path
) -> None:
    """Without DP no privacy record carries a site's population range: the column would read
    "— / —" on every row, so it is left out; the released model and α read as words, not JSON."""
    html, _, _ = _report(pristine_plain, tmp_path)
    table = _sites(html)
    assert table and all("patients (train / validation)" not in row for row in table.values()), table
    assert "— / —" not in html
    assert '{"sha256"' not in html and "{&quot;sha256&quot;" not in html and "&quot;alpha&quot;" not in html
    assert "cd" * 32 in html and "0.5, 0.3, 0.2" in html  # the hash and the α values themselves stay
