"""One entry point for every phase a site answers: the Flower ClientApp and the in-process engine
both call `handle`, so the protocol is the same whichever runtime carries it."""

from __future__ import annotations

from typing import Any

from secure_fed.clients.policy import SitePolicy
from secure_fed.clients.runtime import SiteRuntime
from secure_fed.crypto import scalars as scalar_sum
from secure_fed.crypto import vectors as vector_sum
from secure_fed.crypto.secagg_protocol import (
    PLAIN_SUM,
    SECAGG_PHASES,
    SETUP,
    SecAggRefused,
    embed_setup,
    embedded_setup,
)

Payload = dict[str, Any]

VECTOR_PHASES = frozenset({PLAIN_SUM, *SECAGG_PHASES})
SCALAR_PHASES = frozenset({scalar_sum.PLAIN_PHASE, scalar_sum.ENCRYPT_PHASE, scalar_sum.DECRYPT_PHASE})


def handle(
    runtime: SiteRuntime, phase: str, request: Payload, state: Payload, secret_context: object | None = None
) -> tuple[Payload, Payload]:
    SitePolicy.from_config(runtime.cfg).check(phase, request)
    round_id = int(request.get("round", 0))
    if phase == "hello":
        return {"site": runtime.site, "dp": runtime.privacy is not None}, state
    if phase == "train":
        reply = runtime.train(round_id, str(request["method"]), request["global"], request)
        setup = embedded_setup(request)
        if setup is None or reply.get("status") != "ok":
            return reply, state
        # SecAgg+ key advertisement rides on the training message: the update it will mask exists now
        try:
            keys, state = vector_sum.client_step(SETUP, setup, {}, runtime.stash["upload"])
        except SecAggRefused as exc:  # the training result stands; the secure sum counts us as dropped
            return {**reply, "secagg_refused": str(exc)}, state
        return {**reply, **embed_setup(keys)}, state
    if phase == "hypergrad":
        return runtime.hypergrad(round_id, request["final"], request["directions"]), state
    if phase == "finish":
        return runtime.finish(), state
    if phase == "evaluate":
        return runtime.evaluate(request["global"], str(request.get("split", "test"))), state
    if phase in VECTOR_PHASES:
        upload = runtime.stash.get("upload")
        if upload is None:
            return {"error": "no update to aggregate this round"}, state
        return vector_sum.client_step(phase, request, state, upload)
    if phase in SCALAR_PHASES:
        scalars = runtime.stash.get("scalars")
        if scalars is None:
            return {"error": "no α scalars this round"}, state
        return scalar_sum.client_step(phase, request, state, scalars, secret_context)
    raise ValueError(f"unknown phase {phase!r}")
