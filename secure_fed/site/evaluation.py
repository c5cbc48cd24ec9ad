"""Generate reports for a split and score them; only corpus-level figures ever leave the site."""

from __future__ import annotations

import torch

from secure_fed.config import RunConfig
from secure_fed.data.batching import Examples
from secure_fed.eval.clinical import (
    FreeTextLabeler,
    chexpert_counts,
    finding_counts,
    macro_f1,
    micro_f1,
    temporal_consistency,
)
from secure_fed.eval.metrics import REPORT_SCORES, report_metrics
from secure_fed.model.report_model import ReportModel

METRIC_NAMES = REPORT_SCORES


def generate_reports(
    model: ReportModel, examples: Examples, decode: object, max_len: int, batch_size: int = 64
) -> list[str]:
    out: list[str] = []
    for i in range(0, len(examples), batch_size):
        sl = slice(i, i + batch_size)
        with torch.no_grad():
            ids = model.generate(examples.images[sl], examples.profiles[sl], max_len)
        out.extend(decode(row) for row in ids)  # type: ignore[operator]
    return out


def free_text_labeler(cfg: RunConfig) -> FreeTextLabeler | None:
    """CheXbert when the site's config names a checkpoint folder; None: the rule labeler."""
    if cfg.model.chexbert_path is None:
        return None
    from secure_fed.eval.chexbert import load_chexbert

    return load_chexbert(cfg.model.chexbert_path)


def score(
    refs: list[str], hyps: list[str], labels: list[dict | None], labeler: FreeTextLabeler | None = None
) -> dict[str, float]:
    scores = dict(report_metrics(refs, hyps))
    labelled = [(lab, h) for lab, h in zip(labels, hyps, strict=True) if lab is not None]
    if labelled:
        ref_labels = [lab for lab, _ in labelled]
        lab_hyps = [h for _, h in labelled]
        counts = finding_counts(ref_labels, lab_hyps)
        scores["temporal_consistency"] = temporal_consistency(ref_labels, lab_hyps)
    else:  # real reports without label rows: CE-F1 from the 14-observation labeler on both sides
        counts = chexpert_counts(refs, hyps, labeler)
        scores["temporal_consistency"] = float("nan")
    scores["CE-F1"], scores["CE-F1-micro"] = macro_f1(counts), micro_f1(counts)
    return {k: float(scores[k]) for k in METRIC_NAMES}


def evaluate_split(
    model: ReportModel,
    examples: Examples,
    decode: object,
    max_len: int,
    labeler: FreeTextLabeler | None = None,
) -> dict[str, float]:
    hyps = generate_reports(model, examples, decode, max_len)
    return score(examples.reports, hyps, examples.labels, labeler)
