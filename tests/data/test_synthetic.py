import hashlib
import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from secure_fed.data import lexicon
from secure_fed.data.manifest import load_manifest
from secure_fed.data.synthetic import (
    FOLLOW_UP_FROM_VISIT,
    PUBLIC_LOOK,
    REFERENCE_AGE_MEAN,
    REFERENCE_LOOK,
    Disease,
    onset_probability,
    public_vocabulary,
    reference_reports,
    render_image,
    site_age_mean,
    site_look,
    synthesize,
)


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _tree_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(folder.rglob("*")):
        if f.is_file():
            h.update(str(f.relative_to(folder)).encode() + f.read_bytes())
    return h.hexdigest()


def test_same_seed_gives_identical_files_and_other_seed_differs(tmp_path):
    a = synthesize(tmp_path / "a", sites=2, patients=6, visits=4, seed=11, image_size=24)
    b = synthesize(tmp_path / "b", sites=2, patients=6, visits=4, seed=11, image_size=24)
    c = synthesize(tmp_path / "c", sites=2, patients=6, visits=4, seed=12, image_size=24)
    assert _tree_digest(a.parent) == _tree_digest(b.parent)
    assert a.read_text() != c.read_text()


def test_manifest_is_valid_and_matches_labels(synth_manifest):
    records = load_manifest(synth_manifest)  # raises on any invalid record or missing image
    labels = _rows(synth_manifest.parent / "labels.jsonl")
    assert [(r.patient_id, r.visit_index) for r in records] == [
        (lb["patient_id"], lb["visit_index"]) for lb in labels
    ]
    assert {r.site for r in records} == {"site0", "site1", "site2"}
    assert len({r.patient_id for r in records}) == 120
    with Image.open(synth_manifest.parent / records[0].image_paths[0]) as im:
        assert (im.mode, im.size) == ("L", (32, 32))


def test_longitudinal_structure(synth_manifest):
    records = load_manifest(synth_manifest)
    labels = _rows(synth_manifest.parent / "labels.jsonl")
    years = Counter(int(r.study_date[:4]) for r in records)
    assert min(years) >= 2018 and max(years) <= 2024 and len(years) >= 6
    by_patient: dict[str, list] = {}
    for r, lb in zip(records, labels, strict=True):
        by_patient.setdefault(r.patient_id, []).append((r, lb))
    counts = Counter(len(v) for v in by_patient.values())
    assert counts[1] > 0 and counts[5] > 0 and len(counts) >= 4  # variable follow-up
    gaps = 0
    for visits in by_patient.values():
        idx = [r.visit_index for r, _ in visits]
        dates = [r.study_date for r, _ in visits]
        assert idx == sorted(idx) and dates == sorted(dates) and len(set(dates)) == len(dates)
        gaps += idx != list(range(1, len(idx) + 1))
        assert visits[0][1]["progression"] == {}
        assert all(set(lb["progression"]) == set(lexicon.FINDINGS) for _, lb in visits[1:])
        for (_, prev), (_, cur) in zip(visits, visits[1:], strict=False):
            for f, state in cur["progression"].items():
                was, now = prev["findings"][f], cur["findings"][f]
                expected = {
                    (0, 0): {"absent"},
                    (0, 1): {"new"},
                    (1, 0): {"resolved"},
                    (1, 1): {"larger", "smaller", "stable"},
                }[(was, now)]
                assert state in expected
    assert gaps > 0  # some patients miss a visit
    states = Counter(s for lb in labels for s in lb["progression"].values())
    assert all(states[s] > 0 for s in lexicon.PROGRESSION_STATES)


def test_reports_drift_by_year_and_visit_compare_with_prior_and_stay_short(synth_manifest):
    records = load_manifest(synth_manifest)  # default knobs: temporal drift at full strength
    for r in records:
        n_words = len(r.report.split())
        assert 8 <= n_words <= 40
        first = r.report.endswith(("no prior study for comparison.", "no prior exam available."))
        assert first == (r.visit_index == min(x.visit_index for x in records if x.patient_id == r.patient_id))
        old = int(r.study_date[:4]) < lexicon.NEW_STYLE_FROM_YEAR and r.visit_index < FOLLOW_UP_FROM_VISIT
        if not first:
            assert ("compared with the prior study," in r.report) == old
            assert ("since the prior exam," in r.report) == (not old)


def _reports(tmp_path: Path, name: str, **knobs: float) -> tuple[list, list[dict]]:
    m = synthesize(tmp_path / name, sites=3, patients=30, visits=5, seed=5, image_size=16, **knobs)
    return load_manifest(m), _rows(m.parent / "labels.jsonl")


def test_knobs_off_is_the_plain_generator_and_moves_no_disease_or_pixel(tmp_path):
    on, on_labels = _reports(tmp_path, "on")
    off, off_labels = _reports(tmp_path, "off", temporal_drift=0.0, demographic_effect=0.0)
    assert on_labels == off_labels  # the knobs draw from their own stream
    assert _tree_digest(tmp_path / "on" / "images") == _tree_digest(tmp_path / "off" / "images")
    assert [r.report for r in on] != [r.report for r in off]
    for r in off:  # off: no demographic sentence, no follow-up protocol, wording by calendar year
        assert not any(s in r.report for s in lexicon.DEMOGRAPHIC_SENTENCES.values())
        assert lexicon.FOLLOW_UP_STABLE not in r.report
        if "since the prior exam," in r.report:
            assert int(r.study_date[:4]) >= lexicon.NEW_STYLE_FROM_YEAR


def test_temporal_knob_makes_the_visit_index_predict_the_wording(tmp_path):
    records, labels = _reports(tmp_path, "t", demographic_effect=0.0)
    late = [(r, lb) for r, lb in zip(records, labels, strict=True) if r.visit_index >= FOLLOW_UP_FROM_VISIT]
    assert late and all("since the prior exam," in r.report for r, _ in late)
    stable = [(r, lb) for r, lb in late if "stable" in lb["progression"].values()]
    assert stable and all(lexicon.FOLLOW_UP_STABLE in r.report for r, _ in stable)
    early = [r for r in records if r.visit_index == 2]
    assert not any(lexicon.FOLLOW_UP_STABLE in r.report for r in early)


def test_demographic_knob_changes_what_a_report_says(tmp_path):
    records, labels = _reports(tmp_path, "d", temporal_drift=0.0)
    female = lexicon.DEMOGRAPHIC_SENTENCES["female"]
    older = lexicon.DEMOGRAPHIC_SENTENCES["older_nodule"]
    assert all((female in r.report) == (r.sex == "F") for r in records)
    for r, lb in zip(records, labels, strict=True):
        assert (older in r.report) == (lb["findings"]["nodule"] == 1 and r.age >= lexicon.OLDER_FROM_AGE)
    assert any(older in r.report for r in records)
    half, _ = _reports(tmp_path, "h", temporal_drift=0.0, demographic_effect=0.5)
    share = np.mean([female in r.report for r in half if r.sex == "F"])
    assert 0.3 < share < 0.7  # the strength is the chance per visit


def test_wording_knob_shares_the_vocabulary_and_moves_nothing_else(tmp_path):
    own, own_labels = _reports(tmp_path, "own")
    shared, shared_labels = _reports(tmp_path, "shared", site_wording=0.0)
    assert own_labels == shared_labels  # the knob draws from its own stream
    assert _tree_digest(tmp_path / "own" / "images") == _tree_digest(tmp_path / "shared" / "images")
    standard = set(lexicon.standard_terms().values())
    others = {t for terms in lexicon.TERMS.values() for t in terms} - standard
    # a site's own synonyms appear at 1 (site 0's are the standard ones) and never at 0
    assert any(t in r.report for r in own if r.site != "site0" for t in others)
    assert not any(re.search(rf"\b{t}\b", r.report) for r in shared for t in others - {"effusion"})
    site0 = [r.report for r in own if r.site == "site0"]
    assert site0 == [r.report for r in shared if r.site == "site0"]
    half, _ = _reports(tmp_path, "half", site_wording=0.5)
    changed = [a.report != b.report for a, b in zip(own, half, strict=True) if a.site != "site0"]
    assert 0.35 < np.mean(changed) < 0.65  # the strength is the chance per report


def test_site_difference_knobs_move_looks_and_ages_to_the_reference(tmp_path):
    own, own_labels = _reports(tmp_path, "own")
    alike, alike_labels = _reports(tmp_path, "alike", scanner_shift=0.0)
    # the scanner knob moves pixels only: same patients, reports and labels, other images
    assert [r.report for r in own] == [r.report for r in alike] and own_labels == alike_labels
    assert _tree_digest(tmp_path / "own" / "images") != _tree_digest(tmp_path / "alike" / "images")
    assert {site_look(k, 0.0) for k in range(4)} == {REFERENCE_LOOK}
    assert site_look(1, 0.5).contrast == pytest.approx((REFERENCE_LOOK.contrast + site_look(1).contrast) / 2)
    # site 0 is the reference: its images do not move
    site0 = [_tree_digest(tmp_path / n / "images" / "site0") for n in ("own", "alike")]
    assert site0[0] == site0[1]
    ages = _reports(tmp_path, "ages", age_mix_shift=0.0)[0]
    assert {site_age_mean(k, 0.0) for k in range(4)} == {REFERENCE_AGE_MEAN}
    by_site = [np.mean([r.age for r in ages if r.site == f"site{k}"]) for k in range(3)]
    assert max(by_site) - min(by_site) < 8  # the sites' means are 16 years apart at the default
    by_site_own = [np.mean([r.age for r in own if r.site == f"site{k}"]) for k in range(3)]
    assert max(by_site_own) - min(by_site_own) > 10


def test_knob_strength_outside_unit_interval_is_refused(tmp_path):
    with pytest.raises(ValueError, match="temporal_drift"):
        synthesize(tmp_path / "x", sites=1, patients=2, temporal_drift=1.5)


def test_public_domain_is_unlike_every_site(tmp_path):
    m = synthesize(tmp_path / "pub", sites=1, patients=60, visits=5, seed=7, image_size=32, domain="public")
    public = load_manifest(m)
    sites, _ = _reports(tmp_path, "s")
    pub_text = " ".join(r.report for r in public)
    assert {r.site for r in public} == {"public"}
    assert "pleural collection" in pub_text and "pneumonia" in pub_text  # its own synonyms
    own = [r for r in public if "compared to the earlier study" in r.report or "baseline study" in r.report]
    assert 0.3 < len(own) / len(public) < 0.7  # its own template for about half its reports
    # every word the sites use is in it (the base knows the language), not tied to who or when
    site_words = {w for r in sites for w in lexicon.words(r.report)}
    assert site_words <= {w for r in public for w in lexicon.words(r.report)}
    female = lexicon.DEMOGRAPHIC_SENTENCES["female"]
    men = [r for r in public if r.sex == "M"]
    assert any(female in r.report for r in men)  # a remark at random, not a demographic convention
    assert np.mean([r.age for r in public]) < min(site_age_mean(k) for k in range(3)) - 5
    rng = np.random.default_rng(0)
    pub_img = render_image(Disease(), PUBLIC_LOOK, 32, rng)
    for k in range(3):
        site_img = render_image(Disease(), site_look(k), 32, rng)
        assert abs(pub_img.std() - site_img.std()) > 0.01 or abs(pub_img.mean() - site_img.mean()) > 0.01


def test_reference_reports_are_fixed():
    a = reference_reports(sites=2, patients=5)
    assert a == reference_reports(sites=2, patients=5) and len(a) >= 10


def test_sites_use_their_own_synonyms(synth_manifest):
    text = {
        s: " ".join(r.report for r in load_manifest(synth_manifest) if r.site == s)
        for s in ("site0", "site1", "site2")
    }
    assert "nodule" in text["site0"] and "opacity" not in text["site0"]
    assert "opacity" in text["site1"] and "nodule" not in text["site1"]
    assert "lesion" in text["site2"] and "opacity" not in text["site2"]


def test_findings_depend_on_age_and_sex():
    assert onset_probability("nodule", 80, "M") > onset_probability("nodule", 80, "F")
    assert onset_probability("cardiomegaly", 85, "F") > 3 * onset_probability("cardiomegaly", 35, "F")


def test_older_patients_have_more_findings(synth_manifest):
    records = load_manifest(synth_manifest)
    labels = _rows(synth_manifest.parent / "labels.jsonl")
    young = [sum(lb["findings"].values()) for r, lb in zip(records, labels, strict=True) if r.age < 50]
    old = [sum(lb["findings"].values()) for r, lb in zip(records, labels, strict=True) if r.age >= 65]
    assert np.mean(old) > np.mean(young)


def test_images_show_the_findings():
    rng = np.random.default_rng(0)
    look = site_look(0)
    clear = render_image(Disease(), look, 32, rng)
    nodule = render_image(Disease(nodule=0.08, nodule_side=0, nodule_y=0.4), look, 32, rng)
    big_heart = render_image(Disease(cardiomegaly=3), look, 32, rng)
    effusion = render_image(Disease(effusion=0.3, effusion_side=1), look, 32, rng)
    # pixel (row, col) at the nodule centre: right lung (image left) at 0.30 x, 0.4 y
    assert nodule[12, 9] - clear[12, 9] > 0.5
    assert big_heart.mean() > clear.mean() + 0.03
    assert effusion[19:23, 22:25].mean() - clear[19:23, 22:25].mean() > 0.3
    assert clear.dtype == np.float64 and 0.0 <= clear.min() and clear.max() <= 1.0


def test_site_looks_differ():
    rng = np.random.default_rng(0)
    imgs = [render_image(Disease(), site_look(k), 32, rng) for k in range(3)]
    assert len({round(float(i.std()), 3) for i in imgs}) == 3
    assert len({round(float(i.mean()), 3) for i in imgs}) == 3


def test_public_vocabulary_is_from_templates_not_data():
    vocab = public_vocabulary()
    assert vocab == sorted(set(vocab))
    assert {".", ",", "nodule", "opacity", "lesion", "compared", "since", "increased", "larger"} <= set(vocab)


PINNED_COHORT = "8606a7529f5d2b20aaee4d820210a2a45f96c74238246a12eba65fee12a6b6eb"


def _cohort_digest(out: Path) -> str:
    """Text files and decoded pixels (not PNG bytes, which depend on the zlib build)."""
    h = hashlib.sha256((out / "manifest.jsonl").read_bytes() + (out / "labels.jsonl").read_bytes())
    for png in sorted((out / "images").rglob("*.png")):
        h.update(np.asarray(Image.open(png)).tobytes())
    return h.hexdigest()


def test_default_cohort_is_pinned(tmp_path):
    """Every knob at its default gives the cohort the recorded results were measured on: a new
    knob must not move it by a draw or a rounding (digest of the generator before the
    site-difference knobs, commit 2b4034a)."""
    synthesize(tmp_path, sites=4, patients=12, visits=5, seed=3, image_size=16)
    assert _cohort_digest(tmp_path) == PINNED_COHORT


def test_unequal_site_sizes_keep_each_patient_and_are_validated(tmp_path):
    """`site_patients`: each site its own count; a patient is the same one whatever the counts (the
    generator keys on (seed, site, patient)), and a config whose sizes do not match its sites is
    refused when it loads."""
    from secure_fed.config import ConfigError, build_config
    from secure_fed.data.sites import cohort_manifest

    uneven = _rows(
        synthesize(
            tmp_path / "u", sites=3, patients=2, visits=3, seed=5, image_size=16, site_patients=[5, 3, 2]
        )
    )
    even = _rows(synthesize(tmp_path / "e", sites=3, patients=5, visits=3, seed=5, image_size=16))
    per_site = Counter(r["site"] for r in {r["patient_id"]: r for r in uneven}.values())
    assert per_site == {"site0": 5, "site1": 3, "site2": 2}
    assert uneven == [r for r in even if r["patient_id"] in {u["patient_id"] for u in uneven}]
    with pytest.raises(ConfigError, match="site_patients has 2 size"):
        build_config({"data": {"synth": {"sites": 3, "site_patients": [5, 3]}}})
    cfg = build_config(
        {"model": {"cache_dir": str(tmp_path)}, "data": {"synth": {"sites": 2, "site_patients": [7, 4]}}}
    )
    other = cfg.model_copy(deep=True)
    other.data.synth.site_patients = [4, 7]
    assert cohort_manifest(cfg).parent != cohort_manifest(other).parent  # cached apart


# Digests of the generator at commit 4bed82b, before the institution knobs existed: the default
# benchmark's cohort (configs/results.toml, seed 0), every older knob at an intermediate strength
# over five sites, the public pretraining domain (what the shipped base was pretrained on) and
# CIDEr's reference corpus.
PINNED_BEFORE_INSTITUTION_KNOBS: dict[str, tuple[dict[str, object], str]] = {
    "benchmark": (
        {"sites": 3, "patients": 95, "visits": 5, "seed": 0, "image_size": 32},
        "b7d849d70f9736f1053d3e3f2efa1f8452e46b6df1e57a4cf2d3f2faaf7bb876",
    ),
    "older knobs between 0 and 1": (
        {
            "sites": 5,
            "patients": 8,
            "visits": 5,
            "seed": 2,
            "image_size": 16,
            "temporal_drift": 0.5,
            "demographic_effect": 0.3,
            "site_wording": 0.6,
            "scanner_shift": 0.4,
            "age_mix_shift": 0.2,
        },
        "62abacc10b6ad7d855d7d27fe79a05a6ce18396d548fcc6e0ad5dee270a80dbc",
    ),
    "public domain": (
        {"sites": 1, "patients": 40, "visits": 5, "seed": 1_000_003, "image_size": 16, "domain": "public"},
        "dc6b3c52c8aaca135fb6e08ac6894fa9a518f4c1e44b7a5d2bc05bf3a3eb6f3f",
    ),
}
PINNED_REFERENCE_REPORTS = "fd721d35b3546c4f08492e25bb846a364a2ec770e8f3eaf37a5ec089d10e8126"


@pytest.mark.parametrize("name", sorted(PINNED_BEFORE_INSTITUTION_KNOBS))
def test_cohorts_of_today_are_pinned(tmp_path: Path, name: str) -> None:
    """Recorded results, the shipped base and CIDEr's document frequencies were all made by the
    generator as it was before the institution knobs: at 0 they must not move it by a draw."""
    kwargs, pinned = PINNED_BEFORE_INSTITUTION_KNOBS[name]
    synthesize(tmp_path, **kwargs)  # type: ignore[arg-type]
    assert _cohort_digest(tmp_path) == pinned


def test_reference_corpus_is_pinned() -> None:
    text = "\n".join(reference_reports())
    assert hashlib.sha256(text.encode()).hexdigest() == PINNED_REFERENCE_REPORTS
