"""Clinical-efficacy scores of generated reports, read with the rule-based labeler.

``ce_f1`` is macro F1 over the findings that are positive in at least one reference (the usual
CheXpert-style CE score: a finding nobody has cannot be recalled, and counting it would reward
silence). ``temporal_consistency`` scores only follow-up visits (references with a progression):
a first visit has nothing to be consistent with, so it is skipped rather than counted.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from secure_fed.eval.labeler import label_report

LabelRow = dict[str, Any]  # {"findings": {name: 0/1}, "progression": {name: state}}, as labels.jsonl


def f1(tp: int, fp: int, fn: int) -> float:
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else math.nan


def per_finding_f1(ref_labels: list[LabelRow], hyps: list[str]) -> dict[str, float]:
    """F1 of each finding named in the references (NaN where it is never positive nor predicted)."""
    if len(ref_labels) != len(hyps):
        raise ValueError(f"{len(ref_labels)} label rows but {len(hyps)} hypotheses")
    names = sorted({f for row in ref_labels for f in row["findings"]})
    counts = {f: [0, 0, 0] for f in names}  # tp, fp, fn
    for row, hyp in zip(ref_labels, hyps, strict=True):
        predicted = label_report(hyp)["findings"]
        for f in names:
            truth, guess = bool(row["findings"].get(f, 0)), bool(predicted.get(f, 0))
            counts[f][0] += truth and guess
            counts[f][1] += guess and not truth
            counts[f][2] += truth and not guess
    return {f: f1(*c) for f, c in counts.items()}


def ce_f1(ref_labels: list[LabelRow], hyps: list[str]) -> float:
    """Macro F1 over findings positive in some reference; NaN when no reference has any finding."""
    scores = per_finding_f1(ref_labels, hyps)
    present = [f for f in scores if any(row["findings"].get(f, 0) for row in ref_labels)]
    return sum(scores[f] for f in present) / len(present) if present else math.nan


def temporal_consistency(ref_labels: list[LabelRow], hyps: list[str]) -> float:
    """Share of follow-up visits whose generated comparison gets every finding's progression right.

    A follow-up hypothesis that claims no prior (or makes no comparison) is wrong. NaN when there
    is no follow-up visit.
    """
    if len(ref_labels) != len(hyps):
        raise ValueError(f"{len(ref_labels)} label rows but {len(hyps)} hypotheses")
    follow_ups = [
        (row["progression"], hyp) for row, hyp in zip(ref_labels, hyps, strict=True) if row.get("progression")
    ]
    if not follow_ups:
        return math.nan
    right = 0
    for truth, hyp in follow_ups:
        said = label_report(hyp)["progression"]
        right += all(said.get(f) == state for f, state in truth.items())
    return right / len(follow_ups)


FreeTextLabeler = Callable[[str], dict[str, float]]


def _label_all(texts: Sequence[str], labeler: FreeTextLabeler) -> list[dict[str, float]]:
    many = getattr(labeler, "label_many", None)  # a neural labeler reads a batch at once
    return list(many(texts)) if many is not None else [labeler(t) for t in texts]


def chexpert_ce_f1(refs: list[str], hyps: list[str], labeler: FreeTextLabeler | None = None) -> float:
    """CE-F1 of free-text reports without label rows (real data): both sides read with the
    14-observation labeler (the rule labeler, or e.g. CheXbert), positive = 1 (uncertain and
    negative count as not positive), macro F1 over the observations positive in some reference;
    NaN when none is."""
    from secure_fed.eval.labeler import CHEXPERT, label_chexpert

    if len(refs) != len(hyps):
        raise ValueError(f"{len(refs)} references but {len(hyps)} hypotheses")
    label = labeler or label_chexpert
    truth, guess = _label_all(refs, label), _label_all(hyps, label)
    scores = []
    for name in CHEXPERT:
        t = [row.get(name) == 1.0 for row in truth]
        if not any(t):
            continue
        g = [row.get(name) == 1.0 for row in guess]
        tp = sum(a and b for a, b in zip(t, g, strict=True))
        fp = sum(b and not a for a, b in zip(t, g, strict=True))
        fn = sum(a and not b for a, b in zip(t, g, strict=True))
        scores.append(f1(tp, fp, fn))
    return sum(scores) / len(scores) if scores else math.nan
