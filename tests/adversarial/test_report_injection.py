"""A server that signs its own log writes markup into a record's `time` (issue 29 item 7).

The server holds its signing key, so a record it writes verifies whatever its `time` says. The
report printed the logs' first and last times into the page unescaped: a `<style>` there swallowed
the rest of the page (the "Verification FAILED" banner with it) in a browser. The verifier must
refuse a time that is not the ISO 8601 UTC stamp the log writes, or one that runs backwards, and
the page must carry no markup from a log and allow no inline style but its own (CSP by hash).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path

import pytest

from secure_fed.audits.keys import load_public_keys
from secure_fed.verifier.report import write_report
from secure_fed.verifier.verify import verify_logs
from tests.verifier.conftest import Run, build_run
from tests.verifier.tamper import read_records, reseal_from, write_records

INJECTED = "<style>"  # the rest of the page becomes CSS text: nothing after it is shown


@pytest.fixture(scope="module")
def honest(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return build_run(tmp_path_factory.mktemp("injection"))


def _server_writes_time(run: Run, time: str, index: int = -2) -> None:
    """The server re-signs its own log with `time` on one record (its key: every signature holds)."""
    path = run.paths["server"]
    records = read_records(path)
    start = len(records) + index if index < 0 else index
    records[start] = {**records[start], "time": time}
    write_records(path, reseal_from(records, start, run.keys["server"]))


def _copy(honest: Run, tmp_path: Path) -> Run:
    from tests.verifier.conftest import copy_run

    return copy_run(honest, tmp_path / "run")


def test_markup_in_a_time_never_reaches_the_page(honest: Run, tmp_path: Path) -> None:
    run = _copy(honest, tmp_path)
    _server_writes_time(run, INJECTED + "2026-01-01T00:00:00")
    page, json_path, _ = write_report(run.all_paths, tmp_path / "report.html", load_public_keys(run.keys_dir))
    html = page.read_text(encoding="utf-8")
    body = html[html.index("<body>") :]
    assert "<style" not in body, "markup from a log record reached the page"
    verification = json.loads(json_path.read_text())["verification"]
    assert verification["ok"] is False
    assert any("time" in problem for problem in verification["problems"])
    # the failure leads the page, before any finding taken from the forged log
    assert body.startswith("<body><h1 id='title'>FAILED — privacy compliance report</h1>")


@pytest.mark.parametrize(
    "time",
    [
        "2026-01-01 00:00:00",  # not the log's ISO form
        "2026-13-01T00:00:00.000000+00:00",  # no such month
        "2026-01-01T00:00:00.000000+02:00",  # not UTC
        "yesterday",
    ],
)
def test_verify_refuses_a_time_that_is_not_iso_utc(honest: Run, tmp_path: Path, time: str) -> None:
    run = _copy(honest, tmp_path)
    _server_writes_time(run, time)
    result = verify_logs(run.all_paths, load_public_keys(run.keys_dir))
    assert not result.ok
    assert any(
        "time" in problem.reason and problem.path.endswith("server.jsonl") for problem in result.problems
    )


def test_verify_refuses_a_time_that_runs_backwards(honest: Run, tmp_path: Path) -> None:
    run = _copy(honest, tmp_path)
    _server_writes_time(run, "2000-01-01T00:00:00.000000+00:00")
    result = verify_logs(run.all_paths, load_public_keys(run.keys_dir))
    assert not result.ok
    assert any("earlier than" in problem.reason for problem in result.problems)


def test_the_page_allows_no_inline_style_but_its_own(honest: Run, tmp_path: Path) -> None:
    page, _, _ = write_report(honest.all_paths, tmp_path / "report.html", load_public_keys(honest.keys_dir))
    html = page.read_text(encoding="utf-8")
    policy = re.search(r"Content-Security-Policy' content=\"([^\"]+)\"", html)
    assert policy, "no CSP"
    assert "unsafe-inline" not in policy.group(1)
    assert not re.search(r"\sstyle\s*=", html), "a style attribute (blocked by the CSP: it would not show)"
    for block in re.findall(r"<style[^>]*>(.*?)</style>", html, re.DOTALL):
        digest = base64.b64encode(hashlib.sha256(block.encode("utf-8")).digest()).decode()
        assert f"'sha256-{digest}'" in policy.group(1)
