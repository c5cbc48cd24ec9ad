"""Parties that hold the CKKS secret context and look at one site's α ciphertext.

Every hospital holds the secret context (scalars.py), so the round's decryptor, who is handed every
participant's ciphertext to check the aggregate, and any site the server colludes with, can decrypt
any single ciphertext they are shown. Before the pairwise masks (scalar_masks.py) a site encrypted
its DP-noised scalars as they were: one `decrypt_vector` of its ciphertext gave them back to within
CKKS noise (~1e-8). These tests decrypt exactly what such a party holds in an honest round and
check that it is masked, while the released sum is still right.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tenseal as ts

from secure_fed.crypto import ckks, scalar_masks, scalars
from secure_fed.crypto.scalars import DECRYPT_PHASE, ENCRYPT_PHASE, KEYS_PHASE, HESettings, client_step
from secure_fed.crypto.secagg_identity import SecAggIdentity, load_identity
from secure_fed.crypto.transport import LocalTransport
from tests.crypto.he_kit import he_fixtures

T = 8
RUN = "run-curious"
NAMES = ["site0", "site1", "site2", "site3", "site4"]
# far above CKKS noise (~1e-8) and DP-noised α scalars (O(1)); a mask coordinate is uniform on
# ±2^bits (2^21 for three participants), so one lands within 1e3 of zero with probability ~5e-4,
# and all T = 8 of a vector with probability ~1e-26
MASKED = 1e3


@dataclass(frozen=True)
class _Site:
    node: int
    values: np.ndarray
    identity: SecAggIdentity
    ctx: ts.Context


@dataclass
class _Recorder:
    """What every party was sent and kept: the requests by phase and node, and each site's state
    after `he_keys` (where its mask secret lives until it encrypts)."""

    round_id: int
    requests: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    keyed_states: dict[int, dict[str, Any]] = field(default_factory=dict)

    def step(
        self, phase: str, request: dict[str, Any], state: dict[str, Any], site: _Site
    ) -> tuple[dict, dict]:
        self.requests[(phase, site.node)] = request
        reply, new_state = client_step(phase, request, state, site.values, site.ctx, site.identity)
        if phase == KEYS_PHASE:
            self.keyed_states[site.node] = new_state
        return reply, new_state


keydir, secret, settings = he_fixtures(NAMES)


def _honest_round(
    n: int, keydir: Path, secret: ts.Context, settings: HESettings, round_id: int, seed: int
) -> tuple[dict[int, _Site], _Recorder, LocalTransport, np.ndarray]:
    rng = np.random.default_rng(seed)
    sites = {
        10 + i: _Site(10 + i, rng.normal(scale=2.0, size=T), load_identity(keydir, NAMES[i], RUN), secret)
        for i in range(n)
    }
    recorder = _Recorder(round_id)
    transport = LocalTransport(sites, recorder.step)
    total = scalars.sum_scalars(transport, list(sites), round_id, settings)
    assert not transport.errors
    return sites, recorder, transport, total


def _wire(transport: LocalTransport, phase: str) -> Mapping[int, dict[str, Any]]:
    return {r.node: r.payload for r in transport.received if r.phase == phase}


@pytest.mark.parametrize("n", [3, 5])
def test_curious_decryptor_decrypts_every_ciphertext_to_noise(
    n: int, keydir: Path, secret: ts.Context, settings: HESettings
) -> None:
    """The decryptor's view: every participant's ciphertext (its decrypt request) and the secret
    context. Old protocol: `decrypt_vector(ctx, ciphertexts[i])` was site i's scalars to ~1e-8,
    so this test's `> MASKED` assertions failed for every site. Now each one is off by the sum of
    that site's n − 1 pair masks; only the aggregate decrypts to something meaningful."""
    round_id = 2
    sites, recorder, _, total = _honest_round(n, keydir, secret, settings, round_id, seed=n)
    decryptor = scalars.decryptor_for(list(sites), round_id)
    request = recorder.requests[(DECRYPT_PHASE, decryptor)]
    assert sorted(request["participants"]) == sorted(sites)

    bound = (n - 1) * 2.0 ** scalar_masks.mask_bits(n)
    for node, ciphertext in zip(request["participants"], request["ciphertexts"], strict=True):
        seen = ckks.decrypt_vector(secret, ciphertext)[:T]
        off = np.abs(seen - sites[node].values)
        assert off.max() > MASKED, f"node {node}'s ciphertext decrypts to its scalars"
        assert np.abs(seen).max() <= bound + 10.0  # masks stay in the range the exactness needs
    # the complement, aggregate − one ciphertext, is the others' masked values: noise as well
    first = request["participants"][0]
    rest = (
        ckks.decrypt_vector(secret, request["aggregate"])[:T]
        - ckks.decrypt_vector(secret, request["ciphertexts"][0])[:T]
    )
    others = np.sum([s.values for k, s in sites.items() if k != first], axis=0)
    assert np.abs(rest - others).max() > MASKED

    # and the sum is right: masks cancel in it, and only there
    exact = np.sum([s.values for s in sites.values()], axis=0)
    np.testing.assert_allclose(total, exact, atol=1e-6, rtol=0)
    np.testing.assert_allclose(ckks.decrypt_vector(secret, request["aggregate"])[:T], exact, atol=1e-6)


def test_a_site_that_is_not_the_decryptor_is_sent_no_ciphertext(
    keydir: Path, secret: ts.Context, settings: HESettings
) -> None:
    """Any single other site, honest server: it holds the secret context, but all it is sent in a
    round is the round id, its node id, the decryptor's id, the key id and the participants'
    signed 32-byte mask keys; nobody's ciphertext, so nothing to decrypt. (The same held before:
    only the decryptor was sent ciphertexts.)"""
    round_id = 3
    sites, recorder, _, _ = _honest_round(5, keydir, secret, settings, round_id, seed=5)
    decryptor = scalars.decryptor_for(list(sites), round_id)
    for (phase, node), request in recorder.requests.items():
        if node == decryptor and phase == DECRYPT_PHASE:
            continue
        blobs = [v for v in request.values() if isinstance(v, bytes)]
        blobs += [b for v in request.values() if isinstance(v, list) for b in v if isinstance(b, bytes)]
        assert all(len(b) <= 64 for b in blobs), (phase, node, sorted(request))
    assert {p for p, n in recorder.requests if n != decryptor} == {KEYS_PHASE, ENCRYPT_PHASE}


def _pair_mask(
    recorder: _Recorder, keyed: Mapping[int, dict[str, Any]], me: int, peer: int, n: int
) -> np.ndarray:
    """The mask `me` shares with `peer`, as `me` computes it from its own mask secret."""
    secret = recorder.keyed_states[me]["he_mask_secret"]
    key = scalar_masks.pair_key(secret, keyed[peer]["mask_pk"], f"{RUN}|{recorder.round_id}".encode())
    return scalar_masks.pair_mask(key, T, scalar_masks.mask_bits(n))


def _signed(names: Mapping[int, str], me: int, peer: int) -> float:
    """+1 where `me` adds the pair mask (its name sorts first), −1 where it subtracts it."""
    return 1.0 if names[me] < names[peer] else -1.0


def test_server_with_one_colluding_site_learns_only_a_pair_sum(
    keydir: Path, secret: ts.Context, settings: HESettings
) -> None:
    """Server + colluding site C against victim V, with one honest site H (three participants).

    The coalition holds: the secret context (C is a hospital), C's mask secret of the round (C keeps
    it instead of dropping it), every signed mask key and every ciphertext (the server relays them),
    and the released sum. Its best attack on V: decrypt V's ciphertext and take off the mask V
    shares with C. Old protocol: the first step alone gave V's scalars (no masks), so the
    `> MASKED` assertion failed. Now what is left is off by ±m_VH, the mask V shares with H, which
    the coalition cannot compute; doing the same to H's ciphertext and adding gives v + h, which
    sum − c gave them anyway: the coalition learns the honest sites' sum and nothing finer.
    """
    round_id = 5
    sites, recorder, transport, total = _honest_round(3, keydir, secret, settings, round_id, seed=11)
    victim, colluder, honest = sorted(sites)
    names = {n: s.identity.site for n, s in sites.items()}
    keyed = _wire(transport, KEYS_PHASE)
    cts = {n: p["ciphertext"] for n, p in _wire(transport, ENCRYPT_PHASE).items()}

    def strip_colluder(node: int) -> np.ndarray:
        seen = ckks.decrypt_vector(secret, cts[node])[:T]
        return seen - _signed(names, node, colluder) * _pair_mask(recorder, keyed, colluder, node, 3)

    guess_v = strip_colluder(victim)
    v, h, c = (sites[n].values for n in (victim, honest, colluder))
    assert np.abs(guess_v - v).max() > MASKED, "the coalition recovered the victim's scalars"
    # exactly the honest pair's mask is missing (the test knows H's secret; the coalition does not)
    m_vh = _signed(names, victim, honest) * _pair_mask(recorder, keyed, honest, victim, 3)
    np.testing.assert_allclose(guess_v - v, m_vh, atol=1e-6, rtol=0)
    # all the coalition can get out of the honest pair: their sum, which the release already gives
    guess_h = strip_colluder(honest)
    np.testing.assert_allclose(guess_v + guess_h, v + h, atol=1e-6, rtol=0)
    np.testing.assert_allclose(total - c, v + h, atol=1e-6, rtol=0)


def test_min_participants_bounds_what_a_coalition_can_shrink_the_sum_to(
    keydir: Path, secret: ts.Context, settings: HESettings
) -> None:
    """The limit of the masks: a server can say every honest site but V dropped at `he_keys`
    (dropping there is allowed), so that V sums with colluders only; then sum − Σ colluders = v.
    What stops it is the smallest sum a site takes part in (`min_participants`, fed.min_sites at a
    site): with it at m, the server needs m − 1 colluding sites. At the default of 2 one colluder
    suffices; this test shows both sides of that line."""
    rng = np.random.default_rng(3)
    ids = [20, 21, 22]
    victim, colluder, honest = ids
    v = rng.normal(size=T)
    identities = {n: load_identity(keydir, NAMES[i], RUN) for i, n in enumerate(ids)}

    def site(node: int, minimum: int) -> tuple[_Site, int]:
        return _Site(node, v if node == victim else rng.normal(size=T), identities[node], secret), minimum

    def step(
        phase: str, request: dict[str, Any], state: dict[str, Any], inp: tuple[_Site, int]
    ) -> tuple[dict, dict]:
        s, minimum = inp
        return client_step(phase, request, state, s.values, s.ctx, s.identity, minimum)

    for minimum in (2, 3):
        inputs = {n: site(n, minimum) for n in ids}
        transport = LocalTransport(inputs, step, dropouts={KEYS_PHASE: [honest]})  # "H dropped"
        lenient = HESettings(settings.public_context, settings.key_id, min_participants=2)
        if minimum == 2:
            total = scalars.sum_scalars(transport, ids, 1, lenient)
            np.testing.assert_allclose(total - inputs[colluder][0].values, v, atol=1e-6)
        else:
            with pytest.raises(scalars.ScalarAggregationError, match="sums with at least 3"):
                scalars.sum_scalars(transport, ids, 1, lenient)
            assert not any("ciphertext" in r.payload for r in transport.received)
