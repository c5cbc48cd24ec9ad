"""The FAB a hospital reviews and pins holds the code its node runs and not the research harness:
built as docs/DEPLOYMENT.md's steps build it (the package's .py files and README.md beside
pyproject.toml, then `flwr build`), it has no secure_fed/lab/ file and every other file of the
package, byte for byte, and `secure-fed code review` finds nothing missing. About 4 s (`flwr build`
in a subprocess)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from secure_fed.launch.approved_app import package_files, review_fab

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "secure_fed"
BIN = Path(sys.executable).parent


def _deployment_steps() -> str:
    text = (REPO / "docs" / "DEPLOYMENT.md").read_text(encoding="utf-8")
    return text.split("### The code the node runs", 1)[1].split("```bash", 1)[1].split("```", 1)[0]


def build_release_fab(work: Path) -> Path:
    """DEPLOYMENT.md's release: app/ holds pyproject.toml, README.md and every secure_fed .py file
    (the lab's too: the copy takes the whole package), and `flwr build` makes the FAB from it."""
    steps = _deployment_steps()
    assert 'cp "$REPO/pyproject.toml" "$REPO/README.md" app/' in steps, steps
    assert "find secure_fed -name '*.py'" in steps and "flwr build --app ../app" in steps, steps
    app, fab = work / "app", work / "fab"
    app.mkdir(parents=True)
    fab.mkdir()
    shutil.copy2(REPO / "pyproject.toml", app / "pyproject.toml")
    shutil.copy2(REPO / "README.md", app / "README.md")
    for path in PACKAGE.rglob("*.py"):
        if "__pycache__" not in path.parts:
            target = app / path.relative_to(REPO)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    env = dict(os.environ, FLWR_HOME=str(work / "flwr"), FLWR_TELEMETRY_ENABLED="0")
    env["FLWR_DISABLE_UPDATE_CHECK"] = "1"
    built = subprocess.run(
        [str(BIN / "flwr"), "build", "--app", "../app"],
        cwd=fab,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (found,) = fab.glob("*.fab")
    return found


def test_the_release_fab_holds_the_approved_code_and_no_lab_file(tmp_path: Path) -> None:
    lab = sorted(p.relative_to(REPO).as_posix() for p in (PACKAGE / "lab").rglob("*.py"))
    assert "secure_fed/lab/sweep.py" in lab  # the copy carried the lab: the build is what leaves it out
    fab = build_release_fab(tmp_path)
    with zipfile.ZipFile(fab) as zipped:
        members = {name: zipped.read(name) for name in zipped.namelist()}
    assert [name for name in members if name.startswith("secure_fed/lab/")] == []
    approved = {
        path.relative_to(REPO).as_posix(): path.read_bytes()
        for path in PACKAGE.rglob("*.py")
        if "__pycache__" not in path.parts and (PACKAGE / "lab") not in path.parents
    }
    assert "secure_fed/launch/client_app.py" in approved and "secure_fed/launch/server_app.py" in approved
    assert {name: data for name, data in members.items() if name.startswith("secure_fed/")} == approved
    # the site's review compares the same files: none missing, none differing, no lab file in it
    review = review_fab(fab)
    assert review.missing == [], review.missing
    assert {status for name, status in review.files if name.endswith(".py")} == {"same"}, review.files
    assert not [name for name in package_files() if name.startswith("secure_fed/lab/")]
