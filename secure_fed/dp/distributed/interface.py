"""`DistributedSum`: the one object a site and the server use for a distributed-DP round.

Built from the round's plan and public seed (`DistributedSum.for_round`, which each party derives
from its own config), it encodes a site's clipped sum into its share on the ring, names the noise
layers a confirmed survivor count frees, and decodes the survivors' ring sum. Masking is not its
job: it hands SecAgg+ the ring (`bits`) and the share's length (`length`), and SecAgg+ sums the
shares it is given."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from secure_fed.config import RunConfig
from secure_fed.dp.distributed.decode import decode_sum, remove_layers
from secure_fed.dp.distributed.encode import encode_layered_share
from secure_fed.dp.distributed.plan import DistributedPlan
from secure_fed.dp.distributed.run import plan_digest, plan_for, round_seed
from secure_fed.dp.distributed.survivors import layers_for
from secure_fed.dp.keystream import NoiseStream

# a survivor's reveal as the server receives it: (the survivor count it confirmed, [(layer, seed)])
Reveal = tuple[int, Sequence[tuple[int, bytes]]]


class Share(NamedTuple):
    """A site's encoded round: `ring` (uint64 residues mod 2^bits, length plan.padded_dim) is what
    SecAgg+ masks and sums; `layer_seeds` stay secret to the site until it reveals those a confirmed
    survivor count frees (`DistributedSum.freed_layers`)."""

    ring: np.ndarray
    layer_seeds: list[bytes]


@dataclass(frozen=True)
class DistributedSum:
    """One distributed round: `plan` (the public numbers every party derives and compares by
    `digest`) and `round_seed` (the round's public rotation seed)."""

    plan: DistributedPlan
    round_seed: bytes

    @classmethod
    def for_round(cls, cfg: RunConfig, dim: int, n_sites: int, round_id: int) -> DistributedSum:
        """The run's plan for updates of `dim` coordinates over `n_sites` sites, at round `round_id`."""
        return cls(plan_for(cfg, dim, n_sites), round_seed(cfg, round_id))

    @property
    def bits(self) -> int:
        """The ring Z_{2^bits} SecAgg+ sums the shares in."""
        return self.plan.bits

    @property
    def length(self) -> int:
        """The share's length (the update padded to whole rotation blocks): SecAgg+'s vector size."""
        return self.plan.padded_dim

    @property
    def digest(self) -> str:
        """SHA-256 of the plan's JSON: what a site and the server compare before a sum is decoded."""
        return plan_digest(self.plan)

    def encode(self, site_sum: np.ndarray, keystream: NoiseStream) -> Share:
        """A site's share of its clipped sum (length plan.dim), its rounding and noise drawn from
        `keystream` (the release's own), the noise in removable survivor layers."""
        ring, seeds = encode_layered_share(site_sum, self.plan, self.round_seed, keystream)
        return Share(ring, seeds)

    def freed_layers(self, survivors: int) -> list[int]:
        """The indices of the layers a site reveals once `survivors` survivors are confirmed."""
        return layers_for(self.plan, survivors)

    def accepted_reveals(
        self, reveals: Mapping[int, Reveal], survivors: Collection[int]
    ) -> dict[int, Reveal]:
        """The reveals the decode takes out: a survivor's exactly for the count it confirmed, or none
        of its (a reveal that names other layers, or comes from a site not in the sum, is left in:
        more noise, never less)."""
        accepted: dict[int, Reveal] = {}
        for node, (count, layers) in sorted(reveals.items()):
            try:
                expected = layers_for(self.plan, count)
            except ValueError:
                continue
            if node not in survivors or [index for index, _ in layers] != expected:
                continue
            accepted[node] = (count, layers)
        return accepted

    def decode(self, ring_sum: np.ndarray, accepted: Mapping[int, Reveal] | None = None) -> np.ndarray:
        """The released noisy sum (float64, length plan.dim) from the survivors' ring sum, less the
        noise layers in `accepted` (from `accepted_reveals`)."""
        pairs = [pair for node in sorted(accepted or {}) for pair in (accepted or {})[node][1]]
        total = remove_layers(ring_sum, self.plan, pairs) if pairs else ring_sum
        return decode_sum(total, self.plan, self.round_seed)
