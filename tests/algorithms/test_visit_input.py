"""`model.visit_input`: FedTAR's visit-aware variant (issue 63 item 2). The report's visit index, one-hot
over data.max_visits, joins q_p at the patient hyper-LoRA's input, so one adapter, one released
vector, serves each visit as its own. Off by default until measured."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from secure_fed.cli import app
from secure_fed.config import ConfigError
from secure_fed.model.setup import build_report_model, visit_slots
from secure_fed.site.site import attach_profiles, load_site
from tests.conftest import small_config


class _Uniform:
    def __init__(self, k: int) -> None:
        self.k = k

    def responsibilities(self, profiles: np.ndarray) -> np.ndarray:
        return np.full((len(profiles), self.k), 1.0 / self.k)


def test_each_row_carries_its_visit_one_hot_after_q(cache_dir: Path, tmp_path: Path) -> None:
    cfg = small_config(cache_dir, tmp_path, model__visit_input=True)
    data = load_site(cfg, "site0")
    slots = visit_slots(cfg)
    assert slots == cfg.data.max_visits == 3
    attach_profiles(data, _Uniform(4), slots)
    for split in (data.train, data.val, data.test):
        assert split.profiles is not None and split.profiles.shape == (len(split), 4 + slots)
        assert torch.allclose(split.profiles[:, :4], torch.full((len(split), 4), 0.25, dtype=torch.float64))
        onehot = split.profiles[:, 4:]
        assert torch.equal(onehot.sum(1), torch.ones(len(split), dtype=torch.float64))
        assert torch.equal(onehot.argmax(1) + 1, split.visit_index.clamp(1, slots))
    attach_profiles(data, _Uniform(4))  # off: q_p alone, as before
    assert data.train.profiles is not None and data.train.profiles.shape[1] == 4


def test_the_adapter_reads_the_visit(cache_dir: Path, tmp_path: Path) -> None:
    """Two rows alike but for the visit index score differently once the hypernetwork has learned
    anything; without visit_input the model has no such input."""
    cfg = small_config(cache_dir, tmp_path, model__visit_input=True)
    model = build_report_model(cfg)
    k, slots = cfg.model.gmm_components, visit_slots(cfg)
    assert model.proj is not None and model.proj.in_features == k + slots
    plain = build_report_model(small_config(cache_dir, tmp_path / "plain", model__visit_input=False))
    assert plain.proj is not None and plain.proj.in_features == k
    torch.manual_seed(0)
    with torch.no_grad():  # a trained head: the patient term is no longer zero
        for name, p in model.named_parameters():
            if ".hyper." in name or name.startswith("proj."):
                p.add_(0.1 * torch.randn_like(p))
    size = cfg.data.synth.image_size
    images = torch.rand(1, 2, size, size).repeat(2, 1, 1, 1)
    ids = torch.tensor([[1, 5, 6, 7, 2]]).repeat(2, 1)
    q = torch.full((2, k), 1.0 / k)
    visits = torch.eye(slots)[[0, 2]]
    model.eval()
    with torch.no_grad():
        logits = model.logits(images, ids, torch.cat([q, visits], 1).float())
    assert not torch.allclose(logits[0], logits[1]), "the visit index changed nothing"


def test_refused_in_one_line_where_nothing_reads_it(cache_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="model.visit_input needs the patient hyper-LoRA") as err:
        small_config(cache_dir, tmp_path, model__visit_input=True, model__hyper_lora=False)
    assert "\n" not in str(err.value)


@pytest.mark.slow  # whole runs in process (each run ~1 min)
def test_a_visit_aware_fedtar_run_completes(cache_dir: Path, tmp_path: Path) -> None:
    config = tmp_path / "run.toml"
    config.write_text(
        "seed = 0\n[data.synth]\nsites = 3\npatients = 16\nvisits = 3\n"
        "[data]\nmax_visits = 3\nval_fraction = 0.25\ntest_fraction = 0.25\n"
        f'[model]\ncache_dir = "{cache_dir}"\npretrain_steps = 150\nvisit_input = true\n'
        '[train]\nbatch_size = 8\nthreads = 1\n[fed]\nrounds = 1\nengine = "inprocess"\n'
    )
    out = tmp_path / "o"
    ran = CliRunner().invoke(app, ["run", "-c", str(config), "-o", str(out)])
    assert ran.exit_code == 0, ran.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert np.isfinite(metrics["test"]["CIDEr"]), metrics["test"]


@pytest.mark.parametrize(
    ("method", "hyper_lora", "expected"),
    [
        ("fedtar", True, True),
        ("fedtar-no-temporal", True, True),
        ("fedtar-no-gmm", True, False),
        ("fedavg", True, False),
        ("fedtar", False, False),
    ],
)
def test_by_default_fedtar_reads_the_visit_and_no_other_method_does(
    cache_dir: Path, tmp_path: Path, method: str, hyper_lora: bool, expected: bool
) -> None:
    """Unset, `model.visit_input` is FedTAR's: its hyper-LoRA reads the visit index; FedAvg, the
    ablation without the hyper-LoRA and a plain adapter keep q_p alone."""
    cfg = small_config(cache_dir, tmp_path, fed__method=method, model__hyper_lora=hyper_lora)
    assert cfg.model.visit_input is None
    assert cfg.visit_input_on is expected
    assert visit_slots(cfg) == (cfg.data.max_visits if expected else 0)
