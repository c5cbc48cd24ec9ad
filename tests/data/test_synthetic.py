import hashlib
import json
from collections import Counter
from pathlib import Path

import numpy as np
from PIL import Image

from secure_fed.data import lexicon
from secure_fed.data.manifest import load_manifest
from secure_fed.data.synthetic import (
    Disease,
    onset_probability,
    public_vocabulary,
    render_image,
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


def test_reports_drift_by_year_compare_with_prior_and_stay_short(synth_manifest):
    records = load_manifest(synth_manifest)
    for r in records:
        n_words = len(r.report.split())
        assert 8 <= n_words <= 32
        first = r.report.endswith(("no prior study for comparison.", "no prior exam available."))
        assert first == (r.visit_index == min(x.visit_index for x in records if x.patient_id == r.patient_id))
        old = int(r.study_date[:4]) < lexicon.NEW_STYLE_FROM_YEAR
        if not first:
            assert ("compared with the prior study," in r.report) == old
            assert ("since the prior exam," in r.report) == (not old)


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
