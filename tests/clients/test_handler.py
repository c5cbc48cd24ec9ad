"""The site's phase dispatcher: SecAgg+ key advertisement inside the training message."""

from __future__ import annotations

from typing import Any

import numpy as np

from secure_fed.clients.handler import handle
from secure_fed.crypto.secagg_protocol import SETUP, embed_setup, embedded_setup
from tests.crypto.test_secagg_privacy import _setup_request


class StubRuntime:
    """What `handle` needs of a SiteRuntime for a training message."""

    def __init__(self, cfg: Any, status: str = "ok") -> None:
        self.cfg = cfg
        self.status = status
        self.stash: dict[str, Any] = {}

    def train(self, round_id: int, method: str, global_state: np.ndarray, request: dict) -> dict:
        self.stash["upload"] = np.zeros(10)
        return {"status": self.status, "train_loss": 1.0}


def _train(setup: dict[str, Any] | None) -> dict[str, Any]:
    request = {"round": 1, "method": "fedavg", "global": np.zeros(3), "dp": False}
    return {**request, **(embed_setup(setup) if setup else {})}


def test_training_reply_carries_the_keys_and_the_state_is_set_up(make_config):
    reply, state = handle(StubRuntime(make_config()), "train", _train(_setup_request()), {})
    assert reply["status"] == "ok" and reply["train_loss"] == 1.0
    keys = embedded_setup(reply)
    assert set(keys) == {"enc_pk", "mask_pk"} and all(len(k) == 32 for k in keys.values())
    assert state["stage"] == SETUP and state["round_id"] == 1 and state["neighbours"] == [2, 3, 4, 5]


def test_an_unsafe_setup_is_refused_but_the_training_result_stands(make_config):
    unsafe = _train(_setup_request(threshold=2))
    reply, state = handle(StubRuntime(make_config()), "train", unsafe, {"kept": 1})
    assert reply["status"] == "ok" and "unsafe" in reply["secagg_refused"]
    assert embedded_setup(reply) is None and state == {"kept": 1}


def test_no_setup_without_an_update_or_without_a_request(make_config):
    declined, _ = handle(StubRuntime(make_config(), status="declined"), "train", _train(_setup_request()), {})
    assert embedded_setup(declined) is None
    plain, state = handle(StubRuntime(make_config()), "train", _train(None), {"kept": 1})
    assert embedded_setup(plain) is None and state == {"kept": 1}
