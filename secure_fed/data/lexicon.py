"""The synthetic cohort's report language: findings, per-site synonyms, templates per era.

One table feeds three consumers that must agree word for word: the generator (synthetic.py), the
public vocabulary (and so the tokenizer) and the rule-based labeler (eval/labeler.py). Keeping the
words here, and nowhere else, is what makes the vocabulary data-independent: it is read off these
tables, never off generated or private reports.
"""

from __future__ import annotations

import re
import string

FINDINGS: tuple[str, ...] = ("nodule", "effusion", "cardiomegaly", "consolidation")

PROGRESSION_STATES: tuple[str, ...] = ("new", "larger", "smaller", "stable", "resolved", "absent")

# Site k words finding f with TERMS[f][variant(k, f)] (one of the first SITE_VARIANTS); the last
# variant is the public pretraining cohort's own wording, which no site uses. Every variant is part
# of the vocabulary and of the labeler's synonyms.
TERMS: dict[str, tuple[str, ...]] = {
    "nodule": ("nodule", "opacity", "lesion", "nodular density"),
    "effusion": ("pleural effusion", "effusion", "pleural fluid", "pleural collection"),
    "cardiomegaly": ("cardiomegaly", "cardiac enlargement", "heart enlargement", "enlarged heart"),
    "consolidation": ("consolidation", "airspace disease", "infiltrate", "pneumonia"),
}
SITE_VARIANTS = 3
PUBLIC_VARIANT = 3
STANDARD_VARIANT = 0  # the standard terms a site uses when the wording knob says so (site 0's own)

SIDES: tuple[str, ...] = ("right", "left")
NODULE_SIZES: tuple[str, ...] = ("small", "moderate", "large")
EFFUSION_SIZES: tuple[str, ...] = ("small", "moderate", "large")
CARDIO_GRADES: tuple[str, ...] = ("mild", "moderate", "marked")

# The report template changed on this year (wording drift the model has to follow).
NEW_STYLE_FROM_YEAR = 2021

# Per era ("old", "new": the sites; "public": the public pretraining cohort's own department, whose
# conventions no site shares): positive finding sentences, normal sentences, comparison wording.
# Placeholders:
# {term} {size} {side} {grade}; normals also use {nodule} {effusion} {consolidation} (site terms).
TEMPLATES: dict[str, dict[str, str]] = {
    "old": {
        "nodule": "{size} {term} in the {side} lung.",
        "effusion": "{size} {side} {term}.",
        "cardiomegaly": "{grade} {term}.",
        "consolidation": "{side} lower lobe {term}.",
        "normal_lungs": "the lungs are clear.",
        "normal_effusion": "no {effusion}.",
        "normal_heart": "heart size is normal.",
        "no_prior": "no prior study for comparison.",
        "compare": "compared with the prior study, {changes}.",
        "no_change": "no interval change",
    },
    "new": {
        "nodule": "{side} lung {term}, {size}.",
        "effusion": "{side} {term}, {size}.",
        "cardiomegaly": "{term}, {grade}.",
        "consolidation": "{side} lower lobe {term}.",
        "normal_lungs": "no focal {nodule} or {consolidation}.",
        "normal_effusion": "no {effusion}.",
        "normal_heart": "normal heart size.",
        "no_prior": "no prior exam available.",
        "compare": "since the prior exam, {changes}.",
        "no_change": "no change",
    },
    "public": {
        "nodule": "there is a {size} {term} in the {side} lung.",
        "effusion": "there is a {size} {side} {term}.",
        "cardiomegaly": "{term}, {grade} degree.",
        "consolidation": "{term} at the {side} base.",
        "normal_lungs": "no {nodule} or {consolidation} is seen.",
        "normal_effusion": "no {effusion} is seen.",
        "normal_heart": "cardiac size within normal limits.",
        "no_prior": "baseline study.",
        "compare": "compared to the earlier study, {changes}.",
        "no_change": "no interval difference",
    },
}

# How each era words a change; a present finding the comparison does not name is stable.
CHANGE_WORDS: dict[str, dict[str, str]] = {
    "old": {"larger": "increased", "smaller": "decreased", "new": "new", "resolved": "resolved"},
    "new": {"larger": "larger", "smaller": "smaller", "new": "new", "resolved": "resolved"},
    "public": {"larger": "enlarging", "smaller": "improving", "new": "new", "resolved": "cleared"},
}

# The temporal knob's follow-up protocol names a stable finding explicitly, with this word.
FOLLOW_UP_STABLE = "unchanged"

# The demographic knob's sentences: what a site's report says because of who the patient is.
# A nodule in an older patient gets a follow-up recommendation (risk-based nodule guidelines such as
# Fleischner's depend on the patient's risk, of which age is part); a woman's film mentions the
# breast shadows over the lower zones (a routine remark, and a known mimic of basal opacity).
OLDER_FROM_AGE = 65.0
DEMOGRAPHIC_SENTENCES: dict[str, str] = {
    "older_nodule": "ct follow up recommended.",
    "female": "overlying breast tissue noted.",
}

# Words the labeler also accepts for a stated "stable" (the generator never needs them).
STABLE_WORDS: tuple[str, ...] = ("unchanged", "stable")

CHANGE_JOINER = ", "


def era(year: int) -> str:
    return "new" if year >= NEW_STYLE_FROM_YEAR else "old"


def term_variant(site_index: int, finding_index: int) -> int:
    """Which synonym a site uses for a finding: sites past the third mix the variants differently."""
    return (site_index + finding_index * (site_index // SITE_VARIANTS)) % SITE_VARIANTS


def site_terms(site_index: int) -> dict[str, str]:
    return {f: TERMS[f][term_variant(site_index, i)] for i, f in enumerate(FINDINGS)}


def standard_terms() -> dict[str, str]:
    return {f: TERMS[f][STANDARD_VARIANT] for f in FINDINGS}


def public_terms() -> dict[str, str]:
    return {f: TERMS[f][PUBLIC_VARIANT] for f in FINDINGS}


_WORD = re.compile(r"[a-z0-9]+|[.,]")


def words(text: str) -> list[str]:
    """The one word splitter shared by generator, tokenizer and labeler: lowercase words, "." and ","."""
    return _WORD.findall(text.lower())


def template_words() -> set[str]:
    """Every word any template or slot filler can produce (the public vocabulary's source)."""
    vocab: set[str] = set()
    formatter = string.Formatter()
    for table in TEMPLATES.values():
        for template in table.values():
            literal = " ".join(part[0] for part in formatter.parse(template))
            vocab.update(words(literal))
    fillers = [*SIDES, *NODULE_SIZES, *EFFUSION_SIZES, *CARDIO_GRADES, CHANGE_JOINER, FOLLOW_UP_STABLE]
    fillers += list(DEMOGRAPHIC_SENTENCES.values())
    fillers += [t for terms in TERMS.values() for t in terms]
    fillers += [w for table in CHANGE_WORDS.values() for w in table.values()]
    for filler in fillers:
        vocab.update(words(filler))
    return vocab
