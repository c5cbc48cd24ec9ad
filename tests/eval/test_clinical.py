import math

import pytest

from secure_fed.eval.clinical import ce_f1, ce_f1_micro, per_finding_f1, temporal_consistency
from secure_fed.eval.labeler import label_report


def _row(nodule=0, effusion=0, cardiomegaly=0, consolidation=0, progression=None) -> dict:
    return {
        "findings": {
            "nodule": nodule,
            "effusion": effusion,
            "cardiomegaly": cardiomegaly,
            "consolidation": consolidation,
        },
        "progression": progression or {},
    }


def test_ce_f1_is_macro_over_findings_present_in_references():
    refs = [_row(nodule=1), _row(nodule=1, effusion=1), _row(), _row(effusion=1)]
    hyps = [
        "small nodule in the right lung.",  # nodule TP
        "small nodule in the right lung.",  # nodule TP, effusion FN
        "small right pleural effusion.",  # effusion FP
        "small right pleural effusion. marked cardiomegaly.",
    ]  # effusion TP, cardiomegaly FP
    per = per_finding_f1(refs, hyps)
    assert per["nodule"] == pytest.approx(1.0)
    assert per["effusion"] == pytest.approx(2 * 1 / (2 * 1 + 1 + 1))
    assert per["cardiomegaly"] == 0.0 and math.isnan(per["consolidation"])
    # cardiomegaly is never positive in the references, so it is not averaged in
    assert ce_f1(refs, hyps) == pytest.approx((1.0 + 0.5) / 2)
    assert math.isnan(ce_f1([_row()], ["the lungs are clear."]))


def test_ce_f1_micro_pools_the_counts_of_every_finding():
    refs = [_row(nodule=1), _row(nodule=1, effusion=1), _row(), _row(effusion=1)]
    hyps = [
        "small nodule in the right lung.",
        "small nodule in the right lung.",
        "small right pleural effusion.",
        "small right pleural effusion. marked cardiomegaly.",
    ]
    # tp: nodule 2 + effusion 1; fp: effusion 1 + cardiomegaly 1 (never positive, still counted); fn: 1
    assert ce_f1_micro(refs, hyps) == pytest.approx(2 * 3 / (2 * 3 + 2 + 1))
    # a rare finding weighs what its reports weigh: missing the one consolidation costs macro a
    # quarter of its score, micro one positive in eleven
    many = [_row(nodule=1, effusion=1, cardiomegaly=1)] * 3 + [_row(nodule=1, consolidation=1)]
    said = ["small nodule. small right pleural effusion. marked cardiomegaly."] * 3 + ["small nodule."]
    assert ce_f1(many, said) == pytest.approx(0.75)
    assert ce_f1_micro(many, said) == pytest.approx(2 * 10 / (2 * 10 + 0 + 1))
    assert math.isnan(ce_f1_micro([_row()], ["the lungs are clear."]))
    assert ce_f1_micro([_row()], ["small nodule in the right lung."]) == 0.0


def test_ce_f1_perfect_on_the_generator_reports(synth_manifest):
    import json

    reports = [json.loads(line)["report"] for line in synth_manifest.read_text().splitlines()]
    labels = [json.loads(line) for line in (synth_manifest.parent / "labels.jsonl").read_text().splitlines()]
    assert ce_f1(labels, reports) > 0.99
    assert temporal_consistency(labels, reports) > 0.99
    silent = ["the lungs are clear. no prior study for comparison."] * len(reports)
    assert ce_f1(labels, silent) == 0.0 and temporal_consistency(labels, silent) == 0.0


def test_temporal_consistency_skips_first_visits_and_needs_every_finding_right():
    absent = {"nodule": "absent", "effusion": "absent", "cardiomegaly": "absent", "consolidation": "absent"}
    refs = [
        _row(nodule=1),  # first visit: skipped
        _row(nodule=1, progression={**absent, "nodule": "larger"}),
        _row(nodule=1, progression={**absent, "nodule": "stable"}),
        _row(effusion=1, progression={**absent, "effusion": "new", "nodule": "resolved"}),
    ]
    hyps = [
        "anything at all.",
        "small nodule in the right lung. compared with the prior study, nodule increased.",
        "small nodule in the right lung. no prior study for comparison.",  # wrong: claims no prior
        "small left effusion. compared with the prior study, effusion new.",
    ]  # misses nodule resolved
    assert label_report(hyps[1])["progression"]["nodule"] == "larger"
    assert temporal_consistency(refs, hyps) == pytest.approx(1 / 3)
    hyps[3] = "small left effusion. compared with the prior study, effusion new, nodule resolved."
    assert temporal_consistency(refs, hyps) == pytest.approx(2 / 3)
    assert math.isnan(temporal_consistency(refs[:1], hyps[:1]))
    with pytest.raises(ValueError):
        temporal_consistency(refs, hyps[:2])
