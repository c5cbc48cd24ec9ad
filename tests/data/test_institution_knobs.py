"""The institution knobs (report drift within each site, sites as separate clusters): their
statistics, read off the reports' text, and that at 0 they are today's generator."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from secure_fed.data import lexicon
from secure_fed.data.synthetic import (
    COMPARISON_FIRST,
    CONVENTIONS,
    FIRST_YEAR,
    HEART_FIRST,
    LAST_YEAR,
    TERSE_NORMALS,
    Knobs,
    _patient,
    convention_share,
    institution_style,
    synthesize,
)
from secure_fed.data.tokenizer import PublicTokenizer
from secure_fed.eval.labeler import label_report
from tests.data.test_synthetic import PINNED_BEFORE_INSTITUTION_KNOBS, _cohort_digest, _tree_digest
from tests.scripts import ROOT

# configs/paper-drift.toml's strengths (docs/experiments/paper-drift.md says why)
PAPER = Knobs(institution_drift=0.5, institution_clusters=1.0)
SITES = 3
YEARS = range(FIRST_YEAR, LAST_YEAR + 1)


def _visits(knobs: Knobs, patients: int = 600, sites: int = SITES, seed: int = 9) -> list[dict]:
    """Reports with their site, year and truth, without writing images (large samples, quickly)."""
    out: list[dict] = []
    for site in range(sites):
        for index in range(patients):
            records, labels = _patient(seed, site, index, 5, 16, None, knobs)
            out += [r | {"truth": lb, "site_index": site} for r, lb in zip(records, labels, strict=True)]
    return out


@pytest.fixture(scope="module")
def paper() -> list[dict]:
    return _visits(PAPER)


def _year(visit: dict) -> int:
    return int(visit["study_date"][:4])


def _yearly_step(site: int, convention: str) -> float:
    style = institution_style(site)
    return convention_share(style, convention, FIRST_YEAR + 1, PAPER) - convention_share(
        style, convention, FIRST_YEAR, PAPER
    )


def _sentences(report: str) -> list[str]:
    return [s.strip() + "." for s in report.split(".") if s.strip()]


_COMPARISON_OPENERS = tuple(
    t[key].split("{")[0] for t in lexicon.TEMPLATES.values() for key in ("compare", "no_prior")
)
_HEART = re.compile(r"\b(heart size|" + "|".join(lexicon.TERMS["cardiomegaly"]) + r")\b")
_NO_EFFUSION = re.compile(r"^no (" + "|".join(lexicon.TERMS["effusion"]) + r")\.$")


def _follows(visit: dict, convention: str) -> bool | None:
    """Whether a report's text shows the convention; None where this report cannot show it."""
    sentences, findings_true = _sentences(visit["report"]), visit["truth"]["findings"]
    comparison_first = sentences[0].startswith(_COMPARISON_OPENERS)
    if convention == COMPARISON_FIRST:
        return comparison_first
    findings = sentences[1:] if comparison_first else sentences
    if convention == HEART_FIRST:
        if not any(_HEART.search(s) for s in findings):
            return None  # a terse report of a normal heart has no heart sentence to place
        return bool(_HEART.search(findings[0]))
    assert convention == TERSE_NORMALS
    if findings_true["effusion"]:
        return None  # an effusion is reported whatever the convention
    return not any(_NO_EFFUSION.match(s) for s in findings)


def _shares(visits: list[dict], site: int, convention: str, key: str = "year") -> dict[int, float]:
    seen: dict[int, list[bool]] = {}
    for v in visits:
        if v["site_index"] != site:
            continue
        shown = _follows(v, convention)
        if shown is not None:
            k = _year(v) if key == "year" else v["visit_index"]
            seen.setdefault(k, []).append(shown)
    return {k: float(np.mean(s)) for k, s in sorted(seen.items())}


def _slope(shares: dict[int, float], counts: dict[int, int]) -> float:
    x, y = np.array(list(shares)), np.array(list(shares.values()))
    w = np.array([counts[k] for k in shares])
    return float(np.polyfit(x, y, 1, w=np.sqrt(w))[0])


def test_off_is_todays_generator_byte_for_byte(tmp_path: Path) -> None:
    """0 is off: the pinned cohorts of the generator before these knobs, the knobs named at 0."""
    for name in ("older knobs between 0 and 1", "benchmark"):
        kwargs, pinned = PINNED_BEFORE_INSTITUTION_KNOBS[name]
        synthesize(tmp_path / name, **kwargs, institution_drift=0.0, institution_clusters=0.0)  # type: ignore[arg-type]
        assert _cohort_digest(tmp_path / name) == pinned
    # and off means off for every report, not on average
    for v in _visits(Knobs(), patients=40):
        assert not _sentences(v["report"])[0].startswith(_COMPARISON_OPENERS)


def test_a_cached_cohort_keeps_its_folder_while_the_knobs_are_off(tmp_path: Path) -> None:
    from secure_fed.config import build_config
    from secure_fed.data.sites import cohort_manifest

    def folder(**synth: float) -> str:
        cfg = build_config(
            {"model": {"cache_dir": str(tmp_path)}, "data": {"synth": {"patients": 2, "sites": 1, **synth}}}
        )
        return cohort_manifest(cfg).parent.name

    assert "institution" not in folder()
    knobs = "temporal_drift1-demographic_effect1-site_wording1-scanner_shift1-age_mix_shift1"
    assert folder() == f"cohort-s1-p2-v5-i32-seed0-g2-{knobs}"
    assert folder(institution_drift=0.5).endswith("-institution_drift0.5")
    assert folder(institution_clusters=1.0).endswith("-institution_clusters1")


def test_the_knobs_change_wording_not_disease_dates_or_pixels(tmp_path: Path) -> None:
    kw = {"sites": SITES, "patients": 30, "visits": 5, "seed": 5, "image_size": 16}
    off = synthesize(tmp_path / "off", **kw)  # type: ignore[arg-type]
    on = synthesize(tmp_path / "on", **kw, institution_drift=0.5, institution_clusters=1.0)  # type: ignore[arg-type]
    assert (off.parent / "labels.jsonl").read_bytes() == (on.parent / "labels.jsonl").read_bytes()
    assert _tree_digest(off.parent / "images") == _tree_digest(on.parent / "images")
    rows_off = [json.loads(x) for x in off.read_text().splitlines()]
    rows_on = [json.loads(x) for x in on.read_text().splitlines()]
    strip = [{k: v for k, v in r.items() if k != "report"} for r in rows_on]
    assert strip == [{k: v for k, v in r.items() if k != "report"} for r in rows_off]
    changed = [a["report"] != b["report"] for a, b in zip(rows_off, rows_on, strict=True)]
    assert 0.3 < np.mean(changed) < 1.0
    # a drifted report says what today's says: the labeler reads the same findings and changes
    for a, b in zip(rows_off, rows_on, strict=True):
        assert label_report(a["report"]) == label_report(b["report"])


def test_prevalence_by_year_and_site_is_todays(paper: list[dict]) -> None:
    today = _visits(Knobs())
    assert [v["truth"] for v in paper] == [v["truth"] for v in today]

    def prevalence(visits: list[dict]) -> Counter:
        found = [(v["site"], _year(v), f) for v in visits for f, x in v["truth"]["findings"].items() if x]
        return Counter(found)

    assert prevalence(paper) == prevalence(today)


def test_every_word_is_in_the_public_vocabulary(paper: list[dict]) -> None:
    """The knobs only reorder and omit the generator's own sentences: the tokenizer (and every
    base pretrained with it) is the same with them on."""
    tok = PublicTokenizer.from_public()
    assert all(tok.unk_id not in tok.encode(v["report"]) for v in paper)


def test_each_site_drifts_year_by_year_at_its_own_pace_and_in_its_own_direction(paper: list[dict]) -> None:
    directions: list[set[tuple[str, int]]] = []
    for site in range(SITES):
        style = institution_style(site)
        own: set[tuple[str, int]] = set()
        for c in CONVENTIONS:
            expected = [convention_share(style, c, y, PAPER) for y in YEARS]
            step = expected[1] - expected[0]
            # linear in the exam year: the same step every year, monotone
            assert np.allclose(np.diff(expected), step)
            if step:
                own.add((c, int(np.sign(step))))
            # what the text shows follows it: the fitted yearly step, and the share in each year
            shares = _shares(paper, site, c)
            counts = Counter(
                _year(v) for v in paper if v["site_index"] == site and _follows(v, c) is not None
            )
            assert _slope(shares, counts) == pytest.approx(step, abs=0.02), (site, c)
            for y, share in shares.items():
                if counts[y] >= 60:
                    assert share == pytest.approx(expected[y - FIRST_YEAR], abs=0.15), (site, c, y)
        assert len(own) == 2  # two conventions drift at every site
        directions.append(own)
    # no two sites drift alike: other conventions or other directions, and other paces
    assert len({frozenset(d) for d in directions}) == SITES
    assert len({round(institution_style(k).pace, 3) for k in range(SITES)}) == SITES
    signs = {sign for d in directions for _, sign in d}
    assert signs == {-1, 1}  # one site drops a house habit while others adopt new ones


def test_the_visit_index_carries_each_sites_drift(paper: list[dict]) -> None:
    """The exam year advances with the visit index, so a drifting convention's share moves with
    the visit index too, at each site in that site's direction."""
    years = {v: np.mean([_year(x) for x in paper if x["visit_index"] == v]) for v in range(1, 6)}
    assert all(years[v + 1] > years[v] for v in range(1, 5))
    toward = 0.0
    for site in range(SITES):
        style = institution_style(site)
        for c in CONVENTIONS:
            shown = [
                (v["visit_index"], _follows(v, c), convention_share(style, c, _year(v), PAPER))
                for v in paper
                if v["site_index"] == site and _follows(v, c) is not None
            ]
            step = _yearly_step(site, c)
            expected = [np.mean([p for i, _, p in shown if i == v]) for v in range(1, 6)]
            observed = [np.mean([f for i, f, _ in shown if i == v]) for v in range(1, 6)]
            n = [sum(i == v for i, _, _ in shown) for v in range(1, 6)]
            if not step:
                assert expected[0] == expected[-1] == observed[0] == observed[-1]
                continue
            # expected from the exam years alone: monotone over the visits, in the site's direction
            assert all(np.sign(b - a) == np.sign(step) for a, b in zip(expected, expected[1:], strict=False))
            # the text follows, visit 1 to 5, within three binomial standard errors
            se = np.sqrt(sum(e * (1 - e) / k for e, k in ((expected[0], n[0]), (expected[-1], n[-1]))))
            moved = observed[-1] - observed[0]
            assert moved == pytest.approx(expected[-1] - expected[0], abs=3 * se), (site, c, observed)
            toward += np.sign(step) * moved
    assert toward > 0.3  # over the sites' six drifting conventions, about 0.05 each


def _bigrams(report: str) -> Counter:
    words = ["<s>", *lexicon.words(report)]
    return Counter(zip(words, words[1:], strict=False))


def _nearest_centroid_accuracy(visits: list[dict]) -> float:
    """Share of reports nearer (cosine, over word bigrams: order counts) to their own site's mean
    report than to another site's, leaving the report out of its own site's mean."""
    vocab = sorted({b for v in visits for b in _bigrams(v["report"])})
    index = {b: i for i, b in enumerate(vocab)}
    x = np.zeros((len(visits), len(vocab)))
    for row, v in enumerate(visits):
        for b, n in _bigrams(v["report"]).items():
            x[row, index[b]] = n
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    site = np.array([v["site_index"] for v in visits])
    sums = np.stack([x[site == k].sum(0) for k in range(SITES)])
    counts = np.array([(site == k).sum() for k in range(SITES)])
    right = 0
    for row in range(len(visits)):
        means = sums.copy()
        means[site[row]] -= x[row]
        means /= (counts - (np.arange(SITES) == site[row]))[:, None]
        cos = means @ x[row] / np.linalg.norm(means, axis=1)
        right += int(np.argmax(cos) == site[row])
    return right / len(visits)


def _similarity(visits: list[dict]) -> tuple[float, float]:
    """Mean cosine similarity of two reports' word-bigram counts: same site, other sites."""
    vocab = sorted({b for v in visits for b in _bigrams(v["report"])})
    index = {b: i for i, b in enumerate(vocab)}
    x = np.zeros((len(visits), len(vocab)))
    for row, v in enumerate(visits):
        for b, n in _bigrams(v["report"]).items():
            x[row, index[b]] = n
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    site = np.array([v["site_index"] for v in visits])
    same = site[:, None] == site[None, :]
    np.fill_diagonal(same, False)
    sim = x @ x.T
    return float(sim[same].mean()), float(sim[site[:, None] != site[None, :]].mean())


def test_sites_form_separate_clusters_of_their_own_style() -> None:
    """With one shared vocabulary (so synonyms separate nothing), sites are told apart by their
    reports' style only when the cluster knob is on: within-site similarity beats between-site."""
    off = _visits(Knobs(site_wording=0.0), patients=150)
    on = _visits(Knobs(site_wording=0.0, institution_clusters=1.0), patients=150)
    within, between = _similarity(off)
    assert abs(within - between) < 0.01
    assert _nearest_centroid_accuracy(off) < 0.45  # chance is 1/3: the sites write alike
    within, between = _similarity(on)
    assert within - between > 0.05
    assert _nearest_centroid_accuracy(on) > 0.75
    houses = [institution_style(k).house for k in range(4)]
    assert all(len(a ^ b) == 2 for i, a in enumerate(houses) for b in houses[i + 1 :])
    assert set().union(*houses) == set(CONVENTIONS)


def test_clusters_stay_separate_in_every_year_while_they_drift(paper: list[dict]) -> None:
    """The paper's two observations at once: each site drifts, and in every year its reports are
    still more like each other than like another site's, with the sites' own synonyms (as
    configured) and, by house style alone, with one shared vocabulary: a site moves less than half
    way to its target by the last year, so never past the midpoint to another site's house."""
    shared = _visits(Knobs(site_wording=0.0, institution_drift=0.5, institution_clusters=1.0))
    for y in YEARS:
        year = [v for v in paper if _year(v) == y]
        within, between = _similarity(year)
        assert within - between > 0.08 and _nearest_centroid_accuracy(year) > 0.9, y
        within, between = _similarity([v for v in shared if _year(v) == y])
        assert within - between > 0.02, y
    assert max(institution_style(k).pace for k in range(8)) * PAPER.institution_drift < 0.5


def test_strengths_outside_the_unit_interval_are_refused(tmp_path: Path) -> None:
    from secure_fed.config import ConfigError, build_config

    for name in ("institution_drift", "institution_clusters"):
        with pytest.raises(ValueError, match=name):
            synthesize(tmp_path / name, sites=1, patients=2, **{name: 1.5})  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match=name):
            build_config({"data": {"synth": {name: -0.1}}})


def test_paper_drift_config_is_the_benchmark_with_the_paper_strengths() -> None:
    from secure_fed.config import load_config

    drift = load_config(ROOT / "configs" / "paper-drift.toml")
    default = load_config(ROOT / "configs" / "results.toml")
    synth = drift.data.synth
    assert (synth.institution_drift, synth.institution_clusters) == (
        PAPER.institution_drift,
        PAPER.institution_clusters,
    )
    off = synth.model_copy(update={"institution_drift": 0.0, "institution_clusters": 0.0})
    assert drift.model_copy(update={"data": drift.data.model_copy(update={"synth": off})}) == default
    doc = (ROOT / "docs" / "experiments" / "paper-drift.md").read_text()
    assert "institution_drift = 0.5" in doc and "institution_clusters = 1.0" in doc
