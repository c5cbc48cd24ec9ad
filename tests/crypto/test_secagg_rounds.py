import functools
import hashlib
import os
import random

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from secure_fed.crypto.secagg_identity import SecAggIdentity
from secure_fed.crypto.secagg_protocol import (
    MASKED,
    SETUP,
    SHARES,
    UNMASK,
    SecAggAbort,
    SecAggSettings,
    round_params,
)
from secure_fed.crypto.secagg_server import plan_setup
from secure_fed.crypto.transport import LocalTransport
from secure_fed.crypto.vectors import client_step, sum_vectors

DIM = 2000


def seeded_entropy(seed: int):
    gen = np.random.default_rng(seed)
    return lambda n: gen.bytes(n)


def make_inputs(n: int, dim: int = DIM, seed: int = 0, scale: float = 1.0) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(seed)
    # sparse, large node ids, as Flower assigns them
    return {int(rng.integers(1, 2**62)): rng.normal(0, scale, dim).astype(np.float32) for _ in range(n)}


def signing_key(site: str) -> Ed25519PrivateKey:
    # derived from the name, so that every test (and every rerun) sees the same sites
    return Ed25519PrivateKey.from_private_bytes(hashlib.sha256(f"test signing key|{site}".encode()).digest())


def site_name(node: int) -> str:
    return f"site-{node}"


def make_identities(nodes, run_id: str = "run-1") -> dict[int, SecAggIdentity]:
    """A provisioned site per node: each holds its own signing key and every site's public key."""
    public = {site_name(n): signing_key(site_name(n)).public_key() for n in nodes}
    return {n: SecAggIdentity(site_name(n), run_id, signing_key(site_name(n)), public) for n in nodes}


def site_step(phase, request, state, secret, *, entropy=os.urandom):
    """A `LocalTransport` step for secrets of the form (vector, identity)."""
    vector, identity = secret
    return client_step(phase, request, state, vector, identity=identity, entropy=entropy)


def with_identities(inputs, identities=None):
    identities = identities or make_identities(inputs)
    return {n: (x, identities[n]) for n, x in inputs.items()}


def run_round(inputs, settings=None, dropouts=None, round_id=1, seed=0, transport_cls=LocalTransport):
    step = functools.partial(site_step, entropy=seeded_entropy(seed))
    transport = transport_cls(with_identities(inputs), step, dropouts=dropouts or {})
    dim = len(next(iter(inputs.values())))
    result = sum_vectors(transport, list(inputs), dim, settings, round_id, rng=random.Random(seed))
    return result, transport


def expected_sum(inputs, nodes, clip=8.0):
    return np.sum([np.clip(inputs[u].astype(np.float64), -clip, clip) for u in nodes], axis=0)


def test_plain_sum():
    inputs = make_inputs(4)
    result, transport = run_round(inputs, None)
    assert np.allclose(result.total, expected_sum(inputs, inputs))
    assert result.survivors == sorted(inputs) and result.dropped == []
    assert result.quantisation_bound == 0.0 and [r.phase for r in transport.received] == ["plain_sum"] * 4


@pytest.mark.parametrize("n", [3, 5, 10])
def test_secagg_sum_matches_plain_sum_within_bound(n):
    inputs = make_inputs(n, seed=n)
    result, transport = run_round(inputs, SecAggSettings(clip=8.0, bits=24), seed=n)
    err = np.max(np.abs(result.total - expected_sum(inputs, inputs)))
    assert err <= result.quantisation_bound == n / 2**21
    assert result.survivors == sorted(inputs) and result.dropped == [] and result.clipped_fraction == 0.0
    assert not transport.errors


def test_clipped_fraction_is_reported_and_the_sum_is_of_clipped_values():
    inputs = make_inputs(5, seed=3, scale=4.0)
    settings = SecAggSettings(clip=6.0, bits=20)
    result, _ = run_round(inputs, settings)
    clipped = sum(np.count_nonzero(np.abs(v) > 6.0) for v in inputs.values())
    assert clipped > 0
    assert result.clipped_fraction == pytest.approx(clipped / (5 * DIM))
    assert np.max(np.abs(result.total - expected_sum(inputs, inputs, clip=6.0))) <= result.quantisation_bound


def tolerable(n: int) -> int:
    p = round_params(n, DIM, SecAggSettings(clip=8.0, bits=24))
    return p.degree - p.threshold


@pytest.mark.parametrize("phase", [SETUP, SHARES, MASKED, UNMASK])
@pytest.mark.parametrize("n", [5, 9, 10, 12, 20, 50])  # the rows of docs/THREAT_MODEL.md with dropouts
def test_dropouts_at_each_phase(n, phase):
    inputs = make_inputs(n, seed=n)
    gone = random.Random(phase).sample(sorted(inputs), tolerable(n))
    result, _ = run_round(inputs, SecAggSettings(clip=8.0, bits=24), dropouts={phase: gone})
    # a site that drops during unmasking has already contributed its masked vector
    contributed = sorted(inputs) if phase == UNMASK else sorted(set(inputs) - set(gone))
    assert result.survivors == contributed
    assert result.dropped == sorted(set(inputs) - set(contributed))
    err = np.max(np.abs(result.total - expected_sum(inputs, contributed)))
    assert err <= result.quantisation_bound == len(contributed) / 2**21


def test_dropouts_spread_over_phases():
    inputs = make_inputs(10, seed=4)
    a, b = sorted(inputs)[2], sorted(inputs)[7]
    result, _ = run_round(inputs, SecAggSettings(clip=8.0, bits=24), dropouts={SHARES: [a], UNMASK: [b]})
    assert a in result.dropped and b in result.survivors
    assert np.max(np.abs(result.total - expected_sum(inputs, result.survivors))) <= result.quantisation_bound


@pytest.mark.parametrize("phase", [SETUP, MASKED, UNMASK])
def test_below_threshold_aborts_without_a_result(phase):
    inputs = make_inputs(5, seed=5)
    gone = sorted(inputs)[: tolerable(5) + 1]
    with pytest.raises(SecAggAbort, match="no aggregate released"):
        run_round(inputs, SecAggSettings(clip=8.0, bits=24), dropouts={phase: gone})


def test_rounds_are_independent():
    inputs = make_inputs(5, seed=6)
    first, _ = run_round(inputs, SecAggSettings(clip=8.0, bits=24), round_id="run-a:1", seed=1)
    second, _ = run_round(inputs, SecAggSettings(clip=8.0, bits=24), round_id="run-a:2", seed=2)
    target = expected_sum(inputs, inputs)
    assert np.max(np.abs(first.total - target)) <= first.quantisation_bound
    assert np.max(np.abs(second.total - target)) <= second.quantisation_bound


def test_64_bit_ring():
    inputs = make_inputs(4, dim=300, seed=7)
    result, transport = run_round(inputs, SecAggSettings(bits=40, clip=4.0))
    masked = [r.payload["masked"] for r in transport.received if r.phase == MASKED]
    assert masked and all(m.dtype == np.uint64 for m in masked)
    assert (
        np.max(np.abs(result.total - expected_sum(inputs, inputs, clip=4.0)))
        <= result.quantisation_bound
        < 1e-10
    )


def test_default_settings_send_32_bit_words_and_report_the_finer_bound():
    inputs = make_inputs(5, scale=0.1)  # the default clip is 1
    result, transport = run_round(inputs, SecAggSettings(), seed=5)
    masked = [r.payload["masked"] for r in transport.received if r.phase == MASKED]
    assert len(masked) == 5 and all(m.dtype == np.uint32 for m in masked)
    assert result.quantisation_bound == 5 / 2**28  # 28 bits: the finest a 5-site 32-bit ring holds
    err = np.max(np.abs(result.total - expected_sum(inputs, inputs, clip=1.0)))
    assert err <= result.quantisation_bound


def test_a_survivor_silent_at_unmask_with_a_dropped_partner_ends_the_round():
    """Only a survivor and its dropped partner ever knew their pairwise key, and no share of it
    exists (sharing mask keys is what let a lying server strip a live site's masks): when the
    survivor goes silent as well, nothing is released."""
    inputs = make_inputs(10, seed=8)
    settings = SecAggSettings(clip=8.0, bits=24)
    a = sorted(inputs)[0]
    b = plan_setup(sorted(inputs), DIM, settings, 1, random.Random(0)).graph[a][0]  # run_round's graph
    with pytest.raises(SecAggAbort, match=f"node {b} did not reveal its mask with dropped node {a}"):
        run_round(inputs, settings, dropouts={MASKED: [a], UNMASK: [b]})


def test_ring_input_sums_residues_exactly_and_survives_a_dropout():
    """Distributed DP's shares are integers mod 2^m already: masked as they are, and the sum comes
    back as the exact residue sum of the survivors (wrapping mod 2^m, as the mechanism expects)."""
    from secure_fed.crypto.secagg_client import SiteRules

    m = 32
    rng = np.random.default_rng(5)
    inputs = {n: rng.integers(0, 2**m, 300, dtype=np.uint64).astype(np.uint32) for n in range(1, 6)}
    rules = SiteRules(ring_bits=m, honest_min=4)

    def step(phase, request, state, secret):
        vector, identity = secret
        return client_step(phase, request, state, vector, identity=identity, rules=rules)

    transport = LocalTransport(with_identities(inputs), step, dropouts={MASKED: [5]})
    settings = SecAggSettings(clip=8.0, bits=24, ring_bits=m)
    result = sum_vectors(transport, list(inputs), 300, settings, 1, rng=random.Random(0))
    expected = np.sum([inputs[u].astype(np.uint64) for u in (1, 2, 3, 4)], axis=0) % 2**m
    assert result.survivors == [1, 2, 3, 4] and result.dropped == [5]
    np.testing.assert_array_equal(result.total, expected)
    # a site whose rules expect ring input refuses a server that would quantise it, and the reverse
    wrong = SecAggSettings(clip=8.0, bits=24)
    with pytest.raises(SecAggAbort):
        sum_vectors(LocalTransport(with_identities(inputs), step), list(inputs), 300, wrong, 2)
