"""The 14-observation labeler on hand-written real-style sentences; the synthetic labels unchanged."""

from __future__ import annotations

import math

import pytest

from secure_fed.data.manifest import load_manifest
from secure_fed.data.synthetic import synthesize
from secure_fed.eval.labeler import CHEXPERT, label_chexpert, label_report


@pytest.mark.parametrize(
    ("sentence", "expected"),
    [
        ("No pleural effusion.", {"Pleural Effusion": 0.0, "No Finding": 1.0}),
        ("Possible small left effusion.", {"Pleural Effusion": -1.0}),
        ("Heart size is enlarged.", {"Cardiomegaly": 1.0}),
        ("Heart size is normal. The lungs are clear.", {"Cardiomegaly": 0.0, "No Finding": 1.0}),
        (
            "No focal airspace consolidation, pleural effusion or pneumothorax.",
            {"Consolidation": 0.0, "Pleural Effusion": 0.0, "Pneumothorax": 0.0, "No Finding": 1.0},
        ),
        ("Small left pleural effusion, no pneumothorax.", {"Pleural Effusion": 1.0, "Pneumothorax": 0.0}),
        ("Pneumothorax cannot be excluded.", {"Pneumothorax": -1.0}),
        (
            "Patchy opacity in the left lower lobe may represent pneumonia.",
            {"Lung Opacity": 1.0, "Pneumonia": -1.0},
        ),
        ("Right-sided PICC line in the distal SVC.", {"Support Devices": 1.0, "No Finding": 1.0}),
        (
            "Mild cardiomegaly. Healed fracture of the left seventh rib.",
            {"Cardiomegaly": 1.0, "Fracture": 1.0},
        ),
        ("The pneumothorax has resolved.", {"Pneumothorax": 0.0, "No Finding": 1.0}),
        ("Bibasilar atelectasis but no edema.", {"Atelectasis": 1.0, "Edema": 0.0}),
    ],
)
def test_real_style_sentences(sentence, expected):
    got = label_chexpert(sentence)
    assert got == expected
    assert set(got) <= set(CHEXPERT)


def test_synthetic_findings_read_alike(tmp_path):
    """Where a synthetic finding is one CheXpert observation, both labelers agree on a cohort.

    (The generator's nodule and consolidation synonyms, "opacity", "airspace disease", "infiltrate",
    all read as CheXpert's Lung Opacity, so those two are not one-to-one and are left out.)
    """
    mapping = {
        "effusion": ("Pleural Effusion",),
        "cardiomegaly": ("Cardiomegaly",),
    }
    records = load_manifest(synthesize(tmp_path / "s", sites=3, patients=15, visits=3, seed=4))
    checked = 0
    for record in records:
        ours = label_report(record.report)["findings"]
        chexpert = label_chexpert(record.report)
        for finding, names in mapping.items():
            if finding in ours:
                assert any(chexpert.get(n) == 1.0 for n in names) == bool(ours[finding]), record.report
                checked += 1
    assert checked > 100


def test_chexpert_ce_f1_on_free_text():
    from secure_fed.eval.clinical import chexpert_ce_f1, chexpert_counts, micro_f1

    refs = ["Small left pleural effusion.", "Heart size is enlarged. No effusion.", "The lungs are clear."]
    assert chexpert_ce_f1(refs, refs) == 1.0
    # effusion found once of once, cardiomegaly missed, "No Finding" right once and claimed twice
    hyps = ["Small left pleural effusion.", "No pleural effusion.", "The lungs are clear."]
    got = chexpert_ce_f1(refs, hyps)
    assert got == pytest.approx((1.0 + 0.0 + 2 / 3) / 3)
    # micro: tp 2 (effusion, "No Finding"), fp 1 ("No Finding"), fn 1 (cardiomegaly)
    assert micro_f1(chexpert_counts(refs, hyps)) == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))
    # nothing positive in any reference (uncertain only): no observation to score
    assert math.isnan(chexpert_ce_f1(["Possible small left effusion."], ["Small left effusion."]))
