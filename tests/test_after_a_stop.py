"""After any stop, the truth (issue 65 items 1–4), through the real `secure-fed` command.

Seen from a fresh clone: a `state.pt` cut in half made `run --resume` start the federation, fail
after a minute on one generic line and seal every audit log with a head record, so the restored
checkpoint could never be resumed; an interrupted DP run's report listed releases that never
happened (no sum was formed), wrote no report.html and said nothing of `audit report`; the report's
verdict judged the logs only (a green VERIFIED on a run without DP, no ε against the budget); after
a resume the console said "incomplete: 1 of 2 rounds" (exit 3) while the report was green and said
"the run finished"; and a Ctrl-C that cost every site a round's ε said only "continues from the last
checkpoint".

One DP run (in-process, 2 rounds) serves items 1–4: Ctrl-C inside round 2's training (round 1 is
checkpointed and summed; site0 and site1 were charged round 2's ε, no sum of it was formed), then a
damaged checkpoint refused, then the restored one resumed.
"""

from __future__ import annotations

import hashlib
import html as htmllib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from secure_fed.cli import app
from tests.verifier.test_report_truth import Scenario, summary_text, write_run

runner = CliRunner()


def _config(path: Path, cache_dir: Path, rounds: int, dp: bool) -> Path:
    dp_table = "[dp]\nenabled = true\ntarget_epsilon = 8.0\nsample_rate = 0.5\n" if dp else ""
    path.write_text(
        "seed = 0\n[data.synth]\nsites = 3\npatients = 16\nvisits = 3\n"
        "[data]\nmax_visits = 3\nval_fraction = 0.25\ntest_fraction = 0.25\n"
        f'[model]\ncache_dir = "{cache_dir}"\npretrain_steps = 150\n'
        f"[train]\nbatch_size = 8\nthreads = 1\n"
        f'[fed]\nrounds = {rounds}\nengine = "inprocess"\n' + dp_table
    )
    return path


def _digests(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def _records(out: Path, party: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "audit" / f"{party}.jsonl").read_text().splitlines()]


def _page_text(out: Path) -> str:
    return htmllib.unescape(re.sub(r"<[^>]+>", " ", (out / "report.html").read_text(encoding="utf-8")))


def _one_line(output: str) -> str:
    return " ".join(output.split())


def _worst(payloads: Any) -> tuple[float, str, str]:
    """(ε, site, population) of the largest RDP ε among privacy payloads; of equal ones, the first
    site's, as the report names it (sites in order)."""
    found = [(p["epsilon"]["rdp"], p["site"], p["population"]) for p in payloads]
    top = max(eps for eps, _, _ in found)
    site, population = min((site, pop) for eps, site, pop in found if eps == top)
    return top, site, population


@pytest.mark.slow
def test_a_stop_a_damaged_checkpoint_and_a_resume_each_tell_the_truth(tmp_path, cache_dir, monkeypatch):
    from secure_fed.algorithms.fedtar.learner import ReportLearner

    out = tmp_path / "o"
    config = _config(tmp_path / "run.toml", cache_dir, rounds=2, dp=True)
    train = ReportLearner.local_update

    def interrupted_in_training(self: ReportLearner, round_id: int, *args: Any, **kwargs: Any) -> Any:
        if self.data.name == "site1" and round_id == 2:
            raise KeyboardInterrupt  # Ctrl-C: round 2 charged at site0 and site1, no sum formed
        return train(self, round_id, *args, **kwargs)

    monkeypatch.setattr(ReportLearner, "local_update", interrupted_in_training)
    stopped = runner.invoke(app, ["run", "-c", str(config), "-o", str(out)])
    assert stopped.exit_code == 130, stopped.output
    said = _one_line(stopped.output)
    charged = {
        site
        for site in ("site0", "site1", "site2")
        if any(r["event"] == "privacy" and r["round"] == 2 for r in _records(out, site))
    }
    assert charged == {"site0", "site1"}, charged

    # item 4: the stop says what it cost, from the sites' own records
    assert "round 2's ε was charged at every site that trained in it (site0, site1)" in said, said
    assert "nothing of round 2 was released" in said, said
    assert f"`secure-fed run --resume {out}` continues after round 1" in said, said

    # item 2: the interrupted run writes its report and says so, and the report tells charged from
    # released: round 1's sum was formed, round 2's was not
    assert (out / "report.html").is_file(), said
    assert f"wrote {out / 'report.html'} (INCOMPLETE" in said, said
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "<h1 id='title'>INCOMPLETE" in page
    summary = summary_text(page)
    assert re.search(r"charged, not released: round 2 at site0, site1\b", summary, re.I), summary
    releases = re.search(r"<ul id='releases'>(.*?)</ul>", page, re.DOTALL)
    assert releases is not None
    listed = htmllib.unescape(re.sub(r"<[^>]+>", "", releases.group(1)))
    # every release listed was formed: the server logged round 1's sum of every site, nothing after
    sums = [r for r in _records(out, "server") if r["event"] == "secagg_round"]
    assert [r["round"] for r in sums] == [1], sums
    assert "model updates (every site): summed with SecAgg+" in listed, listed
    assert "Not covered by ε" not in listed, listed
    report = json.loads((out / "report.json").read_text())
    by_site = {site["site"]: site for site in report["sites"]}
    assert {site: by_site[site]["rounds"] for site in by_site} == {
        s: [1] for s in ("site0", "site1", "site2")
    }
    assert {site: by_site[site]["charged_unreleased"] for site in by_site} == {
        "site0": [2],
        "site1": [2],
        "site2": [],
    }

    # item 1: a damaged checkpoint is refused before anything starts, naming it, no log touched
    state = out / "checkpoint" / "state.pt"
    good = state.read_bytes()
    state.write_bytes(good[: len(good) // 2])
    before = _digests(out / "audit")
    import secure_fed.launch.runner

    started: list[str] = []
    monkeypatch.setattr(
        secure_fed.launch.runner, "run_federated", lambda *a, **k: started.append("run") or None
    )
    refused = runner.invoke(app, ["run", "--resume", str(out)])
    assert refused.exit_code == 2, refused.output
    assert not started, "the federation started on a damaged checkpoint"
    lines = refused.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in refused.output, refused.output
    assert str(state) in lines[0] and "restore" in lines[0] and "SHA-256" in lines[0], lines[0]
    assert _digests(out / "audit") == before, "a log changed on a refused resume"

    # restored, the run resumes; round 2 cannot be summed (its ε was spent at site0 and site1):
    # console, exit code and report say the same
    monkeypatch.undo()
    state.write_bytes(good)
    resumed = runner.invoke(app, ["run", "--resume", str(out)])
    assert resumed.exit_code == 3, resumed.output
    said = _one_line(resumed.output)
    assert "incomplete: 1 of 2 rounds completed" in said, said
    assert f"wrote {out / 'report.html'} (INCOMPLETE: 1 of 2 planned rounds completed" in said, said
    verdict = json.loads((out / "report.json").read_text())["verdict"]
    assert verdict["word"] == "INCOMPLETE" and "1 of 2 planned rounds completed" in verdict["why"], verdict
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "class='verdict ok'" not in page and "the run finished" not in _page_text(out)
    # item 3: the verdict states the privacy: max ε of the budget, whose it is, accountant, δ
    eps, site, population = _worst(
        r["payload"]
        for site in ("site0", "site1", "site2")
        for r in _records(out, site)
        if r["event"] == "privacy"
    )
    whose = {"train": "training patients", "validation": "validation patients"}[population]
    assert (
        f"max ε {eps:.3g} of 8 at {site}, {whose}, RDP over its training and validation patients, δ 1e-05"
        in (verdict["privacy"])
    ), verdict


def test_the_verdict_line_carries_the_privacy_and_a_run_without_dp_is_never_green(tmp_path):
    """`audit report` and `audit verify` on a finished run's logs: the verdict says integrity and
    privacy together."""
    for name, scenario in (("dp", Scenario()), ("plain", Scenario(dp=False))):
        written = write_run(tmp_path / name, scenario)
        logs = [str(p) for p in written.paths]
        report = tmp_path / name / "report.html"
        made = runner.invoke(app, ["audit", "report", *logs, "-o", str(report), "--keys", str(written.keys)])
        verified = runner.invoke(app, ["audit", "verify", *logs, "--keys", str(written.keys)])
        page = report.read_text(encoding="utf-8")
        verdict = json.loads(report.with_suffix(".json").read_text())["verdict"]
        title = re.search(r"<h1 id='title'>(.*?)</h1>", page)
        assert title is not None
        if name == "dp":
            records = [json.loads(line) for p in written.paths for line in p.read_text().splitlines()]
            eps, site, _ = _worst(r["payload"] for r in records if r["event"] == "privacy")
            line = (
                f"VERIFIED — every site within budget: max ε {eps:.3g} of 20 at {site}, training patients, "
                "RDP over its training and validation patients, δ 1e-05"
            )
            assert made.exit_code == 0 and verified.exit_code == 0, made.output + verified.output
            assert htmllib.unescape(title.group(1)) == line, title.group(1)
            assert "class='verdict ok'" in page
        else:
            line = "VERIFIED — NO DIFFERENTIAL PRIVACY (ε = ∞)"
            assert htmllib.unescape(title.group(1)) == line, title.group(1)
            assert "class='verdict ok'" not in page, "a run without DP shown green"
        assert line in _one_line(made.output) and line in _one_line(verified.output), (
            made.output,
            verified.output,
        )
        assert verdict["privacy"] in line


@pytest.mark.slow  # whole runs in process (each run ~1 min)
def test_a_failure_of_the_runs_own_machinery_leaves_it_resumable(tmp_path, cache_dir, monkeypatch):
    """Not a site's refusal nor a budget: an unexpected error of the server's own code. The logs are
    not sealed (no head record), the console says so in one line, and `--resume` finishes the run.

    Then the attack on the new reading: the server's log cut back to that signed resumable stop,
    hiding what it signed after. The sites' logs hold round 2, so that stop did not end the run:
    FAILED, naming the cut, not the interrupted run's INCOMPLETE."""
    import secure_fed.server.orchestrator as orchestrator

    out = tmp_path / "o"
    config = _config(tmp_path / "run.toml", cache_dir, rounds=2, dp=False)
    sample = orchestrator.sample_sites

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("disk quota exceeded writing /tmp/x")  # host detail: never signed

    monkeypatch.setattr(orchestrator, "sample_sites", broken)
    failed = runner.invoke(app, ["run", "-c", str(config), "-o", str(out)])
    assert failed.exit_code == 1, failed.output
    assert "Traceback" not in failed.output and f"--resume {out}" in failed.output, failed.output
    for party in ("server", "site0", "site1", "site2"):
        records = _records(out, party)
        assert records[-1]["event"] != "head", (party, records[-1])
        assert "/tmp/x" not in json.dumps(records), party
    # its report is written, and does not read as a run that went well
    verdict = json.loads((out / "report.json").read_text())["verdict"]
    wrote = f"wrote {out / 'report.html'} ({verdict['word']}"
    assert wrote in _one_line(failed.output), (verdict, failed.output)
    # nothing was cut or forged: the sites were told nothing and stopped with it, so the verdict is
    # the interrupted run's (exit 4), not a tampered log's FAILED; the signed reason is the server's
    assert (verdict["word"], verdict["exit_code"]) == ("INCOMPLETE", 4), verdict
    assert "a failure of the server's own code in round 1: server, site0, site1, site2" in verdict["why"]
    stop = _records(out, "server")[-1]
    assert stop["event"] == "run_aborted" and stop["payload"]["resumable"] is True, stop
    assert stop["payload"]["reason"].startswith("the server stopped on an unexpected RuntimeError"), stop
    assert "/tmp/x" not in (out / "report.html").read_text(encoding="utf-8")
    monkeypatch.setattr(orchestrator, "sample_sites", sample)
    resumed = runner.invoke(app, ["run", "--resume", str(out)])
    assert resumed.exit_code == 0, resumed.output
    assert (out / "metrics.json").is_file()
    for party in ("server", "site0", "site1", "site2"):
        assert _records(out, party)[-1]["event"] == "head", party

    server = out / "audit" / "server.jsonl"
    lines = server.read_text().splitlines()
    cut = max(i for i, line in enumerate(lines) if json.loads(line)["event"] == "run_aborted")
    assert cut < len(lines) - 1  # the resumed run went on after it
    server.write_text("\n".join(lines[: cut + 1]) + "\n")
    logs = [str(path) for path in sorted((out / "audit").glob("*.jsonl"))]
    verified = runner.invoke(app, ["audit", "verify", *logs, "--keys", str(out / "keys")])
    said = _one_line(verified.output)
    assert verified.exit_code == 1 and "FAILED" in said, said
    assert "cut back to a stop the run resumed from" in said and "holds round 2" in said, said


@pytest.mark.parametrize("damage", ["sealed_log", "missing_key"])
def test_resume_refuses_what_it_could_not_finish_before_anything_starts(tmp_path, damage, monkeypatch):
    """A resume checks every file it will need before it starts anything: a log already closed with
    its head record, a signing key gone. One line naming the file and the fix, nothing changed."""
    import secure_fed.launch.runner

    written = write_run(tmp_path / "w", Scenario(stop_after=1, signal="SIGINT"))
    out = tmp_path / "w"
    settings = {"fed": {"rounds": 3, "engine": "inprocess"}, "data": {"synth": {"sites": 3}}}
    (out / "config.json").write_text(json.dumps(settings))
    (out / "run_id").write_text("run-truth\n")
    (written.keys / "fingerprints.json").write_text("{}")  # a key folder `keys init` made
    if damage == "sealed_log":
        from secure_fed.audits.keys import load_private_key
        from secure_fed.audits.log import AuditLog

        site1 = out / "audit" / "site1.jsonl"
        site1.write_text("".join(site1.read_text().splitlines(keepends=True)[:-1]))  # drop its stop
        AuditLog(site1, "site1", "run-truth", load_private_key(written.keys, "site1")).close()
        named, fix = site1, "closed"
    else:
        key = written.keys / "signing" / "site2.pem"
        assert key.is_file(), sorted(p.name for p in (written.keys / "signing").iterdir())
        key.unlink()
        named, fix = key, "key"
    before = _digests(out)
    started: list[str] = []
    monkeypatch.setattr(secure_fed.launch.runner, "run_federated", lambda *a, **k: started.append("run"))
    refused = runner.invoke(app, ["run", "--resume", str(out)])
    assert refused.exit_code == 2, refused.output
    assert not started
    lines = refused.output.strip().splitlines()
    assert len(lines) == 1 and str(named) in lines[0] and fix in lines[0], refused.output
    assert _digests(out) == before


@pytest.mark.slow  # one run in process (~30 s)
def test_a_lost_worker_is_named_a_lost_worker_not_a_failure_of_the_servers_code(
    tmp_path, cache_dir, monkeypatch
):
    """Issue 65: a run stopped because a site's worker ended (Ray's memory monitor, a kill) is
    signed resumable like a failure of the server's own code, and verify and the report named it
    one. The signed record's `code` says which it was (a lost worker's kind), and they word it so."""
    import secure_fed.server.orchestrator as orchestrator
    from secure_fed.protocol.failures import WORKER_KILLED, Failure

    out = tmp_path / "o"
    config = _config(tmp_path / "run.toml", cache_dir, rounds=2, dp=False)
    gone = {"site1": Failure(WORKER_KILLED, "its worker process was killed", "free memory")}

    def lost(*args: Any, **kwargs: Any) -> Any:
        raise orchestrator.SitesLost("round 1 lost a site's worker", WORKER_KILLED, gone)

    monkeypatch.setattr(orchestrator, "sample_sites", lost)
    failed = runner.invoke(app, ["run", "-c", str(config), "-o", str(out)])
    assert failed.exit_code != 0, failed.output
    stop = _records(out, "server")[-1]
    assert stop["event"] == "run_aborted" and stop["payload"]["resumable"] is True, stop
    assert stop["payload"]["code"] == WORKER_KILLED, stop
    logs = [str(path) for path in sorted((out / "audit").glob("*.jsonl"))]
    verified = runner.invoke(app, ["audit", "verify", *logs, "--keys", str(out / "keys")])
    said = _one_line(verified.output)
    assert verified.exit_code == 4, said
    lost_words = "lost site workers (their processes were killed) in round 1: server, site0, site1, site2"
    assert lost_words in said, said
    assert "server's own code" not in said, said
    verdict = json.loads((out / "report.json").read_text())["verdict"]
    assert lost_words in verdict["why"] and "server's own code" not in verdict["why"], verdict
    assert "server's own code" not in _page_text(out)


def test_every_lost_worker_code_is_worded_as_lost_site_workers():
    """The verifier words a resumable stop from its signed `code` without importing the code that
    ran the run: every code the server signs for lost workers is one it knows, and any other code
    (`internal`, a classified error of its own) stays a failure of the server's own code."""
    from secure_fed.protocol.failures import LOST_WORKER
    from secure_fed.verifier.verify import _LOST_WORKERS, _signal_stop_words

    assert set(_LOST_WORKERS) == LOST_WORKER | {"workers_lost"}  # SitesLost's codes (Orchestrator._lost)
    for code in _LOST_WORKERS:
        assert _signal_stop_words({"resumable": True, "code": code}).startswith("lost site workers")
    for code in ("internal", "error", "site_error", None):
        assert _signal_stop_words({"resumable": True, "code": code}) == "a failure of the server's own code"
