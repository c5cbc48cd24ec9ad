"""A synthetic longitudinal chest-imaging cohort whose images determine their reports.

Sites differ in wording (synonyms) and scanner look (contrast, brightness, noise) and in the age
mix of their patients; findings depend on age and sex and evolve between visits (a nodule grows or
shrinks, an effusion appears or resolves); the report template changes in 2021 and every follow-up
report compares with the prior study. Everything is drawn from ``numpy`` generators keyed by
(seed, site, patient), so a cohort is reproducible and a patient does not change when the number of
patients does.

Two knobs add the phenomena FedTAR's paper claims for real longitudinal data; each has a strength in
[0, 1] (the chance, per visit, that the phenomenon applies) and an off position (0), and with both
off the cohort is the plain generator, a null control for FedTAR's extra parts:

- ``temporal_drift``: from the third visit on, a patient is in follow-up surveillance and the
  report uses the follow-up protocol: the current ("new") template whatever the year, and a stable
  finding is named as "unchanged" in the comparison. The visit index (which FedTAR's per-index
  copies see) then predicts the wording; off, the wording depends on the calendar year only, which
  no model input carries.
- ``demographic_effect``: a report says things because of who the patient is: a nodule in a
  patient aged 65 or more gets a CT follow-up recommendation, a woman's report mentions breast
  tissue over the lower zones. Age and sex are in the patient profile (FedTAR's hyper-LoRA sees
  them, a plain model does not); off, demographics change only the chance of each finding.

A third knob sets how much the sites' wording differs, which is what federation has to share:

- ``site_wording``: the chance that a report uses its site's own synonyms; otherwise it uses the
  standard terms (``lexicon.STANDARD_VARIANT``), as a department that has adopted a structured
  reporting standard (RadLex terms, RSNA RadReport templates) does for some of its reports. At 1
  (the default) every site words every report its own way; at 0 every site shares one vocabulary
  and the sites differ only in scanner look, age mix and patients.

Two more set how much the sites differ in their images and their patients, each an interpolation
towards a reference site (1 = the sites as drawn, the default; 0 = every site alike):

- ``scanner_shift``: each site's scanner look (contrast, brightness, noise) moves this far from
  the reference look (site 0's) towards its own: feature shift between hospitals' machines.
- ``age_mix_shift``: each site's mean patient age moves this far from the reference mean (58, the
  middle of the sites' means) towards its own; older sites have more of every finding but
  consolidation, so this is the prior (label) shift between a referral centre and a younger
  catchment.

With the wording knob at 0 as well, the sites differ only in their patients (IID sites).

Two more model what the FedTAR paper observed in its own cohort (its Fig. 1): report semantics that
drift year by year within each institution over 2018-2024, and institutions whose reports form
separate clusters. Both act on three report conventions (``CONVENTIONS``), each a choice between
today's way of writing and another made of the same sentences: the heart sentence first, the
comparison sentence first, and no pertinent negatives for the pleura and heart. Each site has a
public style (``institution_style``): the conventions of its house, a target its wording moves
towards (two of the three conventions flipped) and a pace of its own. Both knobs are 0 by default,
and at 0 the cohort is the generator without them, byte for byte:

- ``institution_clusters``: the chance that a report keeps each of its site's house conventions;
  at 1 every report of a site is written in its house style, and the first four sites' house
  styles differ pairwise in two of the three conventions.
- ``institution_drift``: the pace of the yearly drift. In exam year y a convention's chance moves
  from where the house style puts it towards the site's target by
  ``institution_drift * pace * (y - 2018) / 6``: each site changes two conventions of its own, in
  its own direction (adopting a habit, or dropping one of its house) and at its own pace. The exam
  year advances with the visit index (by about half a year a visit), so the visit index carries
  each site's drift differently.

Neither moves a disease, date or pixel (the conventions draw from a stream of their own), and
neither writes a word the generator did not write before (they reorder and omit sentences), so the
public vocabulary, the tokenizer and the bases pretrained with it are unchanged.

``domain="public"`` draws the public pretraining cohort instead: an archive unlike every site, with
its own scanner look, a younger and wider age mix, and its own wording: half its reports in its own
template and synonyms, the rest mixing every site's words at random, so that the base knows every
word but no site's conventions (which synonyms, which template when, the follow-up protocol, the
demographic remarks: these appear in it at random, tied to nothing).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from PIL import Image

from secure_fed.data import lexicon
from secure_fed.data.lexicon import FINDINGS

FIRST_DAY = dt.date(2018, 1, 1)
LAST_DAY = dt.date(2024, 12, 31)
VISIT_GAP_DAYS = (90, 365)
SKIP_PROBABILITY = 0.1
FULL_FOLLOW_UP = 0.4  # share of patients seen at every one of the T visits

# Lung fields, as fractions of the image: (centre x, centre y, radius x, radius y), right then left.
LUNGS = ((0.30, 0.47, 0.16, 0.30), (0.70, 0.47, 0.16, 0.30))
HEART_CENTRE = (0.54, 0.66)
HEART_RADIUS, HEART_GROWTH = 0.12, 0.035

NODULE_ONSET = (0.035, 0.06)
NODULE_STEP = (0.012, 0.025)
NODULE_RESOLVED_BELOW, NODULE_MAX, NODULE_TOL = 0.03, 0.11, 0.006
EFFUSION_ONSET = (0.12, 0.20)
EFFUSION_STEP = (0.06, 0.10)
EFFUSION_RESOLVED_BELOW, EFFUSION_MAX, EFFUSION_TOL = 0.08, 0.45, 0.02


@dataclass(frozen=True)
class SiteLook:
    contrast: float
    brightness: float
    noise: float


@dataclass(frozen=True)
class Disease:
    """The truth behind one visit. Sizes are fractions of the image; 0 means absent."""

    nodule: float = 0.0
    nodule_side: int = 0
    nodule_x: float = 0.0
    nodule_y: float = 0.45
    effusion: float = 0.0
    effusion_side: int = 0
    cardiomegaly: int = 0
    consolidation: int = 0
    consolidation_side: int = 0

    def size(self, finding: str) -> float:
        return float(getattr(self, finding))

    def findings(self) -> dict[str, int]:
        return {f: int(self.size(f) > 0) for f in FINDINGS}


REFERENCE_LOOK = SiteLook(1.0, 0.0, 0.02)
REFERENCE_AGE_MEAN = 58.0


def site_look(site: int, shift: float = 1.0) -> SiteLook:
    base = (REFERENCE_LOOK, SiteLook(0.75, 0.08, 0.05), SiteLook(1.25, -0.06, 0.035))[site % 3]
    own = dataclasses.replace(base, contrast=base.contrast * (1 + 0.05 * (site // 3)))
    if shift == 1.0:
        return own  # exactly as drawn: the default cohort does not move by a rounding
    ref = dataclasses.astuple(REFERENCE_LOOK)
    return SiteLook(*(r + shift * (o - r) for r, o in zip(ref, dataclasses.astuple(own), strict=True)))


def site_age_mean(site: int, shift: float = 1.0) -> float:
    own = 50.0 + 8.0 * (site % 4)
    return own if shift == 1.0 else REFERENCE_AGE_MEAN + shift * (own - REFERENCE_AGE_MEAN)


AGE_SD = 14.0
# The public cohort: a brighter, higher-contrast, nearly noise-free scanner and a younger, wider age
# mix than any site (sites: means 50-74, sd 14), so the base it trains meets a domain shift at every
# site, as a base pretrained on another hospital's archive would.
PUBLIC_LOOK = SiteLook(contrast=1.5, brightness=0.12, noise=0.01)
PUBLIC_AGE_MEAN, PUBLIC_AGE_SD = 36.0, 18.0
FOLLOW_UP_FROM_VISIT = 3

Domain = Literal["sites", "public"]


@dataclass(frozen=True)
class Knobs:
    """Strengths in [0, 1] of the phenomena the module docstring describes; 0 switches one off."""

    temporal_drift: float = 1.0
    demographic_effect: float = 1.0
    site_wording: float = 1.0
    scanner_shift: float = 1.0
    age_mix_shift: float = 1.0
    institution_drift: float = 0.0
    institution_clusters: float = 0.0

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            name, value = field.name, getattr(self, field.name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")


OFF = Knobs(0.0, 0.0)  # the null control: the site-difference knobs are not FedTAR's phenomena
# The institution knobs came after results were recorded with the generator without them: a cohort
# cached before they existed keeps its folder name while they are off (data/sites.py).
TAGGED_WHEN_ON: frozenset[str] = frozenset({"institution_drift", "institution_clusters"})

# The report conventions the institution knobs act on. Each is off in today's reports and only
# reorders or omits the lexicon's sentences, so the public vocabulary does not change with the knobs.
# Terminology is left to the wording knob on purpose: the lexicon's synonyms are the sites' own, so
# drifting towards another set of them would pull a site into another's cluster over the years.
HEART_FIRST = "heart_first"  # the heart sentence opens the findings
COMPARISON_FIRST = "comparison_first"  # the comparison (or no-prior) sentence opens the report
TERSE_NORMALS = "terse_normals"  # the pleura and heart are named only when abnormal
CONVENTIONS: tuple[str, ...] = (HEART_FIRST, COMPARISON_FIRST, TERSE_NORMALS)
# A site drifts in this many conventions: enough for two sites to differ in direction (one adopts a
# habit another drops), and one fewer than all, so that sites differ in which conventions drift too.
DRIFTING_CONVENTIONS = 2
PACE_RANGE = (0.5, 1.0)
# Public, and shared with no cohort's seed: a site is the same hospital in every cohort.
STYLE_SEED = 3_000_017
FIRST_YEAR, LAST_YEAR = FIRST_DAY.year, LAST_DAY.year


@dataclass(frozen=True)
class InstitutionStyle:
    """A site's conventions: ``house`` (its cluster), ``target`` (where its wording moves over the
    years at full pace) and ``pace`` (its own speed, in ``PACE_RANGE``)."""

    house: frozenset[str]
    target: frozenset[str]
    pace: float


def _house_patterns() -> list[frozenset[str]]:
    """Every subset of the conventions, those of an even size first: the first four sites then
    differ pairwise in two of the three (the most separation three binary habits allow)."""
    subsets = [
        frozenset(c for bit, c in enumerate(CONVENTIONS) if code >> bit & 1)
        for code in range(2 ** len(CONVENTIONS))
    ]
    drawn = [subsets[i] for i in np.random.default_rng(STYLE_SEED).permutation(len(subsets))]
    return [s for s in drawn if len(s) % 2 == 0] + [s for s in drawn if len(s) % 2 == 1]


@functools.cache
def institution_style(site: int) -> InstitutionStyle:
    """Site ``site``'s public style: the same for every cohort seed, as a site's synonyms are."""
    house = _house_patterns()[site % 2 ** len(CONVENTIONS)]
    rng = np.random.default_rng([STYLE_SEED, site])
    flipped = {CONVENTIONS[i] for i in rng.choice(len(CONVENTIONS), DRIFTING_CONVENTIONS, replace=False)}
    pace = float(rng.uniform(*PACE_RANGE))
    return InstitutionStyle(house, house.symmetric_difference(flipped), pace)


def convention_share(style: InstitutionStyle, convention: str, year: int, knobs: Knobs) -> float:
    """The chance that a report of exam year ``year`` follows ``convention`` at the site."""
    house = knobs.institution_clusters * (convention in style.house)
    elapsed = min(max(year - FIRST_YEAR, 0), LAST_YEAR - FIRST_YEAR) / (LAST_YEAR - FIRST_YEAR)
    moved = knobs.institution_drift * style.pace * elapsed
    return house + moved * ((convention in style.target) - house)


def institution_conventions(site: int, year: int, knobs: Knobs, rng: np.random.Generator) -> frozenset[str]:
    """The conventions one report follows (one draw per convention, from the style stream)."""
    style = institution_style(site)
    draws = rng.random(len(CONVENTIONS))
    return frozenset(
        c for c, u in zip(CONVENTIONS, draws, strict=True) if u < convention_share(style, c, year, knobs)
    )


def onset_probability(finding: str, age: float, sex: str) -> float:
    """Chance a finding appears between two visits: all but pneumonia-like consolidation rise with age."""
    older = max(0.0, age - 40.0) / 50.0
    male = 1.0 if sex == "M" else 0.0
    female = 1.0 if sex == "F" else 0.0
    p = {
        "nodule": 0.05 + 0.12 * older + 0.04 * male,
        "effusion": 0.03 + 0.10 * older,
        "cardiomegaly": 0.01 + 0.12 * older + 0.03 * male,
        "consolidation": 0.06 + 0.04 * older + 0.02 * female,
    }[finding]
    return min(p, 0.6)


def progression(prev: float, cur: float, tol: float) -> str:
    if prev <= 0 and cur <= 0:
        return "absent"
    if prev <= 0:
        return "new"
    if cur <= 0:
        return "resolved"
    if cur - prev > tol:
        return "larger"
    if prev - cur > tol:
        return "smaller"
    return "stable"


_TOL = {"nodule": NODULE_TOL, "effusion": EFFUSION_TOL, "cardiomegaly": 0.5, "consolidation": 0.5}


def progression_labels(prev: Disease, cur: Disease) -> dict[str, str]:
    return {f: progression(prev.size(f), cur.size(f), _TOL[f]) for f in FINDINGS}


def _onset(d: Disease, finding: str, rng: np.random.Generator) -> Disease:
    side = int(rng.integers(2))
    if finding == "nodule":
        return dataclasses.replace(
            d,
            nodule=float(rng.uniform(*NODULE_ONSET)),
            nodule_side=side,
            nodule_x=float(rng.uniform(-0.06, 0.06)),
            nodule_y=float(rng.uniform(0.30, 0.55)),
        )
    if finding == "effusion":
        return dataclasses.replace(d, effusion=float(rng.uniform(*EFFUSION_ONSET)), effusion_side=side)
    if finding == "cardiomegaly":
        return dataclasses.replace(d, cardiomegaly=1)
    return dataclasses.replace(d, consolidation=1, consolidation_side=side)


def _evolve_nodule(r: float, rng: np.random.Generator) -> float:
    u = rng.random()
    if u < 0.35:
        r += rng.uniform(*NODULE_STEP)
    elif u < 0.6:
        r -= rng.uniform(*NODULE_STEP)
    else:
        r += rng.uniform(-0.002, 0.002)
    return 0.0 if r < NODULE_RESOLVED_BELOW else min(r, NODULE_MAX)


def _evolve_effusion(a: float, rng: np.random.Generator) -> float:
    u = rng.random()
    if u < 0.2:
        return 0.0
    if u < 0.5:
        a += rng.uniform(*EFFUSION_STEP)
    elif u < 0.8:
        a -= rng.uniform(*EFFUSION_STEP)
    else:
        a += rng.uniform(-0.005, 0.005)
    return 0.0 if a < EFFUSION_RESOLVED_BELOW else min(a, EFFUSION_MAX)


def advance(d: Disease, age: float, sex: str, rng: np.random.Generator, onset_scale: float = 1.0) -> Disease:
    """One visit interval of natural history; the first visit is ``advance(Disease(), ...)`` at 2x onset."""
    if d.nodule > 0:
        d = dataclasses.replace(d, nodule=_evolve_nodule(d.nodule, rng))
    elif rng.random() < onset_scale * onset_probability("nodule", age, sex):
        d = _onset(d, "nodule", rng)
    if d.effusion > 0:
        d = dataclasses.replace(d, effusion=_evolve_effusion(d.effusion, rng))
    elif rng.random() < onset_scale * onset_probability("effusion", age, sex):
        d = _onset(d, "effusion", rng)
    if d.cardiomegaly > 0:
        if rng.random() < 0.2:
            d = dataclasses.replace(d, cardiomegaly=min(d.cardiomegaly + 1, len(lexicon.CARDIO_GRADES)))
    elif rng.random() < onset_scale * onset_probability("cardiomegaly", age, sex):
        d = _onset(d, "cardiomegaly", rng)
    if d.consolidation > 0:
        if rng.random() < 0.7:
            d = dataclasses.replace(d, consolidation=0)
    elif rng.random() < onset_scale * onset_probability("consolidation", age, sex):
        d = _onset(d, "consolidation", rng)
    return d


def _size_word(value: float, cuts: tuple[float, float], words: tuple[str, ...]) -> str:
    return words[int(value >= cuts[0]) + int(value >= cuts[1])]


def finding_sentences(
    d: Disease, terms: dict[str, str], style: str, conventions: frozenset[str] = frozenset()
) -> list[str]:
    t = lexicon.TEMPLATES[style]
    out: list[str] = []
    terse = TERSE_NORMALS in conventions
    if d.nodule > 0:
        size = _size_word(d.nodule, (0.055, 0.08), lexicon.NODULE_SIZES)
        out.append(t["nodule"].format(size=size, term=terms["nodule"], side=lexicon.SIDES[d.nodule_side]))
    if d.consolidation > 0:
        out.append(
            t["consolidation"].format(term=terms["consolidation"], side=lexicon.SIDES[d.consolidation_side])
        )
    if d.nodule <= 0 and d.consolidation <= 0:
        out.append(t["normal_lungs"].format(**terms))
    if d.effusion > 0:
        size = _size_word(d.effusion, (0.2, 0.32), lexicon.EFFUSION_SIZES)
        out.append(
            t["effusion"].format(size=size, term=terms["effusion"], side=lexicon.SIDES[d.effusion_side])
        )
    elif not terse:
        out.append(t["normal_effusion"].format(**terms))
    heart: list[str] = []
    if d.cardiomegaly > 0:
        grade = lexicon.CARDIO_GRADES[d.cardiomegaly - 1]
        heart.append(t["cardiomegaly"].format(grade=grade, term=terms["cardiomegaly"]))
    elif not terse:
        heart.append(t["normal_heart"])
    return heart + out if HEART_FIRST in conventions else out + heart


def comparison_sentence(
    changes: dict[str, str] | None, terms: dict[str, str], style: str, name_stable: bool = False
) -> str:
    t = lexicon.TEMPLATES[style]
    if changes is None:
        return t["no_prior"]
    words = dict(lexicon.CHANGE_WORDS[style])
    if name_stable:
        words["stable"] = lexicon.FOLLOW_UP_STABLE
    said = [f"{terms[f]} {words[s]}" for f, s in changes.items() if s in words]
    return t["compare"].format(changes=lexicon.CHANGE_JOINER.join(said) if said else t["no_change"])


def write_report(
    d: Disease,
    changes: dict[str, str] | None,
    terms: dict[str, str],
    year: int,
    follow_up: bool = False,
    remarks: tuple[str, ...] = (),
    conventions: frozenset[str] = frozenset(),
) -> str:
    """``follow_up``: the temporal knob's protocol applies; ``remarks``: demographic sentences;
    ``conventions``: those of the institution knobs' ``CONVENTIONS`` that this report follows."""
    style = "new" if follow_up else lexicon.era(year)
    findings = [*finding_sentences(d, terms, style, conventions), *remarks]
    comparison = comparison_sentence(changes, terms, style, name_stable=follow_up)
    if COMPARISON_FIRST in conventions:
        return " ".join([comparison, *findings])
    return " ".join([*findings, comparison])


PUBLIC_OWN_STYLE = 0.5  # share of public reports in the public department's own template
PUBLIC_REMARK = 0.15  # chance of each knob sentence in a public report, whoever the patient is


def public_report(d: Disease, changes: dict[str, str] | None, rng: np.random.Generator) -> str:
    """A report of the public archive: many departments, so every word of the language appears
    (a tiny decoder only knows the words it was pretrained on, as a real LM knows English), but
    none of a site's conventions: synonyms drawn per report, the public template or either era's
    at random (not by year), knob sentences at random, unrelated to visit index or demographics."""
    terms = {f: lexicon.TERMS[f][int(rng.integers(len(lexicon.TERMS[f])))] for f in FINDINGS}
    style = "public" if rng.random() < PUBLIC_OWN_STYLE else str(rng.choice(["old", "new"]))
    remarks = [s for s in lexicon.DEMOGRAPHIC_SENTENCES.values() if rng.random() < PUBLIC_REMARK]
    name_stable = rng.random() < PUBLIC_REMARK
    return " ".join(
        [
            *finding_sentences(d, terms, style),
            *remarks,
            comparison_sentence(changes, terms, style, name_stable=name_stable),
        ]
    )


def demographic_remarks(
    d: Disease, age: float, sex: str, strength: float, rng: np.random.Generator
) -> tuple[str, ...]:
    """The demographic knob's sentences for one visit (a draw per sentence, so strength 0 is none)."""
    out: list[str] = []
    if d.nodule > 0 and age >= lexicon.OLDER_FROM_AGE and rng.random() < strength:
        out.append(lexicon.DEMOGRAPHIC_SENTENCES["older_nodule"])
    if sex == "F" and rng.random() < strength:
        out.append(lexicon.DEMOGRAPHIC_SENTENCES["female"])
    return tuple(out)


def _soft_disc(xx: np.ndarray, yy: np.ndarray, cx: float, cy: float, r: float, size: int) -> np.ndarray:
    """Coverage of a disc, anti-aliased over one pixel so that sub-pixel growth still shows."""
    d = np.hypot(xx - cx, yy - cy)
    return np.clip((r - d) * size + 0.5, 0.0, 1.0)


def render_image(d: Disease, look: SiteLook, size: int, rng: np.random.Generator) -> np.ndarray:
    """A chest-like float image in [0, 1] in which each present finding is drawn where it is."""
    yy, xx = (np.mgrid[0:size, 0:size] + 0.5) / size
    img = np.full((size, size), 0.55)
    masks = [((xx - cx) / rx) ** 2 + ((yy - cy) / ry) ** 2 <= 1.0 for cx, cy, rx, ry in LUNGS]
    for m in masks:
        img[m] = 0.18
    img[(np.abs(xx - 0.5) < 0.04) & (yy > 0.1)] = 0.6
    heart = _soft_disc(xx, yy, *HEART_CENTRE, HEART_RADIUS + HEART_GROWTH * d.cardiomegaly, size)
    img = img * (1 - heart) + 0.75 * heart
    if d.effusion > 0:
        _, cy, _, ry = LUNGS[d.effusion_side]
        band = masks[d.effusion_side] & (yy > cy + ry - 2 * ry * d.effusion)
        img[band] = 0.7
    if d.consolidation > 0:
        cx, _, _, _ = LUNGS[d.consolidation_side]
        blob = np.exp(-((xx - cx) ** 2 + (yy - 0.62) ** 2) / (2 * 0.07**2))
        img = img + 0.45 * blob * masks[d.consolidation_side]
    if d.nodule > 0:
        cx = LUNGS[d.nodule_side][0] + d.nodule_x
        disc = _soft_disc(xx, yy, cx, d.nodule_y, d.nodule, size)
        img = img * (1 - disc) + 0.95 * disc
    img = 0.5 + look.contrast * (img - 0.5) + look.brightness
    img = img + rng.normal(0.0, look.noise, img.shape)
    return np.clip(img, 0.0, 1.0)


def _visit_slots(rng: np.random.Generator, max_visits: int) -> list[int]:
    """Visit indices a patient attends: up to T, some stop early, a few miss a visit in between."""
    if max_visits == 1:
        return [1]
    share = (1 - FULL_FOLLOW_UP) / (max_visits - 1)
    last = int(rng.choice(np.arange(1, max_visits + 1), p=[share] * (max_visits - 1) + [FULL_FOLLOW_UP]))
    return [v for v in range(1, last + 1) if v in (1, last) or rng.random() >= SKIP_PROBABILITY]


def _visit_dates(rng: np.random.Generator, last_slot: int) -> list[dt.date]:
    """Dates of slots 1..last_slot, spread so that the cohort covers 2018-2024."""
    gaps = rng.integers(VISIT_GAP_DAYS[0], VISIT_GAP_DAYS[1] + 1, size=last_slot - 1)
    span = int(gaps.sum())
    start = FIRST_DAY + dt.timedelta(days=int(rng.integers(0, (LAST_DAY - FIRST_DAY).days - span + 1)))
    offsets = np.concatenate([[0], np.cumsum(gaps)])
    return [start + dt.timedelta(days=int(o)) for o in offsets]


def _patient(
    seed: int,
    site: int,
    index: int,
    max_visits: int,
    image_size: int,
    out_dir: Path | None,
    knobs: Knobs = Knobs(),
    domain: Domain = "sites",
) -> tuple[list[dict], list[dict]]:
    """One patient's visits and labels; images are written under ``out_dir`` (None: no images)."""
    public = domain == "public"
    rng = np.random.default_rng([seed, site, index])
    site_name = "public" if public else f"site{site}"
    pid = f"{site_name}-p{index:04d}"
    terms = lexicon.site_terms(site)
    look = PUBLIC_LOOK if public else site_look(site, knobs.scanner_shift)
    sex = str(rng.choice(["M", "F", "U"], p=[0.485, 0.485, 0.03]))
    age_mean, age_sd = (
        (PUBLIC_AGE_MEAN, PUBLIC_AGE_SD) if public else (site_age_mean(site, knobs.age_mix_shift), AGE_SD)
    )
    base_age = float(np.clip(rng.normal(age_mean, age_sd), 18.0, 95.0))
    # The knobs draw from their own stream, so switching one does not move any disease, date or pixel.
    knob_rng = np.random.default_rng([seed, site, index, 1])
    wording_rng = np.random.default_rng([seed, site, index, 2])
    style_rng = np.random.default_rng([seed, site, index, 3])
    # off means today's reports by construction, not by conventions drawn with chance 0
    institution = knobs.institution_drift > 0 or knobs.institution_clusters > 0
    standard = lexicon.standard_terms()
    slots = _visit_slots(rng, max_visits)
    dates = _visit_dates(rng, slots[-1])
    records: list[dict] = []
    labels: list[dict] = []
    disease, seen = Disease(), None
    for slot in range(1, slots[-1] + 1):
        age = base_age + (dates[slot - 1] - dates[0]).days / 365.25
        disease = advance(disease, age, sex, rng, onset_scale=2.0 if slot == 1 else 1.0)
        if slot not in slots:
            continue  # the disease moves on between the visits the patient missed
        changes = None if seen is None else progression_labels(seen, disease)
        date = dates[slot - 1]
        image_rel = f"images/{site_name}/{pid}_v{slot}.png"
        pixels = render_image(disease, look, image_size, rng)
        if out_dir is not None:
            Image.fromarray(np.round(pixels * 255).astype(np.uint8)).save(out_dir / image_rel)
        if public:
            report = public_report(disease, changes, knob_rng)
        else:
            follow_up = slot >= FOLLOW_UP_FROM_VISIT and knob_rng.random() < knobs.temporal_drift
            remarks = demographic_remarks(disease, age, sex, knobs.demographic_effect, knob_rng)
            own_words = wording_rng.random() < knobs.site_wording
            conventions = (
                institution_conventions(site, date.year, knobs, style_rng) if institution else frozenset()
            )
            report = write_report(
                disease, changes, terms if own_words else standard, date.year, follow_up, remarks, conventions
            )
        records.append(
            {
                "patient_id": pid,
                "visit_index": slot,
                "study_date": date.isoformat(),
                "image": image_rel,
                "report": report,
                "age": round(age, 1),
                "sex": sex,
                "site": site_name,
            }
        )
        labels.append(
            {
                "patient_id": pid,
                "visit_index": slot,
                "findings": disease.findings(),
                "progression": changes or {},
            }
        )
        seen = disease
    return records, labels


def synthesize(
    out_dir: str | Path,
    sites: int = 3,
    patients: int = 60,
    visits: int = 5,
    seed: int = 0,
    image_size: int = 32,
    temporal_drift: float = 1.0,
    demographic_effect: float = 1.0,
    domain: Domain = "sites",
    site_wording: float = 1.0,
    scanner_shift: float = 1.0,
    age_mix_shift: float = 1.0,
    site_patients: Sequence[int] | None = None,
    institution_drift: float = 0.0,
    institution_clusters: float = 0.0,
) -> Path:
    """Write ``manifest.jsonl``, ``labels.jsonl`` and ``images/`` under ``out_dir``; return the manifest.

    ``patients`` is per site (``site_patients``: each site's own count, site 0 first; a patient is
    the same whatever the counts) and ``visits`` the most visits a patient has (T). The knobs are
    described in the module docstring (0 = off). ``domain="public"`` writes the public pretraining
    cohort (``sites`` of it, all in the public domain, knobs ignored). The same arguments always
    give byte-identical files.
    """
    knobs = Knobs(
        temporal_drift,
        demographic_effect,
        site_wording,
        scanner_shift,
        age_mix_shift,
        institution_drift,
        institution_clusters,
    )
    out = Path(out_dir)
    manifest, labels = out / "manifest.jsonl", out / "labels.jsonl"
    all_records: list[dict] = []
    all_labels: list[dict] = []
    if site_patients is not None and len(site_patients) != sites:
        raise ValueError(f"site_patients has {len(site_patients)} sizes for {sites} sites")
    for site in range(sites):
        (out / "images" / ("public" if domain == "public" else f"site{site}")).mkdir(
            parents=True, exist_ok=True
        )
        for index in range(patients if site_patients is None else site_patients[site]):
            recs, labs = _patient(seed, site, index, visits, image_size, out, knobs, domain)
            all_records += recs
            all_labels += labs
    manifest.write_text("".join(json.dumps(r) + "\n" for r in all_records))
    labels.write_text("".join(json.dumps(r) + "\n" for r in all_labels))
    return manifest


# The fixed corpus CIDEr's document frequencies come from (eval/metrics.py): reports of a cohort
# that shares no seed with any run's, at the default knobs, without images.
REFERENCE_SEED = 2_000_003


def reference_reports(sites: int = 3, patients: int = 200, visits: int = 5) -> list[str]:
    """Reports (only) of a fixed synthetic cohort: the same list on every machine and run."""
    return [
        rec["report"]
        for site in range(sites)
        for index in range(patients)
        for rec in _patient(REFERENCE_SEED, site, index, visits, 16, None)[0]
    ]


def public_vocabulary() -> list[str]:
    """Every word the generator can emit at any site in any year, read off its templates."""
    return sorted(lexicon.template_words())
