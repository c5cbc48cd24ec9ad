import functools
import random

import numpy as np
import pytest
from scipy import stats

from secure_fed.crypto import secagg_channel as channel
from secure_fed.crypto.quantize import from_ring, stochastic_quantise, to_ring
from secure_fed.crypto.secagg_client import phase_masked
from secure_fed.crypto.secagg_identity import key_statement
from secure_fed.crypto.secagg_protocol import (
    MASKED,
    SETUP,
    SHARES,
    UNMASK,
    SecAggAbort,
    SecAggRefused,
    SecAggSettings,
    ShareRejected,
    round_params,
)
from secure_fed.crypto.transport import LocalTransport, decode_payload
from secure_fed.crypto.vectors import client_step, sum_vectors
from tests.crypto.test_secagg_rounds import (
    expected_sum,
    make_identities,
    make_inputs,
    run_round,
    seeded_entropy,
    site_step,
    with_identities,
)

DIM = 20_000


def uniformity_p(words: np.ndarray, m: int) -> float:
    """Chi-square p-value that the top 6 bits of ring elements are uniform."""
    counts = np.bincount((words.astype(np.uint64) >> np.uint64(m - 6)).astype(np.int64), minlength=64)
    return float(stats.chisquare(counts).pvalue)


def max_abs_corr(words: np.ndarray, m: int, inputs: dict[int, np.ndarray]) -> float:
    views = [words.astype(np.float64), from_ring(words, m).astype(np.float64)]
    return max(abs(np.corrcoef(v[: len(x)], x)[0, 1]) for v in views for x in inputs.values())


def server_arrays(transport: LocalTransport):
    return [
        (r.phase, r.node, v)
        for r in transport.received
        for v in r.payload.values()
        if isinstance(v, np.ndarray)
    ]


def test_detectors_fire_on_unmasked_encodings():
    # the checks below are only meaningful if they catch a vector that is merely quantised
    inputs = make_inputs(3, dim=DIM, seed=11)
    m = round_params(3, DIM, SecAggSettings(clip=8.0, bits=24)).modulus_bits
    for x in inputs.values():
        q = to_ring(stochastic_quantise(x, 8.0, 24, np.random.default_rng(0))[0], m)
        assert uniformity_p(q, m) < 1e-6
        assert max_abs_corr(q, m, inputs) > 0.9


def test_server_sees_only_uniform_uncorrelated_masked_vectors():
    inputs = make_inputs(5, dim=DIM, seed=12)
    result, transport = run_round(inputs, SecAggSettings(clip=8.0, bits=24), seed=12)
    m = round_params(5, DIM, SecAggSettings(clip=8.0, bits=24)).modulus_bits
    arrays = server_arrays(transport)
    assert sorted(node for _, node, _ in arrays) == sorted(inputs)  # one array per site ...
    for phase, _, words in arrays:
        assert phase == MASKED and words.dtype == np.uint32  # ... all masked ring elements
        assert int(words.max()) < 2**m
        assert uniformity_p(words, m) > 1e-4
        assert stats.kstest(words / 2**m, "uniform").pvalue > 1e-4
        assert max_abs_corr(words, m, inputs) < 0.1
    assert np.max(np.abs(result.total - expected_sum(inputs, inputs))) <= result.quantisation_bound


def test_detectors_fire_when_masking_is_removed(monkeypatch):
    monkeypatch.setattr(phase_masked, "add_masks", lambda acc, masks: None)
    inputs = make_inputs(5, dim=DIM, seed=12)
    _, transport = run_round(inputs, SecAggSettings(clip=8.0, bits=24), seed=12)
    m = round_params(5, DIM, SecAggSettings(clip=8.0, bits=24)).modulus_bits
    for _, _, words in server_arrays(transport):
        assert uniformity_p(words, m) < 1e-6 and max_abs_corr(words, m, inputs) > 0.9


def test_server_never_receives_secret_keys_or_plain_floats():
    inputs = make_inputs(5, dim=500, seed=13)
    _, transport = run_round(inputs, SecAggSettings(clip=8.0, bits=24), seed=13)
    received_bytes = {
        v
        for r in transport.received
        for vals in r.payload.values()
        for v in (vals if isinstance(vals, list) else [vals])
        if isinstance(v, bytes)
    }
    for state in transport.states.values():
        kept = decode_payload(state)
        secrets = {"enc_sk", "mask_sk", "seed", "peer_channel_key", "pair_keys", "held_seed"}
        assert not secrets & set(kept), sorted(kept)
    for x in inputs.values():
        assert not any(x.tobytes()[:64] in b for b in received_bytes)
    assert not any(v.dtype.kind == "f" for _, _, v in server_arrays(transport))


class Tamper(LocalTransport):
    """Rewrites the share ciphertexts the server routes in the masked phase."""

    edit = None

    def exchange(self, phase, requests):
        if phase == MASKED and self.edit:
            requests = {v: dict(r, share_ct=list(r["share_ct"])) for v, r in requests.items()}
            self.edit(requests)
        return super().exchange(phase, requests)


def _victim_and_sender(requests):
    victim = sorted(requests)[0]
    return victim, requests[victim]["share_from"][0]


def test_tampered_share_is_rejected_and_the_victim_drops(monkeypatch):
    def flip(requests):
        victim, _ = _victim_and_sender(requests)
        ct = bytearray(requests[victim]["share_ct"][0])
        ct[20] ^= 0x01
        requests[victim]["share_ct"][0] = bytes(ct)

    monkeypatch.setattr(Tamper, "edit", staticmethod(flip))
    inputs = make_inputs(10, seed=14)
    result, transport = run_round(inputs, SecAggSettings(clip=8.0, bits=24), transport_cls=Tamper)
    victim = sorted(inputs)[0]
    assert isinstance(transport.errors[victim], ShareRejected)
    assert victim in result.dropped
    assert np.max(np.abs(result.total - expected_sum(inputs, result.survivors))) <= result.quantisation_bound


def test_share_from_another_sender_is_rejected(monkeypatch):
    def swap(requests):
        victim, _ = _victim_and_sender(requests)
        cts = requests[victim]["share_ct"]
        cts[0], cts[1] = cts[1], cts[0]

    monkeypatch.setattr(Tamper, "edit", staticmethod(swap))
    inputs = make_inputs(10, seed=15)
    _, transport = run_round(inputs, SecAggSettings(clip=8.0, bits=24), transport_cls=Tamper)
    assert isinstance(transport.errors[sorted(inputs)[0]], ShareRejected)


def halted_before(phase, inputs, seed=0, round_id=1):
    """Run a round in which every site drops at `phase`; return the transport (client states inside)."""
    step = functools.partial(site_step, entropy=seeded_entropy(seed))
    transport = LocalTransport(with_identities(inputs), step, dropouts={phase: list(inputs)})
    with pytest.raises(SecAggAbort):
        sum_vectors(
            transport,
            list(inputs),
            2000,
            SecAggSettings(clip=8.0, bits=24),
            round_id,
            rng=random.Random(seed),
        )
    return transport


def inbox(transport, recipient):
    mail = [
        (r.node, ct)
        for r in transport.received
        if r.phase == SHARES
        for to, ct in zip(r.payload["share_to"], r.payload["share_ct"], strict=True)
        if to == recipient
    ]
    return {"share_from": [u for u, _ in mail], "share_ct": [ct for _, ct in mail]}


def test_reflected_share_is_rejected_by_the_associated_data():
    # u's share for v is sealed under the key u and v share; handing it back to u as if v had sent
    # it uses the right key, so only the (sender, recipient) binding can catch it
    inputs = make_inputs(5, seed=16)
    ids = make_identities(inputs)
    transport = halted_before(MASKED, inputs)
    u = sorted(inputs)[0]
    sent = next(r.payload for r in transport.received if r.phase == SHARES and r.node == u)
    v = sent["share_to"][0]
    state_u = decode_payload(transport.states[u])
    reflected = {"round_id": 1, "share_from": [v], "share_ct": [sent["share_ct"][0]]}
    with pytest.raises(ShareRejected, match="authentication"):
        client_step(MASKED, reflected, state_u, inputs[u], identity=ids[u])
    # the same ciphertext delivered as routed is accepted
    reply, _ = client_step(
        MASKED,
        {"round_id": 1, **inbox(transport, v)},
        decode_payload(transport.states[v]),
        inputs[v],
        identity=ids[v],
    )
    assert reply["masked"].shape == (2001,)


def test_share_replayed_from_another_round_is_rejected():
    # same entropy, so both rounds use the same keys: only the round binding tells them apart
    inputs = make_inputs(5, seed=17)
    old = halted_before(MASKED, inputs, seed=3, round_id=1)
    new = halted_before(MASKED, inputs, seed=3, round_id=2)
    v = sorted(inputs)[1]
    identity = make_identities(inputs)[v]
    state = decode_payload(new.states[v])
    with pytest.raises(ShareRejected, match="authentication"):
        client_step(MASKED, {"round_id": 2, **inbox(old, v)}, state, inputs[v], identity=identity)
    reply, _ = client_step(MASKED, {"round_id": 2, **inbox(new, v)}, state, inputs[v], identity=identity)
    assert "masked" in reply


def unmask_request(survived, dropped, round_id=1):
    return {"round_id": round_id, "survived": survived, "dropped": dropped}


def test_client_reveals_one_kind_of_secret_per_node_and_answers_unmask_once():
    inputs = make_inputs(5, seed=18)
    u = sorted(inputs)[0]
    identity = make_identities(inputs)[u]
    transport = halted_before(UNMASK, inputs)
    state = decode_payload(transport.states[u])
    held = state["partners"]
    with pytest.raises(SecAggRefused, match="both survived and dropped"):
        client_step(UNMASK, unmask_request(held, held[:1]), state, inputs[u], identity=identity)
    reply, after = client_step(
        UNMASK, unmask_request(held[1:], held[:1]), state, inputs[u], identity=identity
    )
    assert reply["seed_of"] == held[1:] and reply["key_of"] == held[:1]
    assert len(reply["seed_shares"]) == 3 and [len(k) for k in reply["pair_keys"]] == [32]
    assert not {"held_seed", "pair_keys"} & set(after)
    with pytest.raises(SecAggRefused):  # asking again, with the roles swapped, gets nothing
        client_step(UNMASK, unmask_request(held[:1], held[1:]), after, inputs[u], identity=identity)


def test_client_keeps_its_own_masks_while_fewer_than_a_threshold_of_partners_survive():
    """Told that all but threshold - 1 of its partners dropped, a site would reveal its pairwise
    keys with all the others; with its self mask opened as well, its input would be bare."""
    inputs = make_inputs(5, seed=19)
    u = sorted(inputs)[0]
    identity = make_identities(inputs)[u]
    transport = halted_before(UNMASK, inputs)
    state = decode_payload(transport.states[u])
    held = state["partners"]
    with pytest.raises(SecAggRefused, match="only 2 of this node's partners"):
        client_step(UNMASK, unmask_request(held[2:], held[:2]), state, inputs[u], identity=identity)
    with pytest.raises(SecAggRefused, match="each node this client masked with"):  # every partner counts
        client_step(UNMASK, unmask_request(held[1:], []), state, inputs[u], identity=identity)


def _setup_request(**overrides):
    base = {
        "round_id": 1,
        "node_id": 1,
        "neighbours": [2, 3, 4, 5],
        "threshold": 3,
        "num_nodes": 6,
        "dim": 10,
        "bits": 24,
        "clip": 8.0,
        "modulus_bits": 29,
    }
    return {**base, **overrides}


# node 1 of `_setup_request`'s graph and its neighbours, each a provisioned site
IDS = make_identities([1, 2, 3, 4, 5, 6])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"threshold": 2}, "unsafe"),
        ({"threshold": 5}, "unsafe"),
        ({"neighbours": [2, 3, 4], "threshold": 2}, "unsafe"),  # 2t > k, yet one colluder would do
        ({"neighbours": [1, 2, 3]}, "not valid"),
        ({"dim": 11}, "expects a 11-vector"),
        ({"modulus_bits": 20}, "could wrap"),
        ({"neighbours": "2,3"}, "list of ints"),
    ],
)
def test_client_refuses_unsafe_setup(overrides, message):
    with pytest.raises(SecAggRefused, match=message):
        client_step(SETUP, _setup_request(**overrides), {}, np.zeros(10), identity=IDS[1])


def test_client_refuses_to_advertise_or_accept_keys_without_an_identity():
    for phase in (SETUP, SHARES):
        with pytest.raises(SecAggRefused, match="identity"):
            client_step(phase, _setup_request(), {}, np.zeros(10))

    # an identity that cannot be loaded is refused the same way, and only where it is needed
    def missing():
        raise SecAggRefused("SecAgg+ needs this site's keys: KEYS/signing/site-1.pem not found")

    with pytest.raises(SecAggRefused, match="site-1.pem"):
        client_step(SETUP, _setup_request(), {}, np.zeros(10), identity=missing)
    _, state = client_step(SETUP, _setup_request(), {}, np.zeros(10), identity=IDS[1])
    with pytest.raises(SecAggRefused, match="expected after secagg_shares"):  # not the identity
        client_step(
            MASKED, {"round_id": 1, "share_from": [], "share_ct": []}, state, np.zeros(10), identity=missing
        )


def test_setup_reply_is_signed_for_this_node_round_and_run():
    reply, _ = client_step(SETUP, _setup_request(), {}, np.zeros(10), identity=IDS[1])
    assert reply["site"] == "site-1" and len(reply["key_sig"]) == 64
    signed = key_statement("run-1", 1, 1, "site-1", reply["enc_pk"], reply["mask_pk"])
    IDS[2].peer_public_keys["site-1"].verify(reply["key_sig"], signed)
    assert IDS[2].signed_by("site-1", reply["key_sig"], signed)
    for other in (
        key_statement("run-2", 1, 1, "site-1", reply["enc_pk"], reply["mask_pk"]),
        key_statement("run-1", 2, 1, "site-1", reply["enc_pk"], reply["mask_pk"]),
        key_statement("run-1", "1", 1, "site-1", reply["enc_pk"], reply["mask_pk"]),
        key_statement("run-1", 1, 7, "site-1", reply["enc_pk"], reply["mask_pk"]),
        key_statement("run-1", 1, 1, "site-1", reply["mask_pk"], reply["enc_pk"]),
    ):
        assert not IDS[2].signed_by("site-1", reply["key_sig"], other)
    assert not IDS[1].signed_by("site-1", reply["key_sig"], signed)  # a site never vouches for itself


def test_client_refuses_out_of_order_and_foreign_round():
    _, state = client_step(SETUP, _setup_request(), {}, np.zeros(10), identity=IDS[1])
    with pytest.raises(SecAggRefused, match="expected after"):
        client_step(
            MASKED, {"round_id": 1, "share_from": [], "share_ct": []}, state, np.zeros(10), identity=IDS[1]
        )
    with pytest.raises(SecAggRefused, match="round 2"):
        client_step(SHARES, signed_keys(2, [], []), state, np.zeros(10), identity=IDS[1])
    with pytest.raises(SecAggRefused, match="unknown"):
        client_step("secagg_bogus", {"round_id": 1}, state, np.zeros(10), identity=IDS[1])


def signed_keys(round_id, peers, keys, run_id="run-1"):
    """A share-distribution request relaying `keys[i]` = (enc_pk, mask_pk) for `peers[i]`, each
    signed by that peer's own site, as an honest server relays them."""
    return {
        "round_id": round_id,
        "peers": peers,
        "peer_enc_pk": [enc for enc, _ in keys],
        "peer_mask_pk": [mask for _, mask in keys],
        "peer_site": [IDS[p].site for p in peers],
        "peer_key_sig": [
            IDS[p].sign(key_statement(run_id, round_id, p, IDS[p].site, enc, mask))
            for p, (enc, mask) in zip(peers, keys, strict=True)
        ],
    }


def test_client_names_the_peer_whose_public_key_is_a_low_order_point():
    """An all-zero X25519 key gives no shared secret; the refusal says whose key it was."""
    _, state = client_step(SETUP, _setup_request(), {}, np.zeros(10), identity=IDS[1])
    good = [channel.new_keypair(seeded_entropy(i))[1] for i in range(6)]
    request = signed_keys(1, [2, 3, 4], [(good[0], good[2]), (bytes(32), good[3]), (good[1], good[4])])
    with pytest.raises(SecAggRefused, match="public key of node 3 is invalid"):
        client_step(SHARES, request, state, np.zeros(10), identity=IDS[1])
