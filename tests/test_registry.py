"""The core finds each algorithm's pieces through secure_fed.registry, by name."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import secure_fed.algorithms
from secure_fed import registry


def test_each_algorithm_folder_registers_its_strategies_and_learner() -> None:
    assert {"fedtar", "fedtar-no-gmm", "fedtar-no-temporal", "fm2"} <= set(registry.method_names())
    # FedTAR's learner, imported when a run builds one (the folder's own module names it lazily)
    assert registry.learner_factory("reports").__module__ == "secure_fed.algorithms.fedtar"
    with pytest.raises(ValueError, match="data.kind = 'tabular'"):
        registry.learner_factory("tabular")


def test_checking_a_method_name_imports_no_model_code() -> None:
    """Every config names a method, and the registry imports every algorithm folder to check it: a
    folder that imported torch or the model there made each `secure-fed` process, and each process
    Flower's deployment starts per message, pay seconds before its first line
    (8.6-10.9 s against 0.2 s, measured with the suite running beside it)."""
    code = (
        "import sys\n"
        "from secure_fed.config import RunConfig\n"
        "cfg = RunConfig()\n"
        "assert len(cfg.fed.accepted_methods) > 10, cfg.fed.accepted_methods\n"
        "heavy = ('torch', 'peft', 'timm', 'secure_fed.model', 'secure_fed.server')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_a_second_algorithm_cannot_take_a_registered_name() -> None:
    registry.load_algorithms()
    taken = registry.method("fedtar")
    registry.register_method(taken)  # the same method again (a re-import) is fine
    with pytest.raises(ValueError, match="two algorithms register the method 'fedtar'"):
        registry.register_method(registry.Method("fedtar", lambda dim, t_max, cfg: None, ("reports",)))
    assert registry.method("fedtar") is taken


def test_an_algorithm_folder_is_found_by_listing_the_algorithms_package(tmp_path: Path, monkeypatch) -> None:
    """No list of folders to keep up to date: a new folder registers at the first lookup."""
    probe = tmp_path / "probe_algorithm"
    probe.mkdir()
    (probe / "__init__.py").write_text(
        "from secure_fed import registry\n"
        "registry.register_method(registry.Method('probe-method', lambda d, t, c: None, ('reports',)))\n"
    )
    (tmp_path / "loose_module.py").write_text("raise AssertionError('a module is not an algorithm folder')\n")
    registry.load_algorithms()  # the real table first: what the monkeypatches restore is complete
    monkeypatch.setattr(secure_fed.algorithms, "__path__", [*secure_fed.algorithms.__path__, str(tmp_path)])
    monkeypatch.setattr(registry, "_methods", dict(registry._methods))
    monkeypatch.setattr(registry, "_loaded", False)
    try:
        assert "probe-method" in registry.method_names()
        assert {"fedtar", "fm2"} <= set(registry.method_names())
    finally:
        sys.modules.pop("secure_fed.algorithms.probe_algorithm", None)
