"""The `slow` marker is kept honest: a test that starts a federation process (Flower's SuperLink or
SuperNode, `secure-fed run`) without it fails, so `make test-fast` cannot grow slow unseen."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from secure_fed.launch.superlink import local_superlink
from tests import conftest
from tests.conftest import starts_a_federation


def test_the_command_lines_that_start_a_federation() -> None:
    assert starts_a_federation(["/venv/bin/flower-superlink", "--insecure"])
    assert starts_a_federation(["/venv/bin/flower-supernode", "--insecure"])
    assert starts_a_federation(["/venv/bin/secure-fed", "run", "--out", "o"])
    assert starts_a_federation([sys.executable, "-m", "secure_fed.cli", "run", "-c", "c.toml"])
    assert starts_a_federation("make demo")
    assert starts_a_federation(["/venv/bin/secure-fed", "client", "--site", "site0", "--insecure"])
    assert not starts_a_federation(["/venv/bin/secure-fed", "client", "--site", "site0", "--dry-run"])
    assert not starts_a_federation(["/venv/bin/secure-fed", "run", "--help"])
    assert not starts_a_federation(["/tmp/bin/flwr-clientapp", "--help"])
    assert not starts_a_federation(["/venv/bin/secure-fed", "keys", "init"])
    assert not starts_a_federation([sys.executable, "-c", "print('run')"])
    assert not starts_a_federation(["/venv/bin/flwr", "build", "--app", "app"])


def test_an_unmarked_test_cannot_start_the_runs_superlink(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="not marked slow"):
        with local_superlink(tmp_path / "home", tmp_path / "logs" / "superlink.log"):
            pass
    assert conftest._started and "flower_superlink" in conftest._started[0]
    conftest._started.clear()  # the start was this test's point: it passes


def _recipe(makefile: str, target: str) -> str:
    """The one command line of a Makefile target."""
    (line,) = makefile.split(f"\n{target}:", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    return line.strip()


def test_make_test_runs_the_slow_tests_and_make_test_fast_leaves_them_out() -> None:
    root = Path(__file__).resolve().parents[1]
    makefile = (root / "Makefile").read_text(encoding="utf-8")
    pytest = re.search(r"^PYTEST := (.+)$", makefile, flags=re.MULTILINE)
    assert pytest and "-m pytest -q" in pytest[1], "make test and test-fast run pytest through $(PYTEST)"
    # the two workers take whole files (--dist loadfile): a file's module fixtures run once, its
    # tests in order, as in one process
    assert "-n $(TEST_WORKERS) --dist loadfile" in pytest[1] and "TEST_WORKERS ?= 2" in makefile
    assert _recipe(makefile, "test") == '$(PYTEST) -m "not bench"'
    assert _recipe(makefile, "test-fast") == '$(PYTEST) -m "not slow and not bench"'
    pyproject = (root / "pyproject.toml").read_text(encoding="utf-8")
    assert '"slow: ' in pyproject and "--strict-markers" in pyproject  # a misspelt marker is an error
    readme = (root / "README.md").read_text(encoding="utf-8")
    assert "make test-fast" in readme and "make test " in readme
