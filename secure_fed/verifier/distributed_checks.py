"""What makes a logged distributed-DP ε an upper bound, checked across the sites' logs.

Under distributed DP (`skellam_sum` events) each site's noise share carries only part of the noise,
sized from a plan every site derives itself; the released sum carries the accounted noise only if
every site of a round used the same plan and the server unmasked one sum over at least h sites.
A server that tells sites different stories (a round count that changes one site's plan, a
different survivor set per site) leaves the traces this module looks for in the sites' own signed
logs: privacy events of one round with different mechanism parameters, a site whose parameters
change between its rounds, a site in a round's secure sum with no share charged for that round,
survivor sets that differ or hold fewer than h sites, and an unmask a site answered without having
confirmed a survivor set.

Pure: it takes what the logs say (as `SiteRounds`) and returns findings; `verify_crosslog.py` gathers
those from the logs and reports the findings.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

SURVIVORS_EVENT = "secagg_survivors"
UNMASK_PHASE = "secagg_unmask"
REVEAL_EVENT = "noise_layers_revealed"
REMOVAL_EVENT = "noise_layers_removed"


@dataclass
class SiteRounds:
    """One site's own records that bear on distributed DP, each with the line it is on."""

    path: str
    site: str
    # round → (line, the `skellam_sum` mechanism event of the site's privacy record)
    plans: dict[int, tuple[int | None, Mapping[str, Any]]] = field(default_factory=dict)
    # round → (line, the survivors the site confirmed, the h it checked them against); a survivor is
    # "site" or, where the log names the node the site confirmed it as, "site@node"
    survivors: dict[int, tuple[int | None, tuple[str, ...], int | None]] = field(default_factory=dict)
    unmasked: set[int] = field(default_factory=set)  # rounds whose unmask request the site acted on
    # round → [(line, payload)] of the site's `noise_layers_revealed` records (one a round, or a finding)
    reveals: dict[int, list[tuple[int | None, Mapping[str, Any]]]] = field(default_factory=dict)
    # round → [(line, payload)] of the site's `alpha_share` records (α's noise shared under CKKS)
    alpha_shares: dict[int, list[tuple[int | None, Mapping[str, Any]]]] = field(default_factory=dict)
    # round → (line, payload) of the site's `alpha_scalars` privacy record: the σ_α and C_α charged
    alpha_charges: dict[int, tuple[int | None, Mapping[str, Any]]] = field(default_factory=dict)


@dataclass(frozen=True)
class Finding:
    path: str
    line: int | None
    reason: str


def _canonical(event: Mapping[str, Any]) -> str:
    return json.dumps(event, sort_keys=True)


def _groups(values: Mapping[str, str]) -> list[list[str]]:
    """Sites grouped by equal value, the largest group first."""
    by_value: dict[str, list[str]] = {}
    for site, value in sorted(values.items()):
        by_value.setdefault(value, []).append(site)
    return sorted(by_value.values(), key=lambda sites: (-len(sites), sites))


def _differing_fields(events: Sequence[Mapping[str, Any]]) -> list[str]:
    keys = sorted({k for e in events for k in e})
    return [k for k in keys if len({json.dumps(e.get(k), sort_keys=True) for e in events}) > 1]


def plan_findings(logs: Sequence[SiteRounds]) -> list[Finding]:
    """Every site's distributed-DP mechanism event of a round must be the same: one plan sized the
    shares that add up to the released noise."""
    findings = []
    rounds = sorted({r for log in logs for r in log.plans})
    for round_ in rounds:
        present = {log.site: log for log in logs if round_ in log.plans}
        if len(present) < 2:
            continue
        groups = _groups({site: _canonical(log.plans[round_][1]) for site, log in present.items()})
        if len(groups) == 1:
            continue
        fields = _differing_fields([present[g[0]].plans[round_][1] for g in groups])
        for group in groups[1:]:
            for site in group:
                line, _ = present[site].plans[round_]
                findings.append(
                    Finding(
                        present[site].path,
                        line,
                        f"round {round_}: {site}'s distributed-DP plan differs from "
                        f"{', '.join(groups[0])}'s in {', '.join(fields)}: the sites' noise shares were "
                        "sized for different sums, so the logged ε is no bound (a server told the sites "
                        "different plans)",
                    )
                )
    return findings


def plan_change_findings(logs: Sequence[SiteRounds]) -> list[Finding]:
    """A site's plan is its run's, fixed at the run's first message: each round whose plan differs
    from the site's round before is named (a server that changed the round count mid-run, say)."""
    findings = []
    for log in logs:
        rounds = sorted(log.plans)
        for before, round_ in zip(rounds, rounds[1:], strict=False):
            earlier, (line, event) = log.plans[before][1], log.plans[round_]
            if _canonical(earlier) == _canonical(event):
                continue
            fields = _differing_fields([earlier, event])
            findings.append(
                Finding(
                    log.path,
                    line,
                    f"round {round_}: {log.site}'s distributed-DP plan differs from its own plan of round "
                    f"{before} in {', '.join(fields)}: a site's plan is fixed for its run, so its rounds "
                    "were noised for different sums and the logged ε is no bound",
                )
            )
    return findings


def unshared_findings(logs: Sequence[SiteRounds]) -> list[Finding]:
    """A site that took part in a round's secure sum under distributed DP (it confirmed the round's
    survivors or answered its unmask) must have charged a share for that round: an upload of
    another round (a saved release re-sent) was noised for another sum than the one released."""
    findings = []
    for log in logs:
        if not log.plans:
            continue
        for round_ in sorted((set(log.survivors) | log.unmasked) - set(log.plans)):
            line = log.survivors[round_][0] if round_ in log.survivors else None
            charged = ", ".join(str(r) for r in sorted(log.plans))
            findings.append(
                Finding(
                    log.path,
                    line,
                    f"round {round_}: {log.site} took part in round {round_}'s secure sum but its log "
                    f"charges no distributed-DP share for round {round_} (its shares are charged for "
                    f"round(s) {charged}): it masked an upload made for another round, so the sum is not "
                    "the one its ε was logged for",
                )
            )
    return findings


def survivor_findings(logs: Sequence[SiteRounds]) -> list[Finding]:
    """One survivor set per round, confirmed by every site that unmasked, of at least h sites; a site
    that answered an unmask under distributed DP must have logged the set it confirmed."""
    findings = []
    distributed = [log for log in logs if log.plans]
    for log in distributed:
        for round_ in sorted(log.unmasked & set(log.plans)):
            if round_ not in log.survivors:
                findings.append(
                    Finding(
                        log.path,
                        None,
                        f"round {round_}: {log.site} answered an unmask request under distributed DP but "
                        "its log holds no confirmed survivor set for the round",
                    )
                )
        for round_, (line, sites, honest_min) in sorted(log.survivors.items()):
            h = honest_min
            if h is None and round_ in log.plans:
                h = log.plans[round_][1].get("honest_min")
            if isinstance(h, int) and len(sites) < h:
                findings.append(
                    Finding(
                        log.path,
                        line,
                        f"round {round_}: {log.site} confirmed a survivor set of {len(sites)} sites, fewer "
                        f"than h = {h}",
                    )
                )
    rounds = sorted({r for log in distributed for r in log.survivors})
    for round_ in rounds:
        seen = {log.site: log for log in distributed if round_ in log.survivors}
        groups = _groups({site: json.dumps(list(log.survivors[round_][1])) for site, log in seen.items()})
        if len(groups) == 1:
            continue
        described = "; ".join(
            f"{', '.join(group)} confirmed {{{', '.join(seen[group[0]].survivors[round_][1])}}}"
            for group in groups
        )
        for group in groups[1:]:
            for site in group:
                findings.append(
                    Finding(
                        seen[site].path,
                        seen[site].survivors[round_][0],
                        f"round {round_}: the sites confirmed different survivor sets ({described}): the "
                        "server showed them different survivors, and a sum over fewer sites carries less "
                        "noise than the logged ε assumes",
                    )
                )
    return findings


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def reveal_findings(logs: Sequence[SiteRounds]) -> list[Finding]:
    """Noise sized for the confirmed survivors, re-derived from each site's own signed records: a
    site reveals its removable layers once a round, for a survivor count m with h ≤ m ≤ the set it
    confirmed (and m of that set's sites named as confirming), exactly the layers its survivor counts
    (rungs, from h) free at m (or none), so its share keeps mu/(r − c) of the round's plan for a
    rung r ≤ m, and the m − c honest survivors carry at least the mu_total the ledger charged."""
    findings = []
    for log in logs:
        for round_, reveals in sorted(log.reveals.items()):
            line, payload = reveals[0]

            def finding(
                reason: str, line: int | None = line, round_: int = round_, log: SiteRounds = log
            ) -> None:
                findings.append(Finding(log.path, line, f"round {round_}: {log.site} {reason}"))

            if len(reveals) > 1:
                finding(f"revealed its noise layers {len(reveals)} times; a site reveals once a round")
            if round_ not in log.plans:
                continue  # a reveal answers an unmask: `unshared_findings` names the round already
            plan = log.plans[round_][1]
            mu = _number(plan.get("mu_total"))
            h, c = plan.get("honest_min"), plan.get("colluders")
            m, layers = payload.get("survivors"), payload.get("layers")
            if mu is None or not isinstance(h, int) or not isinstance(c, int) or not 0 <= c < h:
                finding("revealed noise layers under a plan its log does not state (mu_total, h, c)")
                continue
            share = mu / (h - c)  # each share as encoded: h − c of them carry mu_total
            if not isinstance(m, int) or isinstance(m, bool) or not isinstance(layers, list):
                finding("logged a noise-layer reveal without its survivor count and layers")
                continue
            confirmed = log.survivors.get(round_)
            if confirmed is None:
                finding("revealed noise layers without a confirmed survivor set for the round")
                continue
            named = payload.get("confirmed")
            sites_in_set = {entry.split("@")[0] for entry in confirmed[1]}
            if not h <= m <= len(confirmed[1]):
                finding(
                    f"revealed noise layers for {m} survivors, outside [h = {h}, the {len(confirmed[1])} "
                    "it confirmed]: its share keeps less than the noise the ledger charged"
                )
                continue
            if not isinstance(named, list) or len(set(named)) != m or not set(named) <= sites_in_set:
                finding(
                    f"revealed noise layers for {m} survivors without naming {m} confirming sites of the "
                    "set it confirmed"
                )
                continue
            counts = payload.get("rungs")
            if (
                not isinstance(counts, list)
                or not all(isinstance(r, int) and not isinstance(r, bool) for r in counts)
                or not counts
                or counts[0] != h
                or counts != sorted(set(counts))
            ):
                finding(
                    f"logged a noise-layer reveal whose survivor counts {counts!r} do not start at h = {h}"
                )
                continue
            freed = [i for i in range(len(counts) - 1) if counts[i + 1] <= m]
            if layers not in ([], freed):
                finding(
                    f"revealed noise layers {layers} for {m} survivors; only layers {freed} (or none) "
                    f"of its counts {counts} leave the honest survivors the charged noise"
                )
                continue
            sized = max(r for r in counts if r <= m)
            kept = mu / (sized - c) if layers else share
            logged = _number(payload.get("kept_variance"))
            if logged is None or abs(logged - kept) > 1e-9 * kept or (m - c) * kept < mu * (1 - 1e-12):
                finding(
                    f"logs a kept noise variance of {payload.get('kept_variance')!r} for {m} survivors; "
                    f"the plan gives {kept:.6g} (mu_total / (r − c) = {mu:.6g} / {sized - c}, "
                    f"r = {sized} ≤ m)"
                )
    return findings


def removal_findings(
    logs: Sequence[SiteRounds], removals: Sequence[tuple[str, int | None, int, Any]]
) -> list[Finding]:
    """The server's removals (path, line, round, {site: m}) must each match a reveal the site itself
    logged for that round, with the same m and its layers: the server removes only what it was given."""
    findings = []
    by_site = {log.site: log for log in logs}
    for path, line, round_, removed in removals:
        if not isinstance(removed, dict):
            findings.append(Finding(path, line, f"round {round_}: a noise-layer removal names no sites"))
            continue
        for site, m in sorted(removed.items()):
            log = by_site.get(site)
            if log is None:  # the site's log is not among those checked: nothing to compare with
                continue
            own = [p for _, p in log.reveals.get(round_, [])]
            if not any(p.get("survivors") == m and p.get("layers") for p in own):
                findings.append(
                    Finding(
                        path,
                        line,
                        f"round {round_}: the server removed {site}'s noise layers for {m} survivors, but "
                        f"{site}'s log holds no reveal of layers for {m} survivors in round {round_}",
                    )
                )
    return findings


def distributed_findings(logs: Sequence[SiteRounds]) -> list[Finding]:
    per_round = plan_findings(logs) + plan_change_findings(logs) + unshared_findings(logs)
    return per_round + survivor_findings(logs) + reveal_findings(logs)
