import json
import random
import struct

import numpy as np
import pytest
from cryptography.exceptions import InvalidTag

from secure_fed.config import SecAggConfig
from secure_fed.crypto import secagg_channel as channel
from secure_fed.crypto import secagg_shamir as shamir
from secure_fed.crypto.masking import add_masks, keystream_words
from secure_fed.crypto.secagg_client import upload_fingerprint
from secure_fed.crypto.secagg_graph import neighbour_graph
from secure_fed.crypto.secagg_protocol import (
    SecAggAbort,
    SecAggSettings,
    collusion_safe_threshold,
    default_degree,
    round_params,
    share_associated_data,
    word_bits,
)
from secure_fed.crypto.secagg_shamir import combine_secret, split_secret
from secure_fed.crypto.transport import LocalTransport, decode_payload, encode_payload

urandom = random.Random(0).randbytes


@pytest.mark.parametrize(("n", "k"), [(3, 2), (5, 4), (10, 7), (11, 8), (30, 9), (12, 5)])
def test_graph_is_regular_symmetric_and_connected(n, k):
    nodes = [1000 + 7 * i for i in range(n)]
    graph = neighbour_graph(nodes, k, random.Random(n))
    assert set(graph) == set(nodes)
    for u, peers in graph.items():
        assert len(peers) == k and u not in peers
        assert all(u in graph[v] for v in peers)
    seen, todo = {nodes[0]}, [nodes[0]]
    while todo:
        for v in graph[todo.pop()]:
            if v not in seen:
                seen.add(v)
                todo.append(v)
    assert seen == set(nodes)


def test_graph_rejects_impossible_degree():
    with pytest.raises(ValueError):
        neighbour_graph([1, 2, 3, 4, 5], 3, random.Random(0))  # 5 * 3 is odd


def test_round_parameters():
    assert [default_degree(n) for n in (3, 5, 10, 20, 100)] == [2, 4, 7, 9, 14]
    p = round_params(10, 1000, SecAggSettings(clip=8.0, bits=24))
    assert (p.degree, p.threshold) == (7, 5)
    assert 2 * p.threshold >= p.degree + 2
    assert round_params(11, 10, SecAggSettings(neighbours=3)).degree == 4  # 11 * 3 is odd
    assert round_params(5, 10, SecAggSettings(neighbours=50)).degree == 4
    with pytest.raises(SecAggAbort, match="at least 3"):
        round_params(2, 10, SecAggSettings(clip=8.0, bits=24))


def test_default_resolution_fills_a_32_bit_word():
    """bits=None: the finest quantum whose K-site sum (and clipped count) cannot wrap a 32-bit ring."""
    assert [word_bits(k, 10**6) for k in (3, 5, 10, 16, 17)] == [29, 28, 27, 26, 26]
    for k in (3, 5, 10, 16, 100):
        p = round_params(k, 10**6, SecAggSettings())
        assert p.bits == word_bits(k, 10**6) and p.modulus_bits <= 32
        # one more bit would need a wider ring: the choice is the finest that fits
        assert round_params(k, 10**6, SecAggSettings(bits=p.bits + 1)).modulus_bits > 32
    assert word_bits(2**20, 10) == 30 and round_params(2**20, 10, SecAggSettings()).modulus_bits > 32
    assert round_params(5, 10, SecAggSettings(bits=30)).bits == 30  # an explicit choice stands
    assert SecAggSettings() == SecAggSettings.from_config(SecAggConfig())  # one set of defaults


def test_threshold_leaves_a_server_with_one_colluder_a_mask_short():
    """2t >= k + 2 (secagg_protocol.collusion_safe_threshold); the configured fraction only raises it."""
    assert [collusion_safe_threshold(k) for k in range(2, 10)] == [2, 3, 3, 4, 4, 5, 5, 6]
    for k in range(2, 30):
        t = round_params(k + 1, 10, SecAggSettings(neighbours=k)).threshold
        assert 2 * t >= k + 2 and t <= k
    # complete graphs at 4 and 6 sites: 0.6 of 3 or 5 neighbours would be 2 or 3, one short
    assert round_params(4, 10, SecAggSettings()).threshold == 3
    assert round_params(6, 10, SecAggSettings()).threshold == 4
    assert round_params(5, 10, SecAggSettings(threshold=1.0)).threshold == 4


def test_settings_validation_and_config():
    with pytest.raises(ValueError):
        SecAggSettings(threshold=0.5)
    with pytest.raises(ValueError):
        SecAggSettings(bits=41)
    cfg = SecAggConfig(neighbours=4, threshold=0.75, clip=2.0, bits=20)
    assert SecAggSettings.from_config(cfg) == SecAggSettings(neighbours=4, threshold=0.75, clip=2.0, bits=20)


def test_shamir_threshold():
    secret = bytes(range(16))
    shares = split_secret(secret, 3, 5)
    with pytest.raises(ValueError, match="16 bytes"):
        split_secret(bytes(32), 3, 5)
    assert combine_secret(shares[2:], 3) == secret
    assert combine_secret([shares[4], shares[0], shares[0], shares[2]], 3) == secret
    with pytest.raises(ValueError, match="3 needed"):
        combine_secret(shares[:2] + [shares[0]], 3)
    # two shares of a threshold-3 sharing interpolate to something else
    assert combine_secret(shares[:2], 2) != secret


def test_shamir_x_coordinates_are_32_bit():
    # the one-pass reduction of a product by a public x holds for x < 2^32 (a share's 4-byte x)
    with pytest.raises(ValueError, match="32-bit"):
        shamir._mul_public(1, 1 << 32)


@pytest.mark.parametrize(("threshold", "count"), [(2, 2), (3, 4), (5, 7), (9, 16)])
def test_shamir_matches_pycryptodome_both_ways(threshold, count):
    # secagg_shamir writes GF(2^128) out by hand for speed; it must stay pycryptodome's field,
    # element encoding and polynomial, so shares from either side combine on the other
    from Crypto.Protocol.SecretSharing import Shamir, _Element

    rng = random.Random(threshold * 100 + count)
    for _ in range(20):
        a, b = rng.getrandbits(128), rng.getrandbits(128)
        x = rng.randrange(1, 1 << 32)
        assert shamir._mul(a, b) == int(_Element(a) * _Element(b))
        assert shamir._mul_public(a, x) == int(_Element(a) * _Element(x))
        assert shamir._mul_public(a, (1 << 32) - 1) == int(_Element(a) * _Element((1 << 32) - 1))
        if a:
            assert shamir._inverse(a) == int(_Element(a).inverse())
    secret = rng.randbytes(16)
    ours = split_secret(secret, threshold, count)
    theirs = [x.to_bytes(4, "little") + y for x, y in Shamir.split(threshold, count, secret)]
    for _ in range(5):
        picked = rng.sample(range(count), threshold)
        assert combine_secret([theirs[i] for i in picked], threshold) == secret
        assert (
            Shamir.combine([(int.from_bytes(ours[i][:4], "little"), ours[i][4:]) for i in picked]) == secret
        )
    if threshold > 2:  # fewer shares than the threshold interpolate to something else
        assert combine_secret(ours[: threshold - 1], threshold - 1) != secret


def test_channel_keys_agree_and_bind_the_associated_data():
    a_sk, a_pk = channel.new_keypair(urandom)
    b_sk, b_pk = channel.new_keypair(urandom)
    key = channel.channel_key(a_sk, b_pk)
    assert key == channel.channel_key(b_sk, a_pk)
    ad = share_associated_data(7, 1, 2)
    sealed = channel.seal(key, ad, b"share", urandom)
    assert channel.open_sealed(key, ad, sealed) == b"share"
    for other in (
        share_associated_data(8, 1, 2),
        share_associated_data(7, 2, 1),
        share_associated_data(7, 1, 3),
    ):
        with pytest.raises(InvalidTag):
            channel.open_sealed(key, other, sealed)
    flipped = bytearray(sealed)
    flipped[-1] ^= 1
    with pytest.raises(InvalidTag):
        channel.open_sealed(key, ad, bytes(flipped))


def test_pairwise_mask_keys_agree_per_round_only():
    a_sk, a_pk = channel.new_keypair(urandom)
    b_sk, b_pk = channel.new_keypair(urandom)
    assert channel.pairwise_mask_key(a_sk, b_pk, 1) == channel.pairwise_mask_key(b_sk, a_pk, 1)
    assert channel.pairwise_mask_key(a_sk, b_pk, 1) != channel.pairwise_mask_key(a_sk, b_pk, 2)
    assert channel.pairwise_mask_key(a_sk, b_pk, 1) != channel.channel_key(a_sk, b_pk)


def test_masks_cancel_and_are_keyed_by_all_32_bytes():
    key, other = bytes(32), bytes(31) + b"\x01"
    acc = np.arange(1000, dtype=np.uint32)
    add_masks(acc, [(key, +1), (other, -1)])
    assert not np.array_equal(acc, np.arange(1000))
    add_masks(acc, [(other, +1), (key, -1)])
    assert np.array_equal(acc, np.arange(1000))
    # keys differing only in the last byte give unrelated streams (no 32-bit folding of the key)
    assert np.mean(keystream_words(key, 1000, np.uint64) == keystream_words(other, 1000, np.uint64)) == 0


def test_codec_round_trip_and_type_contract():
    payload = {
        "a": np.arange(6, dtype=np.uint32).reshape(2, 3),
        "b": [b"\x00\x01", b""],
        "i": [1, -(2**63)],
        "f": 0.5,
        "s": "x",
        "t": True,
        "n": 3,
    }
    back = decode_payload(encode_payload(payload))
    assert np.array_equal(back["a"], payload["a"]) and back["a"].dtype == np.uint32
    assert {k: v for k, v in back.items() if k != "a"} == {k: v for k, v in payload.items() if k != "a"}
    assert type(back["t"]) is bool and type(back["n"]) is int
    for bad in (
        {"d": {"x": 1}},
        {"l": [[1]]},
        {"np": np.int64(3)},
        {"o": np.array([None])},
        {"l": [np.zeros(2)]},
    ):
        with pytest.raises(TypeError):
            encode_payload(bad)


def test_codec_homogeneous_lists_travel_as_one_entry_and_keep_types():
    shares = [bytes([i]) * 20 for i in range(49)]
    payload = {
        "shares": shares,
        "ids": [3, 1, 2**40],
        "mixed": [1, b"x", True],
        "flags": [True, False],
        "e": [],
    }
    wire = encode_payload(payload)
    back = decode_payload(wire)
    assert back == payload
    assert [type(v) for v in back["flags"]] == [bool, bool] and [type(v) for v in back["mixed"]] == [
        int,
        bytes,
        bool,
    ]
    # one header entry for the 49 shares: the header grows by their lengths, not by a tag per item
    (head_len,) = struct.unpack_from("<I", wire)
    assert json.loads(wire[4 : 4 + head_len])["shares"][0] == "Y"
    # a header that points past its body, or a float among the ints, is refused, not truncated
    head = json.loads(wire[4 : 4 + head_len])
    for key, item in (("shares", ["Y", 0, [10**6]]), ("ids", ["I", [1.5]])):
        bad = dict(head, **{key: item})
        raw = json.dumps(bad).encode()
        with pytest.raises(ValueError, match="malformed"):
            decode_payload(struct.pack("<I", len(raw)) + raw + wire[4 + head_len :])


def test_local_transport_dropouts_errors_and_bytes():
    def step(phase, request, state, secret):
        if secret == "boom":
            raise RuntimeError("client failed")
        return {"echo": request["x"] + secret}, {"calls": state.get("calls", 0) + 1}

    t = LocalTransport({1: 1, 2: 2, 3: "boom"}, step, dropouts={"second": [2]})
    assert t.exchange("first", {n: {"x": 10} for n in (1, 2, 3)}) == {1: {"echo": 11}, 2: {"echo": 12}}
    assert isinstance(t.errors[3], RuntimeError)
    assert t.exchange("second", {n: {"x": 10} for n in (1, 2)}) == {1: {"echo": 11}}
    assert t.exchange("third", {n: {"x": 10} for n in (1, 2)}) == {1: {"echo": 11}}  # 2 stays gone
    assert decode_payload(t.states[1]) == {"calls": 3}
    assert [(r.phase, r.node) for r in t.received] == [
        ("first", 1),
        ("first", 2),
        ("second", 1),
        ("third", 1),
    ]
    assert t.bytes_sent[1] == 3 * len(encode_payload({"echo": 11}))


def test_self_mask_keys_come_from_128_bit_seeds():
    """Self-mask keys are 256-bit, differ per round and per seed; the seed is one Shamir element."""
    seed = urandom(16)
    keys = {channel.self_mask_key(s, r) for s in (seed, urandom(16)) for r in (1, 2)}
    assert len(keys) == 4 and all(len(k) == 32 for k in keys)
    assert channel.self_mask_key(seed, 1) == channel.self_mask_key(seed, 1)
    with pytest.raises(ValueError, match="16 bytes"):
        channel.self_mask_key(bytes(32), 1)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
@pytest.mark.parametrize("n", [0, 1, 7, 1023, 1024, 5000])
def test_update_fingerprint_sees_every_word_dtype_and_shape(dtype, n):
    """The once-only rule must recognise the same update every time (deterministic) and should not
    confuse two updates (a changed bit anywhere, another dtype or length, is another update)."""
    x = np.random.default_rng(n).normal(0, 1, n).astype(dtype)
    assert upload_fingerprint(x) == upload_fingerprint(x.copy())
    seen = {upload_fingerprint(x), upload_fingerprint(np.zeros(n + 1, dtype))}
    if dtype is not np.float64:
        seen.add(upload_fingerprint(x.astype(np.float64)))
    for i in {0, n // 2, n - 1} if n else set():
        y = x.copy()
        y.view(np.uint8)[i * y.itemsize] ^= 1  # one bit of one value
        seen.add(upload_fingerprint(y))
    assert len(seen) == 2 + (dtype is not np.float64) + len({0, n // 2, n - 1} if n else set())
