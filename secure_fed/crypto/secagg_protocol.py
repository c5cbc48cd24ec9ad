"""What the SecAgg+ server and clients agree on: phase names, settings, round parameters, errors."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from secure_fed.config import SecAggConfig
from secure_fed.crypto.quantize import modulus_bits

PLAIN_SUM = "plain_sum"
# Setup and key advertisement share one round trip (Bell et al.'s AdvertiseKeys): the server's
# parameters go out with the request, the client's two public keys come back in the reply.
SETUP = "secagg_setup"
SHARES = "secagg_shares"
MASKED = "secagg_masked"
# Bell et al.'s ConsistencyCheck: each survivor signs the one survivor set it is shown, before any
# secret that unmasks is revealed (run where the inputs are distributed-DP noise shares)
CONSISTENCY = "secagg_consistency"
UNMASK = "secagg_unmask"
SECAGG_PHASES = (SETUP, SHARES, MASKED, CONSISTENCY, UNMASK)
# Distributed DP's noise sized for the confirmed survivors rides on the unmask: the request says the
# survivor count m the server will take each site's noise down to (its own confirmations plus the
# ones it is shown), the reply carries the seeds of the removable noise layers m frees (by index)
NOISE_SURVIVORS = "noise_survivors"
NOISE_LAYER_INDEX = "noise_layer_index"
NOISE_LAYER_SEEDS = "noise_layer_seeds"
# A setup request (and its reply) can ride inside another message, its fields under this prefix, so
# that key advertisement shares the round trip that hands the sites their work.
EMBEDDED_SETUP = "secagg_setup."


def embed_setup(payload: Mapping[str, Any]) -> dict[str, Any]:
    """A setup request or reply as fields to merge into another message (flat: every transport
    carries it)."""
    return {EMBEDDED_SETUP + key: value for key, value in payload.items()}


def embedded_setup(message: Mapping[str, Any]) -> dict[str, Any] | None:
    """The setup request or reply inside `message`, or None when it carries none."""
    found = {k[len(EMBEDDED_SETUP) :]: v for k, v in message.items() if k.startswith(EMBEDDED_SETUP)}
    return found or None


class SecAggAbort(RuntimeError):
    """The server cannot finish the round safely (too few survivors); no aggregate is released."""


class SecAggRefused(RuntimeError):
    """A client refuses a server instruction (wrong order, unsafe parameters, bad ciphertext).

    `str()` is the one-line reason the server may read; `detail` (default: the same) is what the
    site's own log keeps, and may name local files, which never leave the site."""

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.detail = message if detail is None else detail


class ShareRejected(SecAggRefused):
    """An encrypted share failed authentication: tampered, replayed or misrouted."""


@dataclass(frozen=True)
class SecAggSettings:
    """SecAgg+ knobs; mirrors `secure_fed.config.SecAggConfig`.

    neighbours: degree k of the masking graph (None = `default_degree(n)`).
    threshold: fraction of a node's neighbours needed to rebuild its self-mask seed; must exceed
        1/2, and the threshold used is never below `collusion_safe_threshold(k)` whatever it says.
    clip, bits: quantisation range [-clip, clip] and resolution (2^bits quanta per clip); bits None
        = `word_bits(n, dim)`, the finest resolution whose ring still fits 32-bit words.
    ring_bits: set, the inputs are already integers mod 2^ring_bits (distributed DP's noise shares,
        encoded by the sites themselves): no quantisation, the ring is Z_{2^ring_bits}, and the sum
        comes back as residues, for the sites' mechanism to decode.
    Defaults are `secure_fed.config.SecAggConfig`'s.
    """

    neighbours: int | None = None
    threshold: float = 0.6
    clip: float = 1.0
    bits: int | None = None
    ring_bits: int | None = None

    def __post_init__(self) -> None:
        if self.neighbours is not None and self.neighbours < 2:
            raise ValueError("neighbours must be at least 2")
        if not 0.5 < self.threshold <= 1.0:
            raise ValueError("threshold must be in (0.5, 1]")
        if not self.clip > 0:
            raise ValueError("clip must be positive")
        if self.bits is not None and not 8 <= self.bits <= 40:
            raise ValueError("bits must be in [8, 40]")
        if self.ring_bits is not None and not 8 <= self.ring_bits <= 64:
            raise ValueError("ring_bits must be in [8, 64]")

    @property
    def checks_survivors(self) -> bool:
        """Whether the round signs one survivor set before unmasking: with ring inputs (distributed
        DP's noise shares), where a sum of fewer sites than the server claims carries less noise
        than every site accounted. Sites with dp.honest_min refuse an unmask without it."""
        return self.ring_bits is not None

    @classmethod
    def from_config(cls, cfg: SecAggConfig) -> SecAggSettings:
        return cls(neighbours=cfg.neighbours, threshold=cfg.threshold, clip=cfg.clip, bits=cfg.bits)


def default_degree(n: int) -> int:
    """Log-scale degree, ceil(2 log2 n) capped at n - 1.

    Bell et al. (2020) show O(log n) neighbours keep every honest node's masks intact and its
    secrets recoverable w.h.p.; the factor 2 leaves room for a threshold above k/2 with a few
    dropouts. For the handful of hospitals we expect (n <= 8) this is the complete graph, i.e.
    classic SecAgg; the saving only appears from about 12 sites on.
    """
    return min(n - 1, max(2, math.ceil(2 * math.log2(n))))


@dataclass(frozen=True)
class RoundParams:
    """Numbers derived once per round by the server and checked by every client."""

    degree: int
    threshold: int
    bits: int
    modulus_bits: int


def round_params(num_nodes: int, dim: int, settings: SecAggSettings) -> RoundParams:
    if num_nodes < 3:
        raise SecAggAbort(
            f"SecAgg+ needs at least 3 sites, got {num_nodes}: a sum of two reveals each to the other"
        )
    k = min(num_nodes - 1, settings.neighbours or default_degree(num_nodes))
    if (k * num_nodes) % 2:
        k += 1  # a k-regular graph needs n*k even; n is odd here, so k + 1 <= n - 1
    bits = settings.bits if settings.bits is not None else word_bits(num_nodes, dim)
    return RoundParams(
        degree=k,
        threshold=shamir_threshold(k, settings.threshold),
        bits=bits,
        modulus_bits=(
            settings.ring_bits
            if settings.ring_bits is not None
            else modulus_bits(num_nodes, bits, max_count=dim)
        ),
    )


# Resolution chosen by `word_bits`: never finer than this (a quantum of clip / 2^30 is already far
# below float32 resolution of the adapters), never coarser than the floor (then 64-bit words).
_MAX_AUTO_BITS, _MIN_AUTO_BITS = 30, 20


def neighbourhood_size(num_nodes: int, settings: SecAggSettings) -> int:
    """Sites in one site's neighbourhood, itself included: all a site can see survive, so the most
    survivors its unmask rule can ever be met with (distributed DP's h must not exceed it)."""
    return round_params(num_nodes, 1, settings).degree + 1


def word_bits(num_nodes: int, dim: int) -> int:
    """The most quantisation bits (≤ 30) for which the sum of `num_nodes` encodings fits a 32-bit
    ring: every value then travels and is masked as 4 bytes, not 8 — half the upload and half the
    keystream of a 64-bit ring, for a quantum 2–16× coarser at 3–16 sites. Falls back to 30 bits
    in 64-bit words when even 20 bits cannot fit (hundreds of thousands of sites)."""
    for bits in range(_MAX_AUTO_BITS, _MIN_AUTO_BITS - 1, -1):
        if modulus_bits(num_nodes, bits, max_count=dim) <= 32:
            return bits
    return _MAX_AUTO_BITS


def collusion_safe_threshold(degree: int, colluders: int = 1) -> int:
    """The fewest shares of a site's self-mask seed that may open it against `colluders`
    colluding neighbours: 2t >= k + c + 1 (2t >= k + 2 for one, DESIGN.md's adversary).

    Each honest neighbour of a site answers one unmask request and, about that site, reveals either
    its self-mask share (the site survived) or the pairwise mask key the two share (the site
    dropped). A share costs the server nothing only from a neighbour the site does not mask with
    (it masks with p >= t partners: at most k - p of those) or whose key the site revealed itself
    (only for partners it is told dropped, at most p - t). To strip every mask off the site's input
    the server needs t shares, so t <= (k - t) + c with c colluding neighbours; 2t >= k + c + 1
    leaves it a share short. Above k no threshold holds: the caller's check t <= k refuses it.
    """
    return max(2, math.ceil((degree + colluders + 1) / 2))


def site_threshold(degree: int) -> int:
    """The smallest Shamir threshold a site with `degree` neighbours accepts. A threshold t holds
    against c = 2t - k - 1 colluding neighbours and survives k - t dropouts: each step of t trades
    one dropout for two colluders. The site takes the t that makes the smaller of the two largest,
    and the one that holds against more colluders on a tie, never below one colluder
    (`collusion_safe_threshold`): t = 2, 3, 3, 4, 5, 5, 6, 7, 7 for k = 2..10, which holds against
    1, 2, 1, 2, 3, 2, 3, 4, 3 colluders and survives 0, 0, 1, 1, 1, 2, 2, 2, 3 dropouts. At k = 4
    (5 sites) one colluder: t = 4 would hold against three but survive no dropout. Each (n, c) the
    defaults hold against is tabled in docs/THREAT_MODEL.md and played in
    tests/adversarial/test_secagg_collusion.py."""
    return max(
        range(collusion_safe_threshold(degree), degree + 1),
        key=lambda t: (min(2 * t - degree - 1, degree - t), t),
    )


def shamir_threshold(degree: int, fraction: float) -> int:
    """Shares needed out of `degree`: the configured fraction, raised to the site's minimum."""
    return max(site_threshold(degree), math.ceil(fraction * degree - 1e-9))


def share_associated_data(round_id: int | str, sender: int, recipient: int) -> bytes:
    """AES-GCM associated data binding a share to its round, direction and purpose."""
    return f"secure_fed/secagg+/v1|{SHARES}|round={round_id!s}|from={sender}|to={recipient}".encode()


@dataclass
class VectorSum:
    """Result of a (secure) vector sum.

    quantisation_bound: max per-coordinate |total - sum of clipped inputs| (0 for a plain sum).
    clipped_fraction: share of all survivors' coordinates that were clipped before encoding; when
        it is non-zero, `total` also misses the clipped-off excess, which the bound does not cover.
    """

    total: np.ndarray
    survivors: list[int]
    dropped: list[int] = field(default_factory=list)
    quantisation_bound: float = 0.0
    clipped_fraction: float = 0.0
    # distributed DP: what each survivor revealed with its unmask reply, node → (the survivor count
    # it confirmed, [(layer index, seed)]): the removable noise layers its share no longer needs,
    # for the mechanism to take out of `total` (the protocol only carries them)
    noise_layers: dict[int, tuple[int, list[tuple[int, bytes]]]] = field(default_factory=dict)
