"""Server-chosen factors on a site's secure-sum contribution (DRFA's λ), checked before training.

A factor scales what a site adds to a secure sum. Left to the server, factors of zero for every
site but one turn "the sum" into that one site's update, with SecAgg+ intact. So a site accepts a
factor only as its entry in one vector over every site of the round, that it and every other
participant were shown alike: the vector's digest is signed into each site's SecAgg+ keys
(`key_statement`'s context), so two sites shown different vectors never mask together. Every
entry must be at least `fed.factor_floor` and the entries average one: no site's weight is more
than (n − (n − 1)·floor) / floor times another's, so the others' updates always cover it.

That bound holds only if the vector's sites are the sites that sum. Padded with names that never
mask (made up, or provisioned but absent), the floor entries are weight the server moves onto one
site: 3 real sites and 97 invented ones, the victim at 50.5 and the rest at 0.5, averaged 1 and
made the sum the victim's update to 2 %. So every name must be a site this one holds a provisioned
key for, and SecAgg+ masks only when the round's signed peers, with this site, are exactly the
vector's sites (`Factors.sites`, checked by the SecAgg+ client at the share distribution).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from secure_fed.site.guard import Refusal

# the entries average one: a tolerance for the server's float arithmetic, not a loophole
_MEAN_TOLERANCE = 1e-6


@dataclass(frozen=True)
class Factors:
    own: float
    digest: bytes  # what the site signs into its SecAgg+ keys; b"" when no factors were sent
    sites: tuple[str, ...] = ()  # the sites the SecAgg+ round must be made of exactly; () = any


NONE = Factors(own=1.0, digest=b"")


def factors_digest(sites: list[str], values: list[float]) -> bytes:
    """A canonical digest of the (site, factor) vector: order-independent, exact in the floats."""
    h = hashlib.sha256(b"secure_fed/factors/v1")
    for site, value in sorted(zip(sites, values, strict=True)):
        raw = site.encode()
        h.update(len(raw).to_bytes(4, "big") + raw + float(value).hex().encode() + b";")
    return h.digest()


def check_factors(
    request: Mapping[str, Any], site: str, floor: float, provisioned: Collection[str] | None = None
) -> Factors:
    """This site's factor from the request's `factor_sites`/`factors` vector, or `Refusal`.
    `provisioned`: the sites this one holds a public key for (None: it holds none, and so sums
    nothing securely; its plain upload is the server's to read anyway)."""
    if "factors" not in request and "factor_sites" not in request:
        if "lambda" in request:  # the old, per-site scalar: nobody else sees it
            raise Refusal("factors", "a factor sent to this site alone is refused: send the whole vector")
        return NONE
    sites = [str(s) for s in request.get("factor_sites", [])]
    try:
        values = [float(v) for v in request.get("factors", [])]
    except (TypeError, ValueError):
        raise Refusal("factors", "factors must be numbers") from None
    if len(sites) != len(values) or len(set(sites)) != len(sites) or site not in sites:
        raise Refusal("factors", f"the factor vector must name every site once, {site!r} included")
    if provisioned is not None:
        unknown = sorted(set(sites) - set(provisioned) - {site})
        if unknown:
            shown = ", ".join(unknown[:3]) + (f" and {len(unknown) - 3} more" if len(unknown) > 3 else "")
            raise Refusal(
                "factors",
                f"the factor vector names {shown}, not a provisioned site: padding it with sites that "
                "never sum would weigh one real site above the floor's bound",
            )
    low = [s for s, v in zip(sites, values, strict=True) if not (math.isfinite(v) and v >= floor)]
    if low:
        raise Refusal(
            "factors",
            f"factors below the floor {floor:g} (fed.factor_floor) for {', '.join(sorted(low))}: "
            "such a sum could be one site's update",
        )
    mean = sum(values) / len(values)
    if abs(mean - 1.0) > _MEAN_TOLERANCE:
        raise Refusal("factors", f"factors must average 1, these average {mean:.6g}")
    return Factors(
        own=values[sites.index(site)], digest=factors_digest(sites, values), sites=tuple(sorted(sites))
    )
