"""The site's phase dispatcher: SecAgg+ key advertisement, and a plain round's vector, inside the
training message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from secure_fed.crypto.keys import init_keys
from secure_fed.crypto.secagg_identity import SecAggIdentity, load_identity
from secure_fed.crypto.secagg_protocol import SETUP, embed_setup, embedded_setup
from secure_fed.crypto.vectors import (
    PLAIN_SUM_REFUSED,
    embed_plain_sum,
    embedded_plain_sum,
    plain_sum_request,
)
from secure_fed.site.guard import SiteGuard
from secure_fed.site.handler import handle
from tests.crypto.test_secagg_privacy import _setup_request

# the site's own SecAgg+ quantisation, as `_setup_request` asks for it (a site refuses any other)
QUANTISATION = {"secagg__clip": 8.0, "secagg__bits": 24}


@pytest.fixture(scope="module")
def keys_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A provisioned key folder: SecAgg+ signs a site's keys with its own Ed25519 key."""
    root = tmp_path_factory.mktemp("keys")
    init_keys(root, ["server", "site-1", "site-2"])
    return root


class StubRuntime:
    """What `handle` needs of a SiteRuntime for a training message."""

    def __init__(self, cfg: Any, keys_dir: Path | None, status: str = "ok") -> None:
        self.cfg = cfg
        self.status = status
        self.site = "site-1"
        self.keys_dir = keys_dir
        self.run_id = "run-1"
        self.stash: dict[str, Any] = {}
        Path(cfg.out).mkdir(parents=True, exist_ok=True)
        self.guard = SiteGuard(path=Path(cfg.out) / "guard.json", run_id="run-1")
        self.instructions: list[tuple] = []

    def identity(self) -> SecAggIdentity:
        return load_identity(self.keys_dir, self.site, self.run_id)

    def log_instruction(self, *record: Any) -> None:
        self.instructions.append(record)

    def train(self, round_id: int, method: str, global_state: np.ndarray, request: dict) -> dict:
        self.stash["upload"] = np.zeros(10)
        self.stash["upload_round"] = round_id
        return {"status": self.status, "train_loss": 1.0}

    def upload_fingerprint(self) -> None:
        return None  # the SecAgg+ client then fingerprints the update itself, at each phase


def _train(setup: dict[str, Any] | None) -> dict[str, Any]:
    request = {"round": 1, "method": "fedavg", "global": np.zeros(3), "dp": False}
    return {**request, **(embed_setup(setup) if setup else {})}


def test_training_reply_carries_the_keys_and_the_state_is_set_up(make_config, keys_dir):
    reply, state = handle(
        StubRuntime(make_config(**QUANTISATION), keys_dir), "train", _train(_setup_request()), {}
    )
    assert reply["status"] == "ok" and reply["train_loss"] == 1.0
    keys = embedded_setup(reply)
    assert set(keys) == {"enc_pk", "mask_pk", "site", "key_sig"} and keys["site"] == "site-1"
    assert len(keys["enc_pk"]) == len(keys["mask_pk"]) == 32 and len(keys["key_sig"]) == 64
    assert state["stage"] == SETUP and state["round_id"] == 1 and state["neighbours"] == [2, 3, 4, 5]


def test_an_unsafe_setup_is_refused_but_the_training_result_stands(make_config, keys_dir):
    unsafe = _train(_setup_request(threshold=2))
    reply, state = handle(StubRuntime(make_config(**QUANTISATION), keys_dir), "train", unsafe, {"kept": 1})
    assert reply["status"] == "ok" and "unsafe" in reply["secagg_refused"]
    assert embedded_setup(reply) is None and state == {"kept": 1}


def test_no_setup_without_an_update_or_without_a_request(make_config, keys_dir):
    declined, _ = handle(
        StubRuntime(make_config(**QUANTISATION), keys_dir, status="declined"),
        "train",
        _train(_setup_request()),
        {},
    )
    assert embedded_setup(declined) is None
    plain, state = handle(
        StubRuntime(make_config(**QUANTISATION), keys_dir), "train", _train(None), {"kept": 1}
    )
    assert embedded_setup(plain) is None and state == {"kept": 1}


def test_without_provisioned_keys_the_setup_is_refused_and_says_how_to_fix_it(make_config):
    reply, state = handle(
        StubRuntime(make_config(**QUANTISATION), None), "train", _train(_setup_request()), {"kept": 1}
    )
    assert reply["status"] == "ok" and "secure-fed keys init" in reply["secagg_refused"]
    assert "\n" not in reply["secagg_refused"] and state == {"kept": 1}


def test_a_retrained_round_that_re_sends_a_masked_update_gets_no_second_setup(make_config, keys_dir):
    """The state the training message brings is passed to the setup, which keeps the record of
    updates already masked: the retry path re-sends the same update, which is then refused."""
    runtime = StubRuntime(make_config(**QUANTISATION), keys_dir)
    _, state = handle(runtime, "train", _train(_setup_request()), {})
    masked = {**state, "masked_uploads": state["masked_uploads"] + [f"{state['upload_fingerprint']}@1"]}
    reply, _ = handle(runtime, "train", _train(_setup_request()), masked)
    assert "already masked for round 1" in reply["secagg_refused"]


def test_the_runtime_fingerprints_an_update_once_and_afresh_when_it_is_replaced(make_config, monkeypatch):
    from secure_fed.crypto.secagg_client import upload_fingerprint
    from secure_fed.site import runtime as runtime_module

    calls: list[int] = []

    def counted(vector: np.ndarray) -> str:
        calls.append(1)
        return upload_fingerprint(vector)

    monkeypatch.setattr(runtime_module, "upload_fingerprint", counted)
    runtime = runtime_module.SiteRuntime.create(make_config(), "site0")
    assert runtime.upload_fingerprint() is None  # nothing trained, nothing to fingerprint
    first = np.arange(6.0)
    runtime._stash_upload(first)
    assert not first.flags.writeable  # what SecAgg+ fingerprinted cannot change under it
    with pytest.raises(ValueError):
        first[0] = 1.0
    assert runtime.upload_fingerprint() == runtime.upload_fingerprint() == upload_fingerprint(first)
    assert len(calls) == 1
    runtime._stash_upload(np.arange(6.0) + 1)  # a retrain
    assert runtime.upload_fingerprint() != upload_fingerprint(first) and len(calls) == 2
    # over Flower the stash is rebuilt from context.state for every message, arrays writeable
    restored = np.arange(6.0) + 2
    runtime.stash = {"upload": restored}
    assert runtime.upload_fingerprint() == upload_fingerprint(restored) and not restored.flags.writeable
    assert len(calls) == 3
    # the fingerprint rides in context.state beside its update: not made again, the copy frozen
    again = restored.copy()
    runtime.stash = {"upload": again, "upload_fingerprint": upload_fingerprint(restored)}
    assert runtime.upload_fingerprint() == upload_fingerprint(restored) and not again.flags.writeable
    assert len(calls) == 3


def _plain(dim: int) -> dict[str, Any]:
    request = {"round": 1, "method": "fedavg", "global": np.zeros(3), "dp": False}
    return {**request, **embed_plain_sum(plain_sum_request(1, dim))}


def test_a_plain_round_s_training_reply_carries_the_vector(make_config):
    """Issue 53: one message phase for a plain round; the vector is what the plain-sum query sent."""
    reply, _ = handle(StubRuntime(make_config(), None), "train", _plain(10), {})
    assert reply["status"] == "ok" and PLAIN_SUM_REFUSED not in reply
    np.testing.assert_array_equal(embedded_plain_sum(reply)["vector"], np.zeros(10))


def test_a_carried_plain_sum_obeys_the_policy_and_the_length_but_training_stands(make_config):
    # a policy that requires SecAgg+ sends no vector in the clear, in the training reply or not
    runtime = StubRuntime(make_config("needs-secagg", secagg__enabled=True), None)
    reply, _ = handle(runtime, "train", _plain(10), {})
    assert reply["status"] == "ok" and "secure aggregation" in reply[PLAIN_SUM_REFUSED]
    assert embedded_plain_sum(reply) is None
    # the training acted; the carried request has its own record, refused, as the query's would be
    assert [(i[0], i[3], i[4]) for i in runtime.instructions[-2:]] == [
        ("train", "acted", None),
        ("plain_sum", "refused", "policy"),
    ]
    # a request for another length than the site's update
    reply, _ = handle(StubRuntime(make_config("other-length"), None), "train", _plain(11), {})
    assert reply["status"] == "ok" and embedded_plain_sum(reply) is None and reply[PLAIN_SUM_REFUSED]
    # a site that declined its training sends nothing
    reply, _ = handle(StubRuntime(make_config("declined"), None, status="declined"), "train", _plain(10), {})
    assert embedded_plain_sum(reply) is None and PLAIN_SUM_REFUSED not in reply
