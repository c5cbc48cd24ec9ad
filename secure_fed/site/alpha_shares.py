"""A site's share of its α scalars' noise in their CKKS sum (dp.noise = "distributed", he.enabled).

The site keeps its clipped α sum un-noised from `hypergrad` and draws its share here, called by the
encrypt phase's `SizedValues` hook (site/handler.py) once the protocol has verified every listed
participant's signed mask key: std σ_α·C_α/√(m − c) for those m, so the shares of any m − c honest
participants carry the σ_α·C_α the ledger's `clipped_sum_event(σ_α)` charges. One share a round:
kept in the site's private folder and logged (`alpha_share`, with its sizing, for `audit verify`)
before it leaves, so a second request for the round is refused whatever its participants, even
after a crash that lost the protocol's own record of the encrypt.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from secure_fed.crypto.scalars import ValuesRefused
from secure_fed.site.runtime import save_release

if TYPE_CHECKING:
    from secure_fed.site.runtime import SiteRuntime


def draw_share(runtime: SiteRuntime, round_id: int, members: list[tuple[int, str]]) -> np.ndarray:
    """The site's α values for a CKKS sum over `members` (node, site), whose signed keys the encrypt
    phase has verified: its clipped sum plus its share of the noise, drawn once a round."""
    privacy = runtime.privacy
    clipped = runtime.stash.get("scalars")
    if privacy is None or not privacy.alpha_shared or clipped is None:
        raise ValuesRefused("this site holds no α sum to share the noise of")
    if runtime.stash.get("scalars_round") != round_id:
        raise ValuesRefused(f"this site's α scalars are for round {runtime.stash.get('scalars_round')}")
    drawn = runtime.folder / f"alpha-r{round_id}.share.npy"
    if drawn.exists():
        raise ValuesRefused(
            f"round {round_id}: this site drew its α noise share already; a second share of the round "
            "is refused (its sum fails rather than being made again over other participants)"
        )
    m = len(members)
    try:
        std = privacy.alpha_share_std(m)
    except ValueError as err:
        raise ValuesRefused(f"round {round_id}: {err}") from None
    values = privacy.alpha_share(clipped, m, privacy.noise_stream("alpha", round_id))
    save_release(drawn, values)
    if runtime.trail is not None:
        runtime.trail.append(
            "alpha_share",
            {
                "site": runtime.site,
                "participants": m,
                "colluders": privacy.colluders,
                "members": sorted([int(node), str(site)] for node, site in members),
                "alpha_sigma": privacy.alpha_sigma,
                "clip_norm": privacy.alpha_clip,
                "share_std": std,
                "share_over_sigma": 1.0 / math.sqrt(m - privacy.colluders),
            },
            round_id,
        )
    return values
