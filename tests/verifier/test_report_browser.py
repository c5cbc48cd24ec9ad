"""Render report.html in headless Chromium: the verdict leads, and the summary and the plot show.

Chromium is a test dependency (Debian: `apt-get install chromium`). Without it this test fails,
unless SECURE_FED_ALLOW_NO_BROWSER=1 says a browser-less environment is acceptable (then it skips).
SECURE_FED_UPDATE_SCREENSHOT=1 also copies the first screen of each verdict's report to
docs/report_<verdict>.png (shown in docs/DEPLOYMENT.md).
"""

from __future__ import annotations

import html as htmllib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from PIL import Image

from secure_fed.audits.keys import load_public_keys
from secure_fed.verifier.report import write_report

from .conftest import Run
from .tamper import read_records, write_records
from .test_report_truth import Scenario, write_run

REPO = Path(__file__).resolve().parents[2]
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1200,1600",
]


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    if os.environ.get("SECURE_FED_ALLOW_NO_BROWSER") == "1":
        pytest.skip("no Chromium, and SECURE_FED_ALLOW_NO_BROWSER=1")
    pytest.fail(
        "Chromium is required to render the report (apt-get install chromium), "
        "or set SECURE_FED_ALLOW_NO_BROWSER=1 to skip this test"
    )


def _browser(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [binary, *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


def test_report_renders_in_chromium(pristine: Run, tmp_path: Path) -> None:
    binary = _chromium()
    html, _, _ = write_report(
        pristine.all_paths, tmp_path / "report.html", load_public_keys(pristine.keys_dir)
    )
    url = html.resolve().as_uri()
    dom = _browser(binary, tmp_path / "profile", "--dump-dom", url).stdout
    assert 'id="summary"' in dom and "<td><b>site-0</b></td>" in dom and "<td><b>site-1</b></td>" in dom
    # The plot is an inline SVG inside the plot section, with drawn paths (lines, glyphs).
    plot = re.search(r'id="plot"[^>]*>\s*(<svg.*?</svg>)', dom, re.DOTALL)
    assert plot and plot.group(1).count("<path") > 20
    shot = tmp_path / "report.png"
    # the plot sits below the summary: a window tall enough to paint it
    tall = [flag for flag in FLAGS if not flag.startswith("--window-size")] + ["--window-size=1200,3200"]
    subprocess.run(
        [binary, *tall, f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", url],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    image = Image.open(shot).convert("RGB")
    assert image.size == (1200, 3200)
    colours = image.getcolors(maxcolors=1 << 20)
    assert colours is None or len(colours) > 50  # text, plot lines and tables, not a blank page
    # The plot's lines (matplotlib's default blue and orange) are really painted.
    pixels = set(image.getdata())
    assert any(abs(r - 31) < 30 and abs(g - 119) < 30 and abs(b - 180) < 30 for r, g, b in pixels)
    assert any(r > 220 and 100 < g < 160 and b < 60 for r, g, b in pixels)


def _visible_lines(dom: str) -> list[str]:
    """The page's text as Chromium laid it out, block by block, from the top."""
    body = dom[dom.index("<body") :]
    spaced = re.sub(r"</(?:p|li|h\d|caption|tr|div)>", "\n", body)
    text = htmllib.unescape(re.sub(r"<[^>]+>", "", spaced))
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]


def _tamper(paths: list[Path]) -> None:
    """Raise a noise multiplier in site0's own log without re-signing: a forged privacy record."""
    site0 = next(path for path in paths if path.name == "site0.jsonl")
    records = read_records(site0)
    index = next(i for i, r in enumerate(records) if r["event"] == "privacy")
    records[index]["payload"]["event"]["noise_multiplier"] = 9.0
    write_records(site0, records)


# what each report must lead with: (scenario, keys given, tamper, verdict, first-line start, colour)
LEADS = {
    "verified": (
        Scenario(dp=True, he=True),
        True,
        False,
        "VERIFIED",
        "every log is complete",
        (0xE3, 0xF5, 0xE8),
    ),
    "tampered": (
        Scenario(dp=True, he=True),
        True,
        True,
        "FAILED",
        "the first: site0.jsonl:3: hash mismatch (record was modified)",
        (0xFB, 0xE5, 0xE5),
    ),
    "interrupted": (
        Scenario(dp=True, he=True, stop_after=1, signal="SIGINT"),
        True,
        False,
        "INCOMPLETE",
        "the run was interrupted (SIGINT in round 1",
        (0xFF, 0xF4, 0xD6),
    ),
    "no_keys": (
        Scenario(dp=True, he=True),
        False,
        False,
        "NOT VERIFIED",
        "signatures not checked: no keys given",
        (0xFB, 0xE5, 0xE5),
    ),
}


@pytest.mark.parametrize("name", list(LEADS))
def test_each_report_leads_with_its_verdict_in_chromium(tmp_path: Path, name: str) -> None:
    """A DP + SecAgg+ + CKKS run's report, the same logs tampered with, interrupted, and verified
    without keys: the first screen a reader sees says which, before any finding."""
    binary = _chromium()
    scenario, keyed, tampered, word, why, colour = LEADS[name]
    written = write_run(tmp_path / "run", scenario)
    if tampered:
        _tamper(written.paths)
    page, _, _ = write_report(
        written.paths, tmp_path / "report.html", load_public_keys(written.keys) if keyed else None
    )
    url = page.resolve().as_uri()
    lines = _visible_lines(_browser(binary, tmp_path / "profile", "--dump-dom", url).stdout)
    privacy = json.loads(page.with_suffix(".json").read_text())["verdict"]["privacy"]
    assert lines[0] == f"{word} — {privacy or 'privacy compliance report'}", lines[:3]
    assert lines[1].startswith(f"{word}: ") and why in lines[1], lines[1]
    summary = lines.index("Summary" if word not in ("FAILED", "NOT VERIFIED") else "Summary (unverified)")
    if word in ("FAILED", "NOT VERIFIED"):
        # what failed or was not checked comes first; every finding after it says it is unverified
        assert lines[summary + 1].startswith("Every finding below is unverified")
        assert lines[summary + 2].startswith("Unverified: In run run-truth")
    else:
        assert lines[summary + 1].startswith("In run run-truth") and "nverified" not in " ".join(lines[:40])
    if name == "no_keys":
        assert " ".join(lines).count("signatures not checked") == 1 and "copy dropped" not in " ".join(lines)
    shot = tmp_path / "first-screen.png"
    _browser(binary, tmp_path / "profile", f"--screenshot={shot}", url)
    image = Image.open(shot).convert("RGB")
    # the verdict's box is painted in its colour within the first screen's top
    top = image.crop((0, 0, image.size[0], 260))
    assert colour in set(top.getdata()), f"no verdict box of {colour} at the top"
    if os.environ.get("SECURE_FED_UPDATE_SCREENSHOT") == "1":
        image.crop((0, 0, 1200, 900)).save(REPO / "docs" / f"report_{name}.png", optimize=True)


def test_missing_browser_fails_unless_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv("SECURE_FED_ALLOW_NO_BROWSER", raising=False)
    with pytest.raises(pytest.fail.Exception, match="Chromium is required"):
        _chromium()
    monkeypatch.setenv("SECURE_FED_ALLOW_NO_BROWSER", "1")
    with pytest.raises(pytest.skip.Exception):
        _chromium()


def test_every_mechanism_column_shows_at_1280_px(pristine: Run, tmp_path: Path) -> None:
    """The mechanism table fits a 1280 px window: its first and last columns are both painted.

    The copy under test marks them with colours the report never uses (its CSP is taken out for
    the marking stylesheet only); a column pushed off-screen would leave its colour unpainted.
    """
    binary = _chromium()
    page, _, _ = write_report(
        pristine.all_paths, tmp_path / "report.html", load_public_keys(pristine.keys_dir)
    )
    text = page.read_text(encoding="utf-8")
    marked = re.sub(r"<meta http-equiv='Content-Security-Policy'[^>]*>", "", text).replace(
        "</head>",
        "<style>#mechanisms tr > :first-child { background: #00ff00 !important; }"
        "#mechanisms tr > :last-child { background: #ff00ff !important; }</style></head>",
    )
    assert marked != text
    copy = tmp_path / "marked.html"
    copy.write_text(marked, encoding="utf-8")
    shot = tmp_path / "wide.png"
    flags = [f for f in FLAGS if not f.startswith("--window-size")]
    subprocess.run(
        [
            binary,
            *flags,
            "--window-size=1280,6000",
            f"--user-data-dir={tmp_path / 'p'}",
            f"--screenshot={shot}",
        ]
        + [copy.resolve().as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    image = Image.open(shot).convert("RGB")
    assert image.size[0] == 1280
    width, height = image.size
    pixels = image.load()
    last = [x for x in range(width) for y in range(0, height, 4) if pixels[x, y] == (255, 0, 255)]
    first = [x for x in range(0, width, 2) for y in range(0, height, 4) if pixels[x, y] == (0, 255, 0)]
    assert first, "the mechanism table is not on the page"
    assert last, "the last column ('re-derived ε matches') is off-screen at 1280 px"
    assert max(last) < width - 1
