import math
import os
from pathlib import Path

import pytest

from secure_fed.eval import metrics
from secure_fed.eval.metrics import METRIC_NAMES, close_meteor, report_metrics, scoring_text


def _java_children() -> list[int]:
    me = str(os.getpid())
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().split(") ")[-1].split()
            comm = stat.read_text().split("(")[1].split(")")[0]
        except OSError:
            continue
        if fields[1] == me and comm == "java":
            out.append(int(stat.parent.name))
    return out


def test_identical_reports_score_perfectly():
    refs = [
        "the lungs are clear. no pleural effusion.",
        "small nodule in the right lung. heart size is normal.",
    ]
    scores = report_metrics(refs, refs)
    assert set(scores) == set(METRIC_NAMES)
    for n in range(1, 5):
        assert scores[f"BLEU-{n}"] == pytest.approx(1.0, abs=1e-6)
    assert scores["ROUGE-L"] == pytest.approx(1.0)
    assert scores["METEOR"] > 0.9
    wrong = report_metrics(refs, ["heart enlargement, marked.", "right lobe infiltrate."])
    assert scores["CIDEr"] > wrong["CIDEr"] and all(wrong[k] < scores[k] for k in METRIC_NAMES)


def test_bleu1_by_hand():
    # clipped unigram precision: "the" x2 (ref has 2), "cat" x1 -> 3/3; brevity penalty exp(1 - 6/3)
    scores = report_metrics(["the cat sat on the mat"], ["the cat the"], meteor=False)
    assert scores["BLEU-1"] == pytest.approx(math.exp(-1.0), abs=1e-6)
    # "the" x4 clipped to 2 -> 2/4; brevity penalty exp(1 - 6/4)
    scores = report_metrics(["the cat is on the mat"], ["the the the the"], meteor=False)
    assert scores["BLEU-1"] == pytest.approx(0.5 * math.exp(-0.5), abs=1e-6)


def test_rouge_l_by_hand():
    # LCS("a b c d e", "a c e f") = "a c e": P = 3/4, R = 3/5, F_beta with beta = 1.2
    p, r, b2 = 3 / 4, 3 / 5, 1.2**2
    scores = report_metrics(["a b c d e"], ["a c e f"], meteor=False)
    assert scores["ROUGE-L"] == pytest.approx((1 + b2) * p * r / (r + b2 * p))


def test_tokenisation_ignores_case_and_punctuation():
    assert scoring_text("No Pleural effusion.  Heart, normal.") == "no pleural effusion heart normal"
    assert report_metrics(["No effusion."], ["no effusion"], meteor=False)["BLEU-1"] == pytest.approx(
        1.0, abs=1e-6
    )


def test_empty_hypotheses_score_zero_without_crashing():
    refs = ["the lungs are clear.", "no pleural effusion."]
    scores = report_metrics(refs, ["", ""])
    assert scores["BLEU-1"] == pytest.approx(0.0, abs=1e-6)
    assert scores["ROUGE-L"] == 0.0 and scores["CIDEr"] == 0.0 and scores["METEOR"] == 0.0
    half = report_metrics(refs, ["the lungs are clear.", ""])
    assert 0.0 < half["ROUGE-L"] < 1.0


def test_mismatched_or_empty_input_is_an_error():
    with pytest.raises(ValueError, match="2 references but 1 hypotheses"):
        report_metrics(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="no reports"):
        report_metrics([], [])


def test_one_meteor_process_is_reused_and_closed():
    first = report_metrics(["the lungs are clear."] * 3, ["the lungs are clear.", "clear lungs.", ""])
    running = _java_children()
    assert len(running) == 1
    second = report_metrics(["the lungs are clear."] * 3, ["the lungs are clear.", "clear lungs.", ""])
    assert _java_children() == running and second["METEOR"] == first["METEOR"] > 0
    close_meteor()
    assert _java_children() == []
    restarted = metrics._shared_scorer()  # a later call starts a fresh one
    assert _java_children() == [restarted.meteor_p.pid] != running
    close_meteor()
    assert _java_children() == []


def test_meteor_can_be_skipped():
    assert math.isnan(report_metrics(["a b c"], ["a b c"], meteor=False)["METEOR"])


def test_without_java_meteor_is_nan_with_a_warning(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no java on PATH
    with pytest.warns(RuntimeWarning, match="Java"):
        scores = report_metrics(["the lungs are clear."], ["the lungs are clear."])
    assert math.isnan(scores["METEOR"])
    assert scores["BLEU-1"] == pytest.approx(1.0, abs=1e-6) and scores["ROUGE-L"] == pytest.approx(1.0)


def test_java_that_fails_to_start_is_reported(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(metrics.shutil, "which", lambda name: "/usr/bin/java")  # found, but cannot run
    with pytest.warns(RuntimeWarning, match="Java"):
        assert math.isnan(report_metrics(["a b"], ["a b"])["METEOR"])


def test_fixed_df_cider_is_pycocoevalcaps_formula():
    """With the document frequencies of the scored references themselves, our CIDEr is exactly
    pycocoevalcap's (which refits them per call)."""
    refs = ["the lungs are clear no effusion", "small left effusion heart size is normal", "no effusion"]
    hyps = ["the lungs are clear", "small right effusion heart normal", "no effusion seen"]
    own = metrics.DocumentFrequencies.of([[r] for r in refs])
    ours = report_metrics(refs, hyps, meteor=False, cider_df=own)["CIDEr"]
    theirs = report_metrics(refs, hyps, meteor=False, cider_df=None)["CIDEr"]
    assert ours == pytest.approx(theirs, rel=1e-12) and ours > 0


def test_fixed_df_score_of_a_report_does_not_depend_on_the_rest_of_the_split():
    ref, hyp = "small nodule in the right lung. heart size is normal.", "small nodule in the left lung."
    alone = report_metrics([ref], [hyp], meteor=False)["CIDEr"]
    others = ["the lungs are clear. no effusion."] * 3
    # the pair's CIDEr is the same inside any split (the mean over the split moves by the others)
    with_others = report_metrics([ref, *others], [hyp, *others], meteor=False)["CIDEr"]
    per_other = report_metrics(others, others, meteor=False)["CIDEr"]
    assert with_others == pytest.approx((alone + 3 * per_other) / 4)
    refit = report_metrics([ref, *others], [hyp, *others], meteor=False, cider_df=None)["CIDEr"]
    refit_alone = report_metrics([ref], [hyp], meteor=False, cider_df=None)["CIDEr"]
    refit_others = report_metrics(others, others, meteor=False, cider_df=None)["CIDEr"]
    assert refit != pytest.approx((refit_alone + 3 * refit_others) / 4)  # what the fixed corpus fixes


def test_reference_corpus_is_fixed_and_covers_every_site_wording():
    df = metrics.reference_df()
    assert df is metrics.reference_df() and df.n_docs > 1000
    for word in ("nodule", "opacity", "lesion", "since", "compared"):
        assert df.counts[(word,)] > 0
