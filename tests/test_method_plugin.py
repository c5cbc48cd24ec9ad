"""A baseline method is one folder plus one registry line (issue 66): a probe method, written here
as a folder of its own, goes through the real config validation, server strategy lookup, site
learner and an in-process federated run, with no other file of the package touched."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import secure_fed.algorithms
from secure_fed import registry
from secure_fed.config import ConfigError, RunConfig
from secure_fed.launch.runner import run_inprocess
from secure_fed.server.strategies import make_strategy
from secure_fed.site.learner import SiteStart
from tests.conftest import small_config

# The whole method: its site half (a proximal pull, counted) and its server half (FedAvg's step),
# then its one registry line.
PLUGIN = """
from secure_fed import registry
from secure_fed.server.strategies import FedAvg


class HalfPull(registry.SiteHook):
    calls = 0

    def prox_mu(self, cfg):
        HalfPull.calls += 1
        return 0.5


class Probe(FedAvg):
    name = "probe-avg"


registry.register_method(registry.Method("probe-avg", lambda d, _, c: Probe(d, c), ("reports",), HalfPull))
"""


@pytest.fixture
def probe_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The probe as a folder beside the installed algorithm folders, found by the registry's own
    listing; the real table is restored afterwards."""
    root = tmp_path / "plugins"
    (root / "probe_method").mkdir(parents=True)
    (root / "probe_method" / "__init__.py").write_text(PLUGIN)
    registry.load_algorithms()
    monkeypatch.setattr(secure_fed.algorithms, "__path__", [*secure_fed.algorithms.__path__, str(root)])
    monkeypatch.setattr(registry, "_methods", dict(registry._methods))
    monkeypatch.setattr(registry, "_loaded", False)
    yield
    sys.modules.pop("secure_fed.algorithms.probe_method", None)


def _config(cache_dir: Path, out: Path, **overrides: object) -> RunConfig:
    return small_config(cache_dir, out, train__threads=1, fed__rounds=1, **overrides)


def test_an_unregistered_method_fails_in_one_line_naming_the_registered_ones(cache_dir, tmp_path) -> None:
    with pytest.raises(ConfigError) as refused:
        _config(cache_dir, tmp_path / "run", fed__method="probe-avg")
    message = str(refused.value)
    assert "fed.method = 'probe-avg' is no registered method; choose one of" in message
    assert "fedavg, fedbn, fedprox" in message and "\n" not in message.strip()
    with pytest.raises(ConfigError, match="fed.accepted_methods = 'probe-avg' is no registered method"):
        _config(cache_dir, tmp_path / "run", fed__accepted_methods=["fedavg", "probe-avg"])


def _upload(cfg: RunConfig, method: str, out: Path) -> np.ndarray:
    folder = out / method
    folder.mkdir(parents=True)
    learner = registry.learner_factory(cfg.data.kind)(cfg, "site0", folder, None)
    learner.start(SiteStart("site0", folder, "probe-run", None, None, None))
    return learner.local_update(1, method, registry.initial_state(cfg), None, {}).upload


def test_a_method_in_one_folder_runs_through_config_server_and_site(
    probe_folder: None, cache_dir: Path, tmp_path: Path
) -> None:
    cfg = _config(cache_dir, tmp_path / "run", fed__method="probe-avg")
    assert "probe-avg" in cfg.fed.accepted_methods  # the site policy's default: every registered method
    assert "probe-avg" in RunConfig.model_json_schema()["$defs"]["FedConfig"]["properties"]["method"]["enum"]
    strategy = make_strategy("probe-avg", 10, cfg.data.max_visits, cfg)
    assert type(strategy).__name__ == "Probe"

    hook = sys.modules["secure_fed.algorithms.probe_method"].HalfPull
    probe = _upload(cfg, "probe-avg", tmp_path / "uploads")
    assert hook.calls == 1  # the site learner asked the probe's own hook
    # the probe's pull is FedProx's at μ = 0.5, to the last bit; and it is a pull: not FedAvg's step
    prox_cfg = _config(cache_dir, tmp_path / "prox", fed__method="fedprox", fed__fedprox_mu=0.5)
    np.testing.assert_array_equal(probe, _upload(prox_cfg, "fedprox", tmp_path / "uploads"))
    plain_cfg = _config(cache_dir, tmp_path / "plain", fed__method="fedavg")
    assert not np.array_equal(probe, _upload(plain_cfg, "fedavg", tmp_path / "uploads"))

    result = run_inprocess(cfg, cfg.out)  # the real orchestrator, sites and secure sum, in-process
    assert hook.calls >= 1 + 3  # each of the three sites trained a round with it
    assert set(result.metrics["test"])
