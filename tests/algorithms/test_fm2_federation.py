"""FM2 and the imaging baselines on the hardened federation: what crosses the wire, DP with
verified logs, SecAgg+ over the uploads, the site's refusals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from secure_fed.algorithms.fm2.learner import ImageClassifier, ImagingLearner, shared_names
from secure_fed.algorithms.fm2.model import FM2Model
from secure_fed.audits.keys import load_public_keys
from secure_fed.config import ConfigError, RunConfig, load_config
from secure_fed.launch.runner import run_inprocess
from secure_fed.server.transports import InProcessTransport, decode_payload, encode_payload
from secure_fed.site.guard import Refusal
from secure_fed.site.runtime import SiteRuntime
from secure_fed.verifier.verify import verify_logs


def _config(cache_dir: Path, out: Path, **overrides: Any) -> RunConfig:
    base = {
        "fed.method": "fm2",
        "data.kind": "imaging",
        "fed.rounds": 2,
        "fed.engine": "inprocess",
        "data.imaging.per_class": 8,
        "data.imaging.sites": 3,
        "train.threads": 1,
        "model.cache_dir": str(cache_dir),
        "out": str(out),
    }
    return load_config(None, {**base, **overrides})


class RecordingTransport(InProcessTransport):
    """Keeps every number that crossed the in-process wire, both ways, as the receiver decoded it
    from the wire bytes."""

    wire: list[np.ndarray] = []

    def exchange(self, phase: str, requests: Any) -> dict[int, dict[str, Any]]:
        replies = super().exchange(phase, requests)
        for payload in (*requests.values(), *replies.values()):
            _numbers(decode_payload(encode_payload(payload)), RecordingTransport.wire)
        return replies


def _numbers(value: Any, into: list[np.ndarray]) -> None:
    if isinstance(value, dict):
        for v in value.values():
            _numbers(v, into)
    elif isinstance(value, list | tuple):
        for v in value:
            _numbers(v, into)
    elif isinstance(value, np.ndarray) and value.dtype.kind == "f":
        into.append(value.astype(np.float64).ravel())  # float32 values widen exactly
    elif isinstance(value, float):
        into.append(np.array([value]))


def _values(module: torch.nn.Module) -> np.ndarray:
    """A module's distinctive values (not 0, so an initial zero bias is not counted)."""
    flat = torch.cat([p.detach().double().flatten() for p in module.parameters()]).numpy()
    return flat[np.abs(flat) > 1e-6]


@pytest.mark.slow  # a whole run in process: make test-fast leaves it out
def test_class_experts_never_cross_the_wire(cache_dir, tmp_path, monkeypatch) -> None:
    RecordingTransport.wire = []
    monkeypatch.setattr("secure_fed.launch.runner.InProcessTransport", RecordingTransport)
    local: list[np.ndarray] = []
    domain: list[np.ndarray] = []
    original = ImagingLearner.local_update

    def spy(
        self: ImagingLearner, round_id: int, method: str, global_vec: np.ndarray, gradients: Any, options: Any
    ) -> Any:
        self.load_global(global_vec)
        assert isinstance(self.model, FM2Model)
        domain.append(_values(self.model.dmoe))
        local.append(_values(self.model.cmoe))
        update = original(self, round_id, method, global_vec, gradients, options)
        local.append(_values(self.model.cmoe))
        return update

    monkeypatch.setattr(ImagingLearner, "local_update", spy)
    cfg = _config(cache_dir, tmp_path / "run", **{"secagg.enabled": False})
    outcome = run_inprocess(cfg, cfg.out)
    assert outcome.metrics["rounds"] == 2
    wire = np.unique(np.concatenate(RecordingTransport.wire))
    # the detector works: the global M_d the server sent is found whole on the wire
    assert np.isin(np.concatenate(domain), wire).all()
    # no site's class-wise experts, before or after its training, are. float32 weights drawn at
    # 24-bit resolution coincide with other weights by chance a few times in 10,000; sent, they
    # would all be found.
    found = np.isin(np.concatenate(local), wire).mean()
    assert len(local) == 2 * 2 * 3 and found < 0.01


def test_what_each_method_shares() -> None:
    model = ImageClassifier(classes=4, dim=16)
    names = [n for n, _ in model.named_parameters()]
    assert shared_names(model, "fedavg") == names
    assert shared_names(model, "fedrep") == [n for n in names if n.startswith("observer.")]
    fedbn = shared_names(model, "fedbn")
    norms = [n for n, m in model.named_modules() if isinstance(m, torch.nn.GroupNorm)]
    assert norms and not [n for n in fedbn if any(n.startswith(f"{g}.") for g in norms)]
    assert "head.weight" in fedbn and len(fedbn) == len(names) - 2 * len(norms)


@pytest.mark.slow
def test_fm2_dp_run_with_secagg_logs_verify_with_rederived_epsilon(cache_dir, tmp_path) -> None:
    cfg = _config(
        cache_dir,
        tmp_path / "dp",
        **{"data.imaging.sites": 4, "dp.enabled": True, "dp.target_epsilon": 8.0},
    )
    assert cfg.secagg_on
    outcome = run_inprocess(cfg, cfg.out)
    eps = outcome.metrics["privacy"]["epsilon"]
    assert set(eps) == {"site0", "site1", "site2", "site3"}
    assert all(0 < e["rdp"] <= 8.0 for e in eps.values())
    assert outcome.metrics["secure_aggregation"] == "secagg+"
    # under DP no per-site loss leaves a site
    assert all(row["train_loss"] is None for row in outcome.per_round)
    logs = sorted((cfg.out / "audit").glob("*.jsonl"))
    result = verify_logs(logs, load_public_keys(cfg.out / "keys"))
    assert result.ok, [str(p) for p in result.problems]
    assert len(result.rederived) >= 4 * 2  # DP-SGD each round at each site; no α release in FM2
    for site in eps:
        text = (cfg.out / "audit" / f"{site}.jsonl").read_text()
        assert '"dp_sgd"' in text and '"alpha_scalars"' not in text


@pytest.mark.slow  # whole runs in process: make test-fast leaves it out
def test_every_imaging_method_runs_and_scores(cache_dir, tmp_path) -> None:
    for method in ("fedavg", "fedprox", "fedrep", "fedbn"):
        cfg = _config(cache_dir, tmp_path / method, **{"fed.method": method, "fed.rounds": 1})
        test = run_inprocess(cfg, cfg.out).metrics["test"]
        assert set(test) == {"accuracy", "macro-F1"}, method
        assert 0.0 <= test["accuracy"] <= 1.0 and 0.0 <= test["macro-F1"] <= 1.0


def test_a_server_asking_an_fm2_site_for_alpha_scalars_is_refused(cache_dir, tmp_path) -> None:
    cfg = _config(cache_dir, tmp_path / "site")
    runtime = SiteRuntime.create(cfg, "site0")
    assert isinstance(runtime.learner, ImagingLearner)
    dim = runtime.learner.dim()
    with pytest.raises(Refusal, match="no α scalars"):
        runtime.hypergrad(1, np.zeros(dim), np.zeros((cfg.data.max_visits, dim)))


def test_fm2_config_names_what_dp_forbids() -> None:
    assert load_config(None, {"fed.method": "fm2"}).data.kind == "imaging"
    with pytest.raises(ConfigError, match="fm2.top_k"):
        load_config(None, {"fed.method": "fm2", "fm2.top_k": 5, "dp.enabled": True, "dp.target_epsilon": 4})
    with pytest.raises(ConfigError, match="fm2.cel_weight"):
        load_config(
            None, {"fed.method": "fm2", "fm2.cel_weight": 0.1, "dp.enabled": True, "dp.target_epsilon": 4}
        )
    with pytest.raises(ConfigError, match="does not run on data.kind = 'reports'"):
        load_config(None, {"fed.method": "fm2", "data.kind": "reports"})


@pytest.mark.slow  # whole runs in process: make test-fast leaves it out
def test_top_k_and_cel_run_without_dp(cache_dir, tmp_path) -> None:
    cfg = _config(cache_dir, tmp_path / "topk", **{"fm2.top_k": 3, "fm2.cel_weight": 0.1, "fed.rounds": 1})
    outcome = run_inprocess(cfg, cfg.out)
    assert 0.0 <= outcome.metrics["test"]["accuracy"] <= 1.0


def test_an_imaging_site_s_ledger_is_keyed_by_its_own_images(cache_dir, tmp_path) -> None:
    from secure_fed.site.lifetime import dataset_digest

    cfg = _config(cache_dir, tmp_path / "a")
    again = _config(cache_dir, tmp_path / "b", **{"fed.method": "fedrep"})  # another run, same images
    digests = {site: dataset_digest(cfg, site) for site in ("site0", "site1", "site2")}
    assert len(set(digests.values())) == 3
    assert digests["site0"] == dataset_digest(again, "site0")
    reshuffled = _config(cache_dir, tmp_path / "c", **{"data.imaging.phi": 5.0})  # other images per site
    assert dataset_digest(reshuffled, "site0") != digests["site0"]


@pytest.mark.slow  # a whole run in process: make test-fast leaves it out
def test_the_orchestrator_names_each_phase_of_each_round(cache_dir, tmp_path) -> None:
    seen: list[tuple[int, str]] = []
    cfg = _config(cache_dir, tmp_path / "phases", **{"secagg.enabled": True, "data.imaging.sites": 3})
    run_inprocess(cfg, cfg.out, on_phase=lambda r, phase: seen.append((r, phase)))
    assert seen[0] == (0, "hello")
    for r in (1, 2):
        assert [p for q, p in seen if q == r][:1] == ["train"]  # SecAgg+ setup rides on it
        assert {"secagg_shares", "secagg_masked", "secagg_unmask"} <= {p for q, p in seen if q == r}
    assert [p for _, p in seen[-2:]] == ["evaluate", "finish"]
