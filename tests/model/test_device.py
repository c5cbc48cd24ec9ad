"""train.device: one function decides; the model and everything it computes follow it."""

from __future__ import annotations

import pytest
import torch

from secure_fed.model import setup
from secure_fed.model.device import DeviceUnavailable, resolve_device


def test_resolve_device(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(DeviceUnavailable, match="train.device = 'cuda'.*set train.device = 'cpu'"):
        resolve_device("cuda")
    with pytest.raises(DeviceUnavailable, match="expected one of auto, cpu, cuda"):
        resolve_device("tpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("cuda")
    assert resolve_device("cuda") == torch.device("cuda")
    assert resolve_device("cpu") == torch.device("cpu")


def test_the_model_goes_where_resolve_device_says_and_inputs_follow(
    make_config, monkeypatch, one_torch_thread
):
    cfg = make_config(train__device="cpu")
    asked: list[str] = []

    def meta(setting: str) -> torch.device:
        asked.append(setting)
        return torch.device("meta")

    monkeypatch.setattr(setup, "resolve_device", meta)
    model = setup.build_report_model(cfg)
    assert asked == ["cpu"]
    assert {p.device.type for p in model.parameters()} == {"meta"}
    assert model.device == torch.device("meta")
    # CPU inputs are moved to the model's device by the model itself: callers never place tensors
    images = torch.zeros(2, 2, 32, 32)
    ids = torch.ones(2, 6, dtype=torch.long)
    profiles = torch.zeros(2, cfg.model.gmm_components + setup.visit_slots(cfg))
    loss = model(images, ids, profiles)
    assert loss.device.type == "meta" and loss.shape == (2,)


def test_states_leave_on_the_cpu(make_config, one_torch_thread):
    cfg = make_config(train__device="cpu")
    model = setup.build_report_model(cfg)
    state = model.trainable_state()
    assert state and all(v.device.type == "cpu" for v in state.values())
    first = next(iter(state))
    state[first].add_(1.0)  # a copy, not a view of the live parameters
    assert not torch.equal(dict(model.named_parameters())[first].detach(), state[first])
