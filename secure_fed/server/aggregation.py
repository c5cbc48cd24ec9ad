"""How the server forms sums: the one place that chooses plain, SecAgg+ or CKKS.

The FedTAR round and the baselines call `secure_sum` / `scalar_sum` and never see masks or
ciphertexts; the crypto package never sees FedTAR.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from secure_fed.config import RunConfig
from secure_fed.crypto.scalars import HESettings, sum_scalars
from secure_fed.crypto.secagg_protocol import SecAggSettings, VectorSum
from secure_fed.crypto.secagg_server import Advertised
from secure_fed.crypto.transport import Transport
from secure_fed.crypto.vectors import sum_vectors


@dataclass(frozen=True)
class AggregationSettings:
    secagg: SecAggSettings | None
    he: HESettings | None

    @property
    def mode(self) -> str:
        return "secagg+" if self.secagg is not None else "plain"

    @classmethod
    def from_config(cls, cfg: RunConfig) -> AggregationSettings:
        secagg = SecAggSettings.from_config(cfg.secagg) if cfg.secagg_on else None
        if secagg is not None and cfg.dp.enabled and cfg.dp.noise == "distributed":
            from dataclasses import replace

            from secure_fed.dp.distributed.run import ring_bits

            # the sites' noise shares are residues of their own ring, summed as they are
            secagg = replace(secagg, ring_bits=ring_bits(cfg))
        he = None
        if cfg.he.enabled:
            if cfg.he.keys_dir is None:
                raise ValueError("he.enabled needs he.keys_dir (create keys with `secure-fed keys init`)")
            # sites sum α only with at least 3 (with 2, the server plus one site learns the other)
            he = HESettings.from_keys_dir(cfg.he.keys_dir, min_participants=max(3, cfg.fed.min_sites))
        return cls(secagg=secagg, he=he)


def secure_sum(
    transport: Transport,
    nodes: list[int],
    dim: int,
    settings: AggregationSettings,
    round_id: int,
    advertised: Advertised | None = None,
    carried: Mapping[int, Mapping[str, Any]] | None = None,
) -> VectorSum:
    return sum_vectors(
        transport, nodes, dim, settings.secagg, round_id, advertised=advertised, carried=carried
    )


def scalar_sum(
    transport: Transport, nodes: list[int], settings: AggregationSettings, round_id: int
) -> np.ndarray:
    return sum_scalars(transport, nodes, round_id, settings.he)
