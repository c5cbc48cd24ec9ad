"""Population sizes as they may leave a site: a power-of-two range, never the exact count.

An exact patient count (or a count that changes by one between two rounds) tells the server
whether one patient joined or left; the site's own audit log keeps the exact figures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from secure_fed.config import RunConfig


def bucket_floor(n: int) -> int:
    """The largest power of two ≤ n (0 for n ≤ 0): a weight the server may use instead of n."""
    return 0 if n <= 0 else 1 << (int(n).bit_length() - 1)


def size_bucket(n: int) -> str:
    """'0', '1', '2-3', '4-7', …: the range of n as text for records the server copies."""
    low = bucket_floor(n)
    return str(low) if low <= 1 else f"{low}-{2 * low - 1}"


def private_weight(cfg: RunConfig, n_train: int) -> float:
    """The weight a site's private (site-mode DP) update carries in the secure sum: public, so the
    mean stays post-processing of the DP releases. `fed.dp_weights`: 1 for every site, or the
    power-of-two floor of its training patients (the range its privacy records already give);
    over `secagg.count_scale` either way, as the non-private n is."""
    weight = bucket_floor(n_train) if cfg.fed.dp_weights == "public_size" else 1
    return weight / cfg.secagg.count_scale


def check_private_weight(cfg: RunConfig, n_train: int) -> None:
    """ValueError (one line, naming the keys and the fix) when the weight would not survive the
    secure sum: SecAgg+ clips every value to ±secagg.clip, the weight too, which would then weigh
    the largest sites alike without a word."""
    weight = private_weight(cfg, n_train)
    if cfg.secagg_on and weight > cfg.secagg.clip:
        need = bucket_floor(n_train) / cfg.secagg.clip
        raise ValueError(
            f"fed.dp_weights = 'public_size': this site's weight {bucket_floor(n_train)} / "
            f"secagg.count_scale = {weight:g} exceeds secagg.clip = {cfg.secagg.clip:g} and would be "
            f"clipped in the secure sum; set secagg.count_scale to {need:g} or more"
        )
