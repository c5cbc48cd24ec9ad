"""Render report.html in headless Chromium: the summary and the plot must actually show.

Chromium is a test dependency (Debian: `apt-get install chromium`). Without it this test fails,
unless SECURE_FED_ALLOW_NO_BROWSER=1 says a browser-less environment is acceptable (then it skips).
SECURE_FED_UPDATE_SCREENSHOT=1 also copies the screenshot to docs/report_screenshot.png.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from PIL import Image

from secure_fed.audits.keys import load_public_keys
from secure_fed.audits.report import write_report

from .conftest import Run

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
    assert 'id="summary"' in dom and "per patient at site-0" in dom and "per patient at site-1" in dom
    # The plot is an inline SVG inside the plot section, with drawn paths (lines, glyphs).
    plot = re.search(r'id="plot"[^>]*>\s*(<svg.*?</svg>)', dom, re.DOTALL)
    assert plot and plot.group(1).count("<path") > 20
    shot = tmp_path / "report.png"
    _browser(binary, tmp_path / "profile", f"--screenshot={shot}", url)
    image = Image.open(shot).convert("RGB")
    assert image.size == (1200, 1600)
    colours = image.getcolors(maxcolors=1 << 20)
    assert colours is None or len(colours) > 50  # text, plot lines and tables, not a blank page
    # The plot's lines (matplotlib's default blue and orange) are really painted.
    pixels = set(image.getdata())
    assert any(abs(r - 31) < 30 and abs(g - 119) < 30 and abs(b - 180) < 30 for r, g, b in pixels)
    assert any(r > 220 and 100 < g < 160 and b < 60 for r, g, b in pixels)
    if os.environ.get("SECURE_FED_UPDATE_SCREENSHOT") == "1":
        shutil.copyfile(shot, REPO / "docs" / "report_screenshot.png")


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
