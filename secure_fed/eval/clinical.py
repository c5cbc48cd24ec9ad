"""Clinical-efficacy scores of generated reports, read with the rule-based labeler.

``ce_f1`` is macro F1 over the findings that are positive in at least one reference (the usual
CheXpert-style CE score: a finding nobody has cannot be recalled, and counting it would reward
silence). ``ce_f1_micro`` pools every finding's true and false positives and negatives first (the
"micro" CE-F1 of R2Gen-style papers). A finding with two positives in a test split weighs a quarter
of macro F1 and one report moves its F1 by a third; in micro F1 that report weighs its share of all
positives. So micro F1 ranks methods on small splits with less noise, at the price of weighting
common findings more. ``temporal_consistency`` scores only follow-up visits (references with a
progression): a first visit has nothing to be consistent with, so it is skipped rather than counted.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from secure_fed.eval.labeler import label_report

LabelRow = dict[str, Any]  # {"findings": {name: 0/1}, "progression": {name: state}}, as labels.jsonl


def f1(tp: int, fp: int, fn: int) -> float:
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else math.nan


Counts = dict[str, tuple[int, int, int]]  # finding → (true positives, false positives, false negatives)


def confusion(truth: Sequence[bool], guess: Sequence[bool]) -> tuple[int, int, int]:
    tp = sum(a and b for a, b in zip(truth, guess, strict=True))
    fp = sum(b and not a for a, b in zip(truth, guess, strict=True))
    fn = sum(a and not b for a, b in zip(truth, guess, strict=True))
    return tp, fp, fn


def macro_f1(counts: Counts) -> float:
    """Mean F1 over the findings with a positive reference (tp + fn > 0); NaN when none has one."""
    present = [c for c in counts.values() if c[0] + c[2] > 0]
    return sum(f1(*c) for c in present) / len(present) if present else math.nan


def micro_f1(counts: Counts) -> float:
    """F1 of the pooled counts; NaN when nothing is positive in either references or hypotheses."""
    return f1(*(sum(c[i] for c in counts.values()) for i in range(3)))


def finding_counts(ref_labels: list[LabelRow], hyps: list[str]) -> Counts:
    """Each finding named in the references, counted over the hypotheses read with the labeler."""
    if len(ref_labels) != len(hyps):
        raise ValueError(f"{len(ref_labels)} label rows but {len(hyps)} hypotheses")
    names = sorted({f for row in ref_labels for f in row["findings"]})
    predicted = [label_report(hyp)["findings"] for hyp in hyps]
    return {
        f: confusion(
            [bool(row["findings"].get(f, 0)) for row in ref_labels], [bool(p.get(f, 0)) for p in predicted]
        )
        for f in names
    }


def per_finding_f1(ref_labels: list[LabelRow], hyps: list[str]) -> dict[str, float]:
    """F1 of each finding named in the references (NaN where it is never positive nor predicted)."""
    return {f: f1(*c) for f, c in finding_counts(ref_labels, hyps).items()}


def ce_f1(ref_labels: list[LabelRow], hyps: list[str]) -> float:
    """Macro F1 over findings positive in some reference; NaN when no reference has any finding."""
    return macro_f1(finding_counts(ref_labels, hyps))


def ce_f1_micro(ref_labels: list[LabelRow], hyps: list[str]) -> float:
    """Micro F1 over every finding named in the references (see the module docstring)."""
    return micro_f1(finding_counts(ref_labels, hyps))


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


def chexpert_counts(refs: list[str], hyps: list[str], labeler: FreeTextLabeler | None = None) -> Counts:
    """Free-text reports without label rows (real data): both sides read with the 14-observation
    labeler (the rule labeler, or e.g. CheXbert); positive = 1 (uncertain and negative count as
    not positive)."""
    from secure_fed.eval.labeler import CHEXPERT, label_chexpert

    if len(refs) != len(hyps):
        raise ValueError(f"{len(refs)} references but {len(hyps)} hypotheses")
    label = labeler or label_chexpert
    truth, guess = _label_all(refs, label), _label_all(hyps, label)
    return {
        name: confusion([row.get(name) == 1.0 for row in truth], [row.get(name) == 1.0 for row in guess])
        for name in CHEXPERT
    }


def chexpert_ce_f1(refs: list[str], hyps: list[str], labeler: FreeTextLabeler | None = None) -> float:
    """Macro CE-F1 of free-text reports over the observations positive in some reference; NaN when
    none is."""
    return macro_f1(chexpert_counts(refs, hyps, labeler))
