"""The report's table of every mechanism that touched patient data, and each mechanism in words
as this run ran it (its logged settings)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from secure_fed.verifier.report_markup import (
    esc,
    num,
)
from secure_fed.verifier.report_types import MechanismRow

# Short cells only, so that every column fits a 1280 px window: the mechanisms in words are listed
# under the table, once each, not repeated on every row.
_COLUMNS: list[tuple[str, str]] = [
    ("site", "site"),
    ("population", "patient group"),
    ("population_size", "group size"),
    ("round", "round"),
    ("mechanism", "mechanism"),
    ("sampling_rate", "q"),
    ("noise_multiplier", "σ"),
    ("clip_norm", "C"),
    ("steps", "releases"),
    ("delta", "δ"),
    ("epsilon_rdp", "cumulative ε RDP (logged)"),
    ("rederived_rdp", "ε RDP (re-derived)"),
    ("epsilon_prv", "cumulative ε PRV (logged)"),
    ("rederived_pld", "ε PLD (re-derived)"),
    ("budget", "budget ε"),
    ("matches", "re-derived ε matches"),
]

# Each mechanism in words, for a reader who does not know the symbols.
MECHANISM_WORDS: dict[str, str] = {
    "dp_sgd": (
        "training of the shared model (DP-SGD): each step samples each patient with probability q, "
        "clips the patient's gradient to norm C and adds Gaussian noise of σ·C"
    ),
    "gmm_histogram": (
        "counts of patients per age band and sex, released once with Gaussian noise of σ per count, "
        "from which the site fits its patient groups"
    ),
    "alpha_scalars": (
        "how much each of the site's validation patients favours each time step (α hypergradients): "
        "clipped per patient to C, Gaussian noise of σ·C"
    ),
}
# How the α scalars were summed, by the run's logged `he` setting (None: no run_config logged).
_ALPHA_SUM: dict[bool | None, str] = {
    True: ", then summed with the other sites under CKKS encryption (the server saw only the total)",
    False: ", then sent as plain values for the server to sum (no encryption: it saw this site's values)",
    None: "; how they were summed is not recorded in the logs given",
}


# How a distributed run's ε counted the patients' Poisson sampling (its logged dp.amplification).
_AMPLIFICATION_WORDS: dict[str | None, str] = {
    "symmetric": (
        "; ε counts the sampling with the exact expansion used for sampled Gaussian noise, valid "
        "for this noise because it is symmetric about zero (proof: docs/THREAT_MODEL.md)"
    ),
    "general": (
        "; ε counts the sampling with Zhu & Wang's general bound, valid for any noise and looser "
        "(more noise for the same ε)"
    ),
}


def mechanism_words(mechanism: str, settings: Mapping[str, Any] | None) -> str:
    """The mechanism in words, as this run ran it (its logged settings, not the default)."""
    words = MECHANISM_WORDS.get(mechanism, "a noisy release (see the mechanism's parameters)")
    if mechanism == "dp_sgd" and settings is not None and settings.get("noise") == "distributed":
        h, c = settings.get("honest_min"), settings.get("colluders")
        words = (
            "training of the shared model with distributed noise: each round is one step over every "
            "site's patients, each sampled with probability q and its gradient clipped to norm C; each "
            "site added only an integer share of Skellam noise inside SecAgg+, sized so that the honest "
            f"sites among any h = {'all sites but c' if h is None else h} survivors carry the whole "
            f"noise even when c = {c} of them collude with the server and remove their own shares; "
            "sites refuse to unmask a sum with fewer than h survivors (σ: the released sum's noise "
            "over C)"
        )
        words += _AMPLIFICATION_WORDS.get(settings.get("amplification"), "")
    if mechanism == "alpha_scalars":
        if settings is not None and settings.get("noise") == "distributed" and settings.get("he") is True:
            # the run's α noise was shares of its CKKS sum, not each site's own release
            c = settings.get("colluders")
            return (
                "how much each of the site's validation patients favours each time step (α hypergradients): "
                "clipped per patient to C, then summed with the other sites under CKKS encryption (the "
                "server saw only the total); the Gaussian noise σ·C is the sum's, shared by its m sites: "
                "each site added a share of σ·C/√(m − c), sized for the m sites whose signed keys it "
                f"verified, so any m − c honest sites carry all of it (ε holds against a server with at "
                f"most c = {c} colluding sites; with more, the sum carries less noise than charged)"
            )
        words += " added by the site itself" + _ALPHA_SUM[None if settings is None else settings.get("he")]
    return words


def _cell(row: MechanismRow, name: str) -> str:
    value = getattr(row, name)
    if name == "matches":
        return "—" if value is None else ("✓" if value else "✗ MISMATCH")
    if isinstance(value, float):
        return num(value)
    return esc(value)


def _mechanism_table(rows: list[MechanismRow], settings: Mapping[str, Any] | None) -> str:
    header = "".join(f"<th>{esc(title)}</th>" for _, title in _COLUMNS)
    body = "".join(
        "<tr>" + "".join(f"<td>{_cell(row, name)}</td>" for name, _ in _COLUMNS) + "</tr>" for row in rows
    )
    words = "".join(
        f"<li><b>{esc(mechanism)}</b>: {esc(mechanism_words(mechanism, settings))}</li>"
        for mechanism in dict.fromkeys(row.mechanism for row in rows)
    )
    return (
        f"<table id='mechanisms'><tr>{header}</tr>{body}</table>"
        f"<p>What each mechanism released, in words:</p><ul id='mechanism-words'>{words}</ul>"
    )


def mechanisms_html(rows: list[MechanismRow], settings: Mapping[str, Any] | None = None) -> str:
    if not rows:
        return (
            "<p>No privacy mechanism was logged: nothing released in this run carries a "
            "differential-privacy guarantee.</p>"
        )
    return _mechanism_table(rows, settings) + (
        "<p class='muted'>Patient group: training or validation patients (different people, so a patient's "
        "ε is that of their own group); group size: a power-of-two range, never the exact count. "
        "q: the chance each patient is sampled in a step (1: every patient, every time); σ: noise "
        "multiplier (noise standard deviation / C); C: the most one patient can change the released value "
        "(clipping bound; — where the sensitivity is fixed by the mechanism); releases: how many noisy "
        "steps this row adds. ε columns are cumulative for the (site, group) after this row, as the site "
        "logged them, and as re-derived independently with Google's dp_accounting (RDP on Opacus' orders; "
        "PLD for the tight value).</p>"
    )
