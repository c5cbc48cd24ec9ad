"""What the frozen base's visual tokens say about each finding, beside what its labeler reads; prints JSON.

Why: CE-F1 scores the findings a generated report names. When it is low, three things could be
at fault: the labeler (it misreads the reports), the image features (the findings are not in them),
or the generator (the findings are in the features and it does not name them). This separates them:
- `references`: the references themselves read by the rule labeler against the label rows: CE-F1
  1.0 means the labeler is exact on the data and caps nothing;
- `probe`: a logistic regression per finding on the base encoder's tokens of each visit's
  [current, prior] image pair (flattened, standardised), fitted on the pooled training splits of
  every site and scored on the pooled test splits: the findings a linear reader of the frozen
  features gets right, at the same 0.5 threshold greedy decoding amounts to.
A generator far below `probe` loses what its features hold. The base is the run's (pretrained on
the public cohort, cached); nothing of the adapters or of any site's training is used.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

import secure_fed  # noqa: F401  (hardens the environment: no telemetry)


def _tokens(model: Any, images: torch.Tensor) -> np.ndarray:
    """(visits, tokens, dim): the encoder's tokens of each visit's [current, prior] pair."""
    with torch.no_grad():
        return model.encoder(images[:, :2]).numpy()


def _truth(labels: list[dict[str, Any] | None], findings: list[str]) -> np.ndarray:
    return np.array([[int((row or {}).get("findings", {}).get(f, 0)) for f in findings] for row in labels])


def measure(cfg: Any) -> dict[str, Any]:
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import f1_score, roc_auc_score
    from sklearn.preprocessing import StandardScaler

    from secure_fed.data.lexicon import FINDINGS
    from secure_fed.data.sites import site_names
    from secure_fed.eval.clinical import confusion, finding_counts, macro_f1, micro_f1
    from secure_fed.model.setup import build_report_model
    from secure_fed.site.site import load_site

    sites = [load_site(cfg, name) for name in site_names(cfg)]
    pairs = [(row, rep) for s in sites for row, rep in zip(s.test.labels, s.test.reports, strict=True)]
    labelled = [(row, rep) for row, rep in pairs if row]
    if not labelled:
        raise ValueError("the test splits have no label rows; the probe needs each visit's findings")
    refs = finding_counts([row for row, _ in labelled], [rep for _, rep in labelled])
    model = build_report_model(cfg).eval()
    findings = list(FINDINGS)
    x_train = np.concatenate([_tokens(model, s.train.images) for s in sites])
    x_test = np.concatenate([_tokens(model, s.test.images) for s in sites])
    visual_tokens = x_train.shape[1]
    x_train, x_test = x_train.reshape(len(x_train), -1), x_test.reshape(len(x_test), -1)
    y_train = np.concatenate([_truth(s.train.labels, findings) for s in sites])
    y_test = np.concatenate([_truth(s.test.labels, findings) for s in sites])
    scaler = StandardScaler().fit(x_train)
    x_train, x_test = scaler.transform(x_train), scaler.transform(x_test)
    per_finding: dict[str, dict[str, float | int]] = {}
    counts = {}
    for k, name in enumerate(findings):
        if len(set(y_train[:, k])) < 2:
            continue  # nothing to fit: every training visit has it, or none does
        probe = LogisticRegression(max_iter=5000).fit(x_train, y_train[:, k])
        p = probe.predict_proba(x_test)[:, 1]
        guess = p >= 0.5
        truth = y_test[:, k].astype(bool)
        counts[name] = confusion(truth.tolist(), guess.tolist())
        per_finding[name] = {
            "test_positives": int(truth.sum()),
            "f1": float(f1_score(truth, guess, zero_division=0)),
            "auc": float(roc_auc_score(truth, p)) if 0 < truth.sum() < len(truth) else float("nan"),
        }
    return {
        "seed": cfg.seed,
        "preset": cfg.model.preset,
        "visual_tokens": visual_tokens,
        "train_visits": int(len(x_train)),
        "test_visits": int(len(x_test)),
        "references": {"CE-F1": macro_f1(refs), "CE-F1-micro": micro_f1(refs)},
        "probe": {"CE-F1": macro_f1(counts), "CE-F1-micro": micro_f1(counts), "findings": per_finding},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", type=Path, default=None, help="a run config (TOML); default: defaults")
    parser.add_argument("--seeds", default="0", help="comma-separated run seeds (cohort and split)")
    args = parser.parse_args(argv)
    from secure_fed.config import ConfigError, load_config

    torch.set_num_threads(1)
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError as err:
        print(f"error: --seeds: {err}", file=sys.stderr)
        return 2
    try:
        runs = [measure(load_config(args.config, {"seed": s})) for s in seeds]
    except ConfigError as err:  # it names the file or the key itself
        print(f"error: {err}", file=sys.stderr)
        return 2
    except ValueError as err:
        print(f"error: {args.config or 'the default config'}: {err}", file=sys.stderr)
        return 2
    print(json.dumps({"runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
