"""Attacks (issue 29, item 10) on what a SecAgg+ site used to take from the server: its refusal
text, its quantisation and its Shamir threshold.

- A site without its keys answered the server with the key loader's message, which names the
  site's key files by absolute path. Now the server gets our one-line reason; the path stays in
  the site's own log (`detail`).
- The clip and bits of the quantisation came from the server's setup request. Now the site's own
  policy (`secagg.clip`, `secagg.bits`) sets them and a setup asking for others is refused.
- A site accepted any threshold with 2t >= k + 2: one colluding site. Where the site count leaves
  room (k <= 6: up to 7 sites in a complete graph) it now asks for t = k - 1, which still
  survives one dropout: at 7 sites t = 5, safe against three colluders where t = 4 was against one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from secure_fed.crypto.keys import init_keys
from secure_fed.crypto.secagg_protocol import SETUP, SecAggSettings, round_params, word_bits
from secure_fed.site.handler import handle
from tests.crypto.test_secagg_privacy import _setup_request
from tests.site.test_handler import StubRuntime, _train


@pytest.fixture(scope="module")
def keys_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("keys")
    init_keys(root, ["server", "site-1", "site-2"])
    return root


@pytest.fixture(scope="module")
def foreign_keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A key folder without site-1's signing key (another site's kit, say)."""
    root = tmp_path_factory.mktemp("foreign-kit")
    init_keys(root, ["server", "site-2", "site-3"])
    return root


def _detail(runtime: StubRuntime) -> str:
    (*_, detail) = runtime.instructions[-1]
    return str(detail)


@pytest.mark.parametrize("carried", ["inside the training message", "as its own phase"])
def test_a_keyless_sites_refusal_names_no_local_path(make_config, foreign_keys: Path, carried: str) -> None:
    cfg = make_config(secagg__clip=8.0, secagg__bits=24)
    runtime = StubRuntime(cfg, foreign_keys)
    if carried == "inside the training message":
        reply, _ = handle(runtime, "train", _train(_setup_request()), {})
        sent = reply["secagg_refused"]
    else:
        runtime.stash["upload"] = np.zeros(10)
        runtime.stash["upload_round"] = 1
        reply, _ = handle(runtime, SETUP, _setup_request(), {})
        assert reply["status"] == "refused" and reply["code"] == "secagg"
        sent = reply["error"]
    assert str(foreign_keys) not in sent and ".pem" not in sent, sent
    assert "keys" in sent and "\n" not in sent
    assert str(foreign_keys) in _detail(runtime)  # the site's own log says which file


QUANTISATION_CASES = [
    # (the site's policy, what the server asks for, refused for)
    ({"secagg__clip": 1.0}, {"clip": 8.0, "bits": word_bits(6, 10)}, "secagg.clip"),
    ({"secagg__clip": 8.0, "secagg__bits": 20}, {"clip": 8.0, "bits": 24}, "bits"),
    ({"secagg__clip": 8.0}, {"clip": 8.0, "bits": 12}, "bits"),  # coarser than the site's automatic bits
]


@pytest.mark.parametrize(("policy", "asked", "named"), QUANTISATION_CASES)
def test_a_server_chosen_quantisation_is_refused(
    make_config, keys_dir: Path, policy: dict, asked: dict, named: str
) -> None:
    runtime = StubRuntime(make_config(**policy), keys_dir)
    request = _setup_request(**asked, modulus_bits=64)
    reply, state = handle(runtime, "train", _train(request), {})
    assert reply["status"] == "ok" and named in reply.get("secagg_refused", ""), reply
    assert "stage" not in state


@pytest.mark.parametrize(
    ("policy", "asked"),
    [
        ({"secagg__clip": 8.0, "secagg__bits": 24}, {"clip": 8.0, "bits": 24}),
        ({"secagg__clip": 8.0}, {"clip": 8.0, "bits": word_bits(6, 10)}),
    ],
)
def test_the_sites_own_quantisation_is_accepted(
    make_config, keys_dir: Path, policy: dict, asked: dict
) -> None:
    runtime = StubRuntime(make_config(**policy), keys_dir)
    reply, state = handle(runtime, "train", _train(_setup_request(**asked, modulus_bits=64)), {})
    assert "secagg_refused" not in reply and state["stage"] == SETUP, reply


def test_seven_sites_ask_for_a_threshold_that_holds_against_more_than_one_colluder(
    make_config, keys_dir: Path
) -> None:
    """k = 6: t = 4 satisfies 2t >= k + 2 but two colluding neighbours and the server strip a
    victim (2t <= k + c). A site now asks for t = 5 (one dropout still survivable)."""
    six = {"neighbours": [2, 3, 4, 5, 6, 7], "num_nodes": 7, "modulus_bits": 64}
    runtime = StubRuntime(make_config(secagg__clip=8.0, secagg__bits=24), keys_dir)
    reply, _ = handle(runtime, "train", _train(_setup_request(threshold=4, **six)), {})
    assert "unsafe" in reply.get("secagg_refused", ""), reply
    reply, state = handle(runtime, "train", _train(_setup_request(threshold=5, **six)), {})
    assert "secagg_refused" not in reply and state["threshold"] == 5, reply
    # the server's own plan asks for what the sites accept: t = 2, 3, 3, 4, 5 for 3-7 sites
    settings = SecAggSettings()
    assert [round_params(n, 10, settings).threshold for n in range(3, 8)] == [2, 3, 3, 4, 5]
