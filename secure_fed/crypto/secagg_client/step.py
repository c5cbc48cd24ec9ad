"""One SecAgg+ phase as a site: the phase's order checked, then handed to its stage."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from secure_fed.crypto.secagg_client.fields import _round_id
from secure_fed.crypto.secagg_client.once import _check_upload_id
from secure_fed.crypto.secagg_client.phase_masked import _masked
from secure_fed.crypto.secagg_client.phase_setup import _setup
from secure_fed.crypto.secagg_client.phase_shares import _shares
from secure_fed.crypto.secagg_client.phase_unmask import _consistency, _unmask
from secure_fed.crypto.secagg_client.state import _AFTER, Entropy, SiteRules, State
from secure_fed.crypto.secagg_identity import (
    SecAggIdentity,
)
from secure_fed.crypto.secagg_protocol import (
    CONSISTENCY,
    MASKED,
    SETUP,
    SHARES,
    SecAggRefused,
)


def _check_order(phase: str, request: Mapping[str, Any], state: State) -> None:
    if state.get("stage") not in _AFTER[phase]:
        raise SecAggRefused(
            f"{phase} arrived after {state.get('stage') or 'nothing'}, expected after "
            f"{' or '.join(_AFTER[phase])}"
        )
    if _round_id(request) != state["round_id"]:
        raise SecAggRefused(
            f"{phase} is for round {request.get('round_id')!r}, this client is in {state['round_id']!r}"
        )


def secagg_client_step(
    phase: str,
    request: Mapping[str, Any],
    state: Mapping[str, Any],
    vector: np.ndarray,
    *,
    identity: SecAggIdentity | None,
    entropy: Entropy = os.urandom,
    context: bytes = b"",
    fingerprint: str | None = None,
    rules: SiteRules | None = None,
) -> tuple[dict[str, Any], State]:
    """Run one SecAgg+ phase as the site `identity`; `entropy` is injectable only so tests can be
    deterministic. `rules`: what the site itself sets (its quantisation, the factor vector's sites,
    the id of the update's training round); the setup reads members and quantisation. The setup
    (which signs this site's keys) and the share distribution (which checks the peers') are
    refused without an identity: SecAgg+ never runs unauthenticated. `context` (read at the setup
    only) is signed with the keys: only neighbours that signed the same context
    are accepted. `fingerprint`, when given, is `upload_fingerprint(vector)` of a read-only
    `vector`, made by the caller once for the update's lifetime."""
    if phase != SETUP and phase not in _AFTER:
        raise SecAggRefused(f"unknown SecAgg+ phase {phase!r}")
    state = dict(state)
    rules = rules or SiteRules()
    _check_upload_id(rules.upload_id)
    if phase in (SETUP, SHARES, CONSISTENCY) and identity is None:
        raise SecAggRefused("SecAgg+ needs this site's identity: its signing key and the sites' public keys")
    if phase == SETUP:
        assert identity is not None
        return _setup(request, state, vector, identity, entropy, context, fingerprint, rules)
    _check_order(phase, request, state)
    if phase == SHARES:
        assert identity is not None
        return _shares(request, state, identity, entropy)
    if phase == MASKED:
        return _masked(request, state, vector, entropy, fingerprint, rules.upload_id)
    if phase == CONSISTENCY:
        assert identity is not None
        return _consistency(request, state, identity, rules.honest_min)
    return _unmask(request, state, identity, rules.honest_min)
