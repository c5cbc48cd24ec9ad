"""`make install` on a disk without room for a fresh venv stops in one line naming the disk and the
fix, before it makes anything (a full disk otherwise fails halfway, in pip's OSError)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECK = ROOT / ".ci" / "check-install-space"


def test_a_disk_with_room_passes_silently(tmp_path: Path) -> None:
    done = subprocess.run(["bash", str(CHECK), str(tmp_path), "0"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == done.stderr == ""


def test_a_full_disk_is_refused_in_one_line_naming_the_disk_and_the_fix(tmp_path: Path) -> None:
    done = subprocess.run(["bash", str(CHECK), str(tmp_path), "1000000"], capture_output=True, text=True)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert str(tmp_path) in lines[0]
    assert "about 1000000 GiB" in lines[0] and "VENV=" in lines[0]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_install_checks_before_it_makes_the_venv(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    done = subprocess.run(
        ["make", "--no-print-directory", "install", f"VENV={venv}", "INSTALL_NEEDS_GIB=1000000"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0
    assert "a fresh .venv needs about 1000000 GiB" in done.stderr
    assert not venv.exists()
