"""A plain round's vector rides on the training reply (one message phase): the server can ask for it
inside any training message, so the site applies the plain-sum query's rules there too.

Real `SiteRuntime`s behind `handle`; the server embeds the plain-sum request our orchestrator sends
only in a plain round, into rounds where the site's policy forbids an unmasked update.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from secure_fed.crypto.vectors import (
    PLAIN_SUM_REFUSED,
    embed_plain_sum,
    embedded_plain_sum,
    plain_sum_request,
)
from tests.adversarial.harness import MaliciousServer


def _arrays(reply: dict[str, Any]) -> list[np.ndarray]:
    return [v for v in reply.values() if isinstance(v, np.ndarray)]


def _instructions(server: MaliciousServer) -> list[tuple[str, str, str | None]]:
    return [
        (r["payload"]["phase"], r["payload"]["outcome"], r["payload"]["code"])
        for r in server.victim.events("instruction")
    ]


def test_a_secagg_site_sends_no_unmasked_update_inside_a_training_reply(
    make_config, one_torch_thread
) -> None:
    # the policy that forbids an unmasked update is SecAgg+'s own, DP or not
    server = MaliciousServer(make_config(secagg__enabled=True, fed__method="fedavg"))
    assert server.victim.send("train", server.honest_train(1))["status"] == "ok"
    dim = len(server.victim.runtime.stash["upload"])
    reply = server.victim.send("train", server.honest_train(2) | embed_plain_sum(plain_sum_request(2, dim)))
    # the training result stands (the sum counts the site as dropped), the update does not travel
    assert reply["status"] == "ok" and PLAIN_SUM_REFUSED in reply
    assert embedded_plain_sum(reply) is None
    upload = server.victim.runtime.stash["upload"]
    assert not any(a.shape == upload.shape and np.allclose(a, upload) for a in _arrays(reply))
    # the site's log says what was asked and refused, as it does for the plain-sum query itself
    assert _instructions(server) == [
        ("train", "acted", None),
        ("train", "acted", None),
        ("plain_sum", "refused", "policy"),
    ]


def test_a_plain_site_sends_its_update_once_and_logs_the_release(make_config, one_torch_thread) -> None:
    server = MaliciousServer(make_config(fed__method="fedavg"))
    assert server.victim.send("train", server.honest_train(1))["status"] == "ok"
    dim = len(server.victim.runtime.stash["upload"])
    wrong = server.victim.send(
        "train", server.honest_train(2) | embed_plain_sum(plain_sum_request(2, dim + 1))
    )
    assert wrong["status"] == "ok" and PLAIN_SUM_REFUSED in wrong and embedded_plain_sum(wrong) is None
    reply = server.victim.send("train", server.honest_train(3) | embed_plain_sum(plain_sum_request(3, dim)))
    carried = embedded_plain_sum(reply)
    assert carried is not None
    np.testing.assert_array_equal(carried["vector"], server.victim.runtime.stash["upload"])
    assert _instructions(server) == [
        ("train", "acted", None),
        ("train", "acted", None),
        ("plain_sum", "refused", "secagg"),
        ("train", "acted", None),
        ("plain_sum", "acted", None),
    ]
