"""`<unk>` rate and report length in tokens of each built-in tokenizer, on real-looking reports
(`secure_fed.data.realistic`) and on the synthetic cohort; prints JSON.

Nothing is fitted: every tokenizer is built from public word lists or bytes only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

from secure_fed.data.manifest import load_annotation, load_manifest  # noqa: E402
from secure_fed.data.realistic import write_realistic  # noqa: E402
from secure_fed.data.synthetic import synthesize  # noqa: E402
from secure_fed.data.tokenizer import TOKENIZER_KINDS, load_tokenizer  # noqa: E402


def measure(kind: str, reports: list[str]) -> dict[str, Any]:
    tok = load_tokenizer(None, kind)
    lengths, unk = [], 0
    for report in reports:
        ids = tok.encode(report)
        lengths.append(len(ids))
        unk += sum(i == tok.unk_id for i in ids) if tok.unk_id is not None else 0
    return {
        "vocab_size": tok.vocab_size,
        "unk_rate": unk / sum(lengths),
        "tokens_per_report_mean": statistics.fmean(lengths),
        "tokens_per_report_max": max(lengths),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=400, help="real-looking studies to generate")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        real = [
            r.report for r in load_annotation(write_realistic(Path(tmp) / "real", args.studies, args.seed))
        ]
        synth = [r.report for r in load_manifest(synthesize(Path(tmp) / "synth", 3, 40, 5, args.seed))]
    out = {
        "real_looking": {"reports": len(real), **{k: measure(k, real) for k in TOKENIZER_KINDS}},
        "synthetic": {"reports": len(synth), **{k: measure(k, synth) for k in TOKENIZER_KINDS}},
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
