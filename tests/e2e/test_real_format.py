"""Real-format runs: one DP round through `secure-fed run` on a generated IU-Xray-style
annotation.json (both views of a two-view study) and on a JSONL manifest of PNG/JPEG images (first
view only), and a missing GPU failing at start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from secure_fed.cli import app
from secure_fed.data.realistic import write_realistic
from secure_fed.data.tokenizer import WordCharTokenizer

runner = CliRunner()


def _toml(data: Path, source: str, cache_dir: Path, deal_sites: bool) -> str:
    return f"""
seed = 0
[data]
source = "{source}"
path = "{data}"
{"deal_sites = 3" if deal_sites else ""}
{"views = 2" if source == "annotation" else ""}
tokenizer = "words+chars"
max_report_tokens = 96
max_visits = 1
val_fraction = 0.25
test_fraction = 0.25
[model]
cache_dir = "{cache_dir}"
pretrain_steps = 20
[train]
batch_size = 8
local_epochs = 1
threads = 1
[fed]
rounds = 1
engine = "inprocess"
[dp]
enabled = true
target_epsilon = 8.0
sample_rate = 0.5
"""


@pytest.fixture(scope="module")
def real_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_realistic(tmp_path_factory.mktemp("real"), studies=36, seed=1)


@pytest.mark.slow
@pytest.mark.parametrize("source", ["annotation", "manifest"])
def test_one_dp_round_on_real_format_data(source, real_set, cache_dir, tmp_path, one_torch_thread):
    path = real_set if source == "annotation" else real_set.parent / "manifest.jsonl"
    config = tmp_path / "run.toml"
    config.write_text(_toml(path, source, cache_dir, deal_sites=source == "annotation"))
    reports = [e["report"] for split in json.loads(real_set.read_text()).values() for e in split]
    tok = WordCharTokenizer()
    ids = [i for r in reports for i in tok.encode(r)]
    assert sum(i == tok.unk_id for i in ids) / len(ids) < 0.01  # the done-when bound
    assert max(len(tok.encode(r)) for r in reports) <= 96  # no report truncated at max_report_tokens
    result = runner.invoke(app, ["run", "-c", str(config), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["rounds"] == 1
    sites = {"annotation": {"site0", "site1", "site2"}, "manifest": {"hospital0", "hospital1", "hospital2"}}
    assert set(metrics["privacy"]["epsilon"]) == sites[source]
    assert all(0 < e["rdp"] <= 8.0 + 1e-9 for e in metrics["privacy"]["epsilon"].values())
    assert 0.0 <= metrics["test"]["BLEU-1"] <= 1.0
    assert 0.0 <= metrics["test"]["CE-F1"] <= 1.0  # free text read by the 14-observation labeler


def test_cuda_without_cuda_fails_at_start(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    config = tmp_path / "run.toml"
    config.write_text('[train]\ndevice = "cuda"\n')
    result = runner.invoke(app, ["run", "-c", str(config), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "train.device = 'cuda'" in result.output and "no usable CUDA device" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists()  # refused before the run folder exists
