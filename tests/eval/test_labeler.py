import json

from secure_fed.data.synthetic import synthesize
from secure_fed.eval.labeler import label_report

NONE = {"nodule": 0, "effusion": 0, "cardiomegaly": 0, "consolidation": 0}


def _agreement(manifest) -> tuple[int, int]:
    reports = [json.loads(line)["report"] for line in manifest.read_text().splitlines()]
    labels = [json.loads(line) for line in (manifest.parent / "labels.jsonl").read_text().splitlines()]
    same = sum(
        label_report(r) == {"findings": lb["findings"], "progression": lb["progression"]}
        for r, lb in zip(reports, labels, strict=True)
    )
    return same, len(reports)


def test_round_trip_on_generated_reports(synth_manifest, tmp_path):
    same, total = _agreement(synth_manifest)
    assert same >= 0.99 * total
    # more sites mix the synonyms differently; the labeler must know all of them
    same, total = _agreement(synthesize(tmp_path, sites=6, patients=20, visits=5, seed=4))
    assert same >= 0.99 * total


def test_negation_and_synonyms():
    assert (
        label_report("no focal opacity or infiltrate. no pleural fluid. normal heart size.")["findings"]
        == NONE
    )
    out = label_report("left lung lesion, large. right lower lobe airspace disease. heart enlargement, mild.")
    assert out["findings"] == {"nodule": 1, "effusion": 0, "cardiomegaly": 1, "consolidation": 1}
    assert label_report("small right pleural effusion.")["findings"]["effusion"] == 1
    assert label_report("no pleural effusion.")["findings"]["effusion"] == 0


def test_progression_from_the_comparison_sentence():
    text = (
        "small nodule in the right lung. moderate left effusion. heart size is normal. "
        "compared with the prior study, nodule increased, effusion new, consolidation resolved."
    )
    out = label_report(text)
    assert out["progression"] == {
        "nodule": "larger",
        "effusion": "new",
        "cardiomegaly": "absent",
        "consolidation": "resolved",
    }
    stable = label_report("right lung opacity, small. normal heart size. since the prior exam, no change.")
    assert stable["progression"] == {
        "nodule": "stable",
        "effusion": "absent",
        "cardiomegaly": "absent",
        "consolidation": "absent",
    }
    assert label_report("the lungs are clear. no prior exam available.")["progression"] == {}
    assert label_report("the lungs are clear.")["progression"] == {}  # no comparison made
    assert label_report("since the prior exam, lesion smaller.")["progression"]["nodule"] == "smaller"


def test_garbage_is_harmless():
    assert label_report("") == {"findings": NONE, "progression": {}}
    assert label_report(", , . . the the")["findings"] == NONE
