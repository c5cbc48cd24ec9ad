"""Population sizes as they may leave a site: a power-of-two range, never the exact count, and
weights that are no function of the count at all.

An exact patient count (or a count that changes by one between two rounds) tells the server
whether one patient joined or left; the site's own audit log keeps the exact figures. A weight in
the server's mean is an operator-declared constant (`public_count`), not a range of n: the range
moves, without noise, when one patient crosses a power of two.
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


def public_count(cfg: RunConfig, site: str) -> int | None:
    """The site's training-patient count as its operator declares it public (`fed.public_patients`),
    None when undeclared. A constant of the site's policy, never read from its data: a weight or
    divisor derived from n (its power-of-two floor, say) would be released without noise, and
    move when one patient crosses a power of two."""
    return cfg.fed.public_patients.get(site)


def private_weight(cfg: RunConfig, site: str) -> float:
    """The weight a site's private (site-mode DP) update carries in the secure sum: public, so the
    mean stays post-processing of the DP releases. `fed.dp_weights`: 1 for every site, or the
    count the site's operator declares public (`public_count`); over `secagg.count_scale` either
    way, as the non-private n is."""
    weight = 1 if cfg.fed.dp_weights == "equal" else public_count(cfg, site)
    if weight is None:
        raise ValueError(
            f"fed.dp_weights = 'public_size' but fed.public_patients declares no count for {site}: add "
            f"{site} = <its public patient count> to fed.public_patients"
        )
    return weight / cfg.secagg.count_scale


def check_private_weight(cfg: RunConfig, site: str) -> None:
    """ValueError (one line, naming the keys and the fix) when the weight would not survive the
    secure sum: SecAgg+ clips every value to ±secagg.clip, the weight too, which would then weigh
    the largest sites alike without a word."""
    weight = private_weight(cfg, site)
    if cfg.secagg_on and weight > cfg.secagg.clip:
        declared = weight * cfg.secagg.count_scale
        need = declared / cfg.secagg.clip
        raise ValueError(
            f"fed.dp_weights = 'public_size': this site's weight {declared:g} / "
            f"secagg.count_scale = {weight:g} exceeds secagg.clip = {cfg.secagg.clip:g} and would be "
            f"clipped in the secure sum; set secagg.count_scale to {need:g} or more"
        )
