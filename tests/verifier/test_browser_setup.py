"""`make test` installs Chromium for the report's browser test itself (.ci/ensure-browser).

The real apt-get is replaced by stubs on a PATH that holds nothing else, so these run the script
as a fresh machine would see it: no browser, root, and an apt-get that works or fails.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / ".ci" / "ensure-browser"
BASH = "/bin/bash"


def _stub(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f"#!{BASH}\n{body}\n")
    path.chmod(0o755)


def _run(bin_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BASH, str(SCRIPT)],
        env={"PATH": str(bin_dir), "HOME": str(bin_dir), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _makefile_test_runs_the_script() -> bool:
    text = (REPO / "Makefile").read_text()
    return "test: $(STAMP) browser" in text and "bash .ci/ensure-browser" in text


def test_make_test_depends_on_the_browser_step() -> None:
    assert _makefile_test_runs_the_script()


def test_installs_chromium_with_apt_when_missing(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("the stubbed install path runs as root, as CI does")
    log = tmp_path / "apt.log"
    # The stub records its arguments and, on `install`, puts a chromium on PATH as the package would.
    _stub(
        tmp_path,
        "apt-get",
        f'echo "$*" >> {log}\n'
        f'if [ "$1" = install ] || [[ " $* " == *" install "* ]]; then\n'
        f'  printf "#!{BASH}\\necho chromium\\n" > {tmp_path}/chromium\n'
        f"  /bin/chmod +x {tmp_path}/chromium\n"
        "fi",
    )
    done = _run(tmp_path)
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines()
    assert calls[0].startswith("update") and "install" in calls[1] and "chromium" in calls[1]
    assert (tmp_path / "chromium").exists()
    assert f"chromium: {tmp_path}/chromium" in done.stderr


def test_fails_loudly_when_it_cannot_install(tmp_path: Path) -> None:
    _stub(tmp_path, "apt-get", "exit 100")
    done = _run(tmp_path)
    assert done.returncode == 1
    assert "could not be installed" in done.stderr and "SECURE_FED_ALLOW_NO_BROWSER=1" in done.stderr


def test_explicit_opt_out_skips_the_install(tmp_path: Path) -> None:
    log = tmp_path / "apt.log"
    _stub(tmp_path, "apt-get", f'echo "$*" >> {log}')
    done = _run(tmp_path, SECURE_FED_ALLOW_NO_BROWSER="1")
    assert done.returncode == 0
    assert "will be skipped" in done.stderr and not log.exists()


def test_present_browser_needs_nothing(tmp_path: Path) -> None:
    log = tmp_path / "apt.log"
    _stub(tmp_path, "apt-get", f'echo "$*" >> {log}')
    _stub(tmp_path, "chromium-browser", "true")
    assert _run(tmp_path).returncode == 0 and not log.exists()
