"""The report's sections after the summary: aggregation rounds and survivor sets, budget refusals,
refused instructions, α and the released model; the empirical lower bounds; the code each site ran."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from secure_fed.audits.log import ACCOUNTANT_LABELS
from secure_fed.verifier.alpha_path import alpha_path
from secure_fed.verifier.alpha_path import report_html as alpha_report_html
from secure_fed.verifier.report_markup import (
    esc,
    h2,
    num,
)
from secure_fed.verifier.report_types import ReportData
from secure_fed.verifier.verdict import Verdict, population_words, stated_whose


def events_html(data: ReportData) -> str:
    parts = []
    if data.secagg_rounds:
        rows = "".join(
            f"<tr><td>{esc(item.get('round'))}</td><td>{esc(item.get('mode'))}</td>"
            f"<td>{esc(', '.join(map(str, item.get('participants', []))))}</td>"
            f"<td>{esc(', '.join(map(str, item.get('dropped', []))) or 'none')}</td></tr>"
            for item in data.secagg_rounds
        )
        parts.append(
            "<h3>Aggregation rounds: participants and dropouts</h3>"
            f"<table><tr><th>round</th><th>sum</th><th>participants</th><th>dropped</th></tr>{rows}</table>"
        )
    if data.survivor_sets:
        parts.append(_survivors_html(data.survivor_sets))
    if data.refusals:
        rows = "".join(
            f"<tr><td>{esc(item.get('site', item.get('party')))}</td><td>{esc(item.get('round'))}</td>"
            f"<td>{_refused_epsilon(item, data.accountant)}</td><td>{esc(item.get('budget'))}</td>"
            f"<td>{esc(item.get('reason'))}</td></tr>"
            for item in data.refusals
        )
        parts.append(
            "<h3>Budget refusals</h3><table><tr><th>site</th><th>round</th><th>ε if it had taken part "
            f"(whose, by which accountant)</th><th>budget</th><th>reason</th></tr>{rows}</table>"
        )
    else:
        parts.append("<p>No budget refusals were logged.</p>")
    if data.instructions:
        rows = "".join(
            f"<tr><td>{esc(item.get('site'))}</td><td>{esc(item.get('round'))}</td><td>{esc(item.get('phase'))}</td>"
            f"<td>{esc(item.get('outcome'))}</td><td>{esc(item.get('code'))}</td>"
            f"<td><code>{esc(str(item.get('digest', ''))[:16])}…</code></td></tr>"
            for item in data.instructions
        )
        parts.append(
            "<h3>Server instructions the sites refused or could not complete</h3><table><tr>"
            "<th>site</th><th>round</th><th>phase</th><th>outcome</th><th>code</th><th>request digest</th>"
            f"</tr>{rows}</table>"
        )
    if data.alpha is not None:
        parts.append(f"<p>Aggregated α (the last round's): {_alpha_words(data.alpha)}</p>")
    parts.append(alpha_report_html(alpha_path(data.alpha_events)))  # by round, flagged outside [0.1, 0.9]
    if data.model_hash is not None:
        parts.append(f"<p>Released model: {_model_words(data.model_hash)}</p>")
    return "".join(parts)


def _refused_epsilon(item: Mapping[str, Any], accountant: str) -> str:
    """'8.31 (validation patients, PRV)': the ε a refused round would have brought, whose it is and
    by which accountant, as the site signed them; a record without its accountant (written before
    it was signed) says what its site's guard used: the run's accountant, RDP where it had none."""
    value = item.get("epsilon_after")
    if not isinstance(value, int | float) or isinstance(value, bool):
        return esc(value)
    whose = [population_words(item["population"])] if item.get("population") else []
    signed = item.get("accountant")
    if signed in ACCOUNTANT_LABELS:
        whose.append(ACCOUNTANT_LABELS[signed])
    elif accountant in ACCOUNTANT_LABELS and accountant != "rdp":  # the guard's fallback: RDP
        whose.append(f"{ACCOUNTANT_LABELS[accountant]}, or RDP where it had none")
    else:
        whose.append("RDP")
    return f"{num(float(value), 4)} ({esc(', '.join(whose))})"


def _alpha_words(payload: Any) -> str:
    """The α weights as numbers, not the record's JSON."""
    values = payload.get("alpha") if isinstance(payload, dict) else payload
    if isinstance(values, list) and all(isinstance(v, int | float) for v in values):
        return ", ".join(f"{v:.3g}" for v in values)
    return f"<code>{esc(json.dumps(payload))}</code>"  # a shape no party writes: shown as logged


def _model_words(payload: Any) -> str:
    """What was released and its SHA-256, not the record's JSON."""
    digest = payload.get("sha256") if isinstance(payload, dict) else None
    if not isinstance(digest, str):
        return f"<code>{esc(json.dumps(payload))}</code>"  # a shape no party writes: shown as logged
    what = payload.get("what")
    return (
        f"{esc(what)}, " if isinstance(what, str) and what else ""
    ) + f"SHA-256 <code>{esc(digest)}</code>"


def survivor_rounds(sets: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per round of distributed DP: how many sites the confirmed survivor set holds against h, which
    sites confirmed it, and whether every site confirmed the same set (what makes the round's ε a bound)."""
    by_round: dict[Any, list[Mapping[str, Any]]] = {}
    for item in sets:
        by_round.setdefault(item.get("round"), []).append(item)
    out = []
    for round_, items in sorted(by_round.items(), key=lambda kv: (kv[0] is None, kv[0])):
        views = {tuple(map(str, item.get("survivors") or [])) for item in items}
        largest = max(views, key=len)
        hs = {item.get("honest_min") for item in items if isinstance(item.get("honest_min"), int)}
        out.append(
            {
                "round": round_,
                "survivors": len(largest),
                "honest_min": min(hs) if hs else None,
                "confirmed_by": sorted(str(item.get("site")) for item in items),
                "one_set": len(views) == 1,
                "holds": len(views) == 1 and (not hs or len(largest) >= min(hs)),
            }
        )
    return out


def _survivors_html(sets: Sequence[Mapping[str, Any]]) -> str:
    rows = "".join(
        f"<tr><td>{esc(r['round'])}</td><td>{esc(r['survivors'])}</td><td>{esc(r['honest_min'])}</td>"
        f"<td>{esc(', '.join(r['confirmed_by']))}</td>"
        f"<td>{'yes' if r['holds'] else 'NO'}</td></tr>"
        for r in survivor_rounds(sets)
    )
    return (
        "<h3>Distributed DP: the survivor set each round, against h</h3>"
        "<p class='muted'>Each site's noise share carries part of the noise; the sum carries all of it only "
        "if at least h sites' shares are in it. Before anything was unmasked, every surviving site confirmed "
        "the survivor set it was shown; a round holds when all confirmed one set of at least h sites.</p>"
        "<table><tr><th>round</th><th>survivors</th><th>h</th><th>confirmed by</th><th>holds</th></tr>"
        f"{rows}</table>"
    )


_AUDITED = {
    "dp_sgd": "its DP-SGD training over all rounds",
    "alpha_scalars": "one release of its α scalars",
    "gmm_histogram": "its GMM histogram release",
}


def empirical_html(data: ReportData, said: Verdict) -> str:
    """ε̂ beside ε per audited site, with what a measured lower bound does and does not say."""
    if not data.empirical_audits:
        return ""
    items = []
    for audit in data.empirical_audits:
        stated, measured = audit.get("stated_epsilon"), audit.get("epsilon_hat")
        again = audit.get("rederived_epsilon_hat")
        check = (
            "re-derived from the logged counts by the verifier"
            if again is not None
            else "not re-derived (verification did not run or could not read the record)"
        )
        verdict = ""
        what = _AUDITED.get(str(audit.get("mechanism")), "its releases")
        if audit.get("mechanism") == "alpha_scalars" and audit.get("noise") == "shares":
            # the site's α noise was its share of the sum's: measured as the sum less c colluders'
            what = (
                f"one release of the α sum as a server with c = {audit.get('colluders')} colluding sites "
                f"sees it (the {audit.get('participants')} sites' noise shares less the colluders')"
            )
        if isinstance(stated, int | float) and isinstance(measured, int | float):
            if measured > stated:
                level = num(100 * (1 - float(audit.get("confidence", 0))), 3)
                verdict = (
                    " <b>The measured lower bound EXCEEDS the stated ε: evidence that the training code "
                    "leaks more than its accountant says (a bug in noise, clipping or accounting).</b> "
                    f"A correct implementation shows this in at most {level} % of audits; rerun the "
                    "audit (it draws a fresh secret seed): a real leak shows again."
                )
            elif isinstance(ceiling := audit.get("epsilon_hat_max"), int | float) and ceiling <= stated:
                # the ceiling is what every guess right would give: an audit that could not fail
                verdict = (
                    f" <b>Inconclusive</b>: with these canaries and guesses the largest ε̂ this audit "
                    f"can report is {num(ceiling, 3)}, not above the stated ε, so even training "
                    "with no noise at all would have shown no violation; rerun with more canaries."
                )
            else:
                verdict = f" ε̂ / ε = {measured / stated:.2f} (1 would be a perfectly tight audit)."
        items.append(
            f"<li><b>{esc(audit.get('site'))}</b>: measured ε̂ = <b>{num(measured, 3)}</b> beside the stated "
            f"ε = <b>{num(stated, 3)}</b>{_stated_whose(audit)} for {esc(what)} "
            f"(δ = {esc(audit.get('delta'))}); "
            f"{esc(audit.get('correct'))} of {esc(audit.get('guesses'))} guesses about "
            f"{esc(audit.get('canaries'))} planted canaries were right, at "
            f"{num(100 * float(audit.get('confidence', 0)), 3)} % confidence; ε̂ {check}.{verdict}</li>"
        )
    return (
        f"{h2('Empirical lower bound on ε', said)}<div id='empirical'>"
        "<p>An audit run planted artificial test patients (canaries) in a site's own training code, each "
        "included or not by a coin flip, and then tried to tell from what the training released which "
        "ones had been included. How often it was right gives ε̂, a <b>measured lower bound</b>: the "
        "true privacy loss is at least ε̂ (at the stated confidence). A correct implementation must keep "
        "ε̂ at or below the stated ε, which is an upper bound proved from the mechanism's settings; "
        "ε̂ above ε is evidence of a bug (a correct implementation shows it in at most 1 − confidence of "
        "audits: 5 % at 95 %). ε̂ below ε does not prove the code right, it only finds no leak "
        "larger than ε̂.</p>"
        f"<ul>{''.join(items)}</ul></div>"
    )


def _stated_whose(audit: Mapping[str, Any]) -> str:
    """' (training patients, RDP)': whose the audit's stated ε is, and by which accountant."""
    whose = stated_whose(audit)
    return f" ({esc(whose)})" if whose else ""


def code_html(data: ReportData, said: Verdict) -> str:
    """Code each site ran: the FAB it approved and the digest of its installed package."""
    if not data.code:
        return ""
    rows = "".join(
        f"<tr><td>{esc(item.get('site', item['party']))}</td>"
        f"<td>{'ran' if item['event'] == 'code' else '<b>refused</b> (not approved)'}</td>"
        f"<td><code>{esc(item.get('fab_sha256'))}</code></td><td><code>{esc(item.get('package_digest'))}</code></td>"
        f"<td>{esc(item.get('version'))}</td></tr>"
        for item in data.code
    )
    return (
        f"{h2('Code each site ran', said)}<table id='code'><tr><th>site</th><th>run</th><th>FAB SHA-256</th>"
        f"<th>installed package digest</th><th>version</th></tr>{rows}</table>"
    )
