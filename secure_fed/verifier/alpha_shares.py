"""α's noise shares in their CKKS sum (distributed DP with HE), re-derived from the sites' own signed
records.

A site that shares the α scalars' noise logs, when it encrypts, an `alpha_share` record: the m
participants whose signed keys it verified (node, site), c, σ_α, C_α and the std it drew,
σ_α·C_α/√(m − c), so the shares of any m − c honest participants carry the σ_α·C_α its
`alpha_scalars` privacy record charged. This module checks each record against that rule and
against the site's other records (the σ_α and C_α it charged, the c of its distributed plan), one
share a round, and that every site of a round sized its share for the same participants.

Pure: it takes what the logs say (`SiteRounds`) and returns findings.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from secure_fed.verifier.distributed_checks import Finding, SiteRounds

ALPHA_SHARE_EVENT = "alpha_share"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _members(value: Any) -> list[tuple[int, str]] | None:
    if not isinstance(value, list):
        return None
    out = []
    for entry in value:
        if not (isinstance(entry, list) and len(entry) == 2 and _int(entry[0]) is not None):
            return None
        if not isinstance(entry[1], str):
            return None
        out.append((entry[0], entry[1]))
    return out


def _plan_colluders(log: SiteRounds) -> int | None:
    """The c of the site's distributed plan (the same every round, else `plan_change_findings`)."""
    for _, event in log.plans.values():
        c = _int(event.get("colluders"))
        if c is not None:
            return c
    return None


def _share_problem(
    log: SiteRounds, round_: int, payload: Mapping[str, Any], charged: Mapping[str, Any] | None
) -> str | None:
    """Why one `alpha_share` record does not give the honest shares the charged σ_α·C_α (or None)."""
    m, c = _int(payload.get("participants")), _int(payload.get("colluders"))
    members = _members(payload.get("members"))
    sigma, clip = _number(payload.get("alpha_sigma")), _number(payload.get("clip_norm"))
    std, ratio = _number(payload.get("share_std")), _number(payload.get("share_over_sigma"))
    if m is None or c is None or members is None or None in (sigma, clip, std, ratio):
        return "logged an α share without its participants, colluders, members, σ_α, C_α and std"
    assert sigma is not None and clip is not None and std is not None and ratio is not None
    if len(members) != m:
        return (
            f"logged an α share sized for m = {m} participants but lists {len(members)}: its share was not "
            "sized for the participants it verified"
        )
    if len({n for n, _ in members}) != m or len({s for _, s in members}) != m:
        return f"logged an α share over participants named twice ({sorted(members)})"
    if log.site not in {s for _, s in members}:
        return "logged an α share for a sum it is not listed in"
    if m <= c:
        return f"logged an α share for m = {m} participants with c = {c}: no honest share carries the noise"
    planned = _plan_colluders(log)
    if planned is not None and planned != c:
        return f"sized its α share for c = {c} colluders; its distributed plan says c = {planned}"
    if charged is None:
        return "logged an α share for a round whose α release its log does not charge"
    event = charged.get("event")
    charged_sigma = _number(event.get("noise_multiplier")) if isinstance(event, Mapping) else None
    charged_clip = _number(charged.get("clip_norm"))
    if charged.get("noise") != "shares":
        return "logged an α share for a round whose α release its privacy record calls its own"
    if (
        charged_sigma is None
        or charged_clip is None
        or not (
            math.isclose(sigma, charged_sigma, rel_tol=1e-12)
            and math.isclose(clip, charged_clip, rel_tol=1e-12)
        )
    ):
        return (
            f"sized its α share for σ_α = {sigma:g}, C_α = {clip:g}; its privacy record charged "
            f"σ_α = {charged_sigma!r}, C_α = {charged_clip!r}"
        )
    expected = sigma * clip / math.sqrt(m - c)
    if not math.isclose(std, expected, rel_tol=1e-9) or not math.isclose(
        ratio, 1 / math.sqrt(m - c), rel_tol=1e-9
    ):
        return (
            f"drew an α share of std {std:.6g} ({ratio:.6g} × σ_α·C_α) for m = {m}, c = {c}; the rule gives "
            f"σ_α·C_α/√(m − c) = {expected:.6g} ({1 / math.sqrt(m - c):.6g} ×): the honest shares carry "
            "less than the ledger charged"
        )
    return None


def alpha_share_findings(logs: Sequence[SiteRounds]) -> list[Finding]:
    findings = []
    for log in logs:
        for round_, shares in sorted(log.alpha_shares.items()):
            line, payload = shares[0]
            if len(shares) > 1:
                findings.append(
                    Finding(
                        log.path,
                        shares[1][0],
                        f"round {round_}: {log.site} drew {len(shares)} α noise shares; one a round",
                    )
                )
            charged = log.alpha_charges.get(round_)
            problem = _share_problem(log, round_, payload, None if charged is None else charged[1])
            if problem is not None:
                findings.append(Finding(log.path, line, f"round {round_}: {log.site} {problem}"))
    rounds = sorted({r for log in logs for r in log.alpha_shares})
    for round_ in rounds:
        seen = {log.site: log for log in logs if round_ in log.alpha_shares}
        lists = {
            site: json.dumps(sorted(log.alpha_shares[round_][0][1].get("members") or []))
            for site, log in seen.items()
        }
        by_value: dict[str, list[str]] = {}
        for site, value in sorted(lists.items()):
            by_value.setdefault(value, []).append(site)
        groups = sorted(by_value.values(), key=lambda sites: (-len(sites), sites))
        if len(groups) == 1:
            continue
        described = "; ".join(
            f"{', '.join(g)} for {len(json.loads(lists[g[0]]))} participants" for g in groups
        )
        for group in groups[1:]:
            for site in group:
                findings.append(
                    Finding(
                        seen[site].path,
                        seen[site].alpha_shares[round_][0][0],
                        f"round {round_}: the sites sized their α shares for different participant lists "
                        f"({described}): the server showed them different lists, so no one sum carries "
                        "shares sized for it (the decryptor refuses such a sum)",
                    )
                )
    return findings
