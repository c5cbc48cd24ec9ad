"""A benchmark's JSON output (benchmarks/*.py prints one object) shaped into the table docs/BENCHMARKS.md
renders (docs/results/bench-NAME.json, the format of tools/doc_tables.py).

    .venv/bin/python benchmarks/upload_bytes.py > out.json
    python tools/bench_tables.py upload-bytes out.json \\
        --command ".venv/bin/python benchmarks/upload_bytes.py" --machine "..." --wall "40 s"
    python tools/doc_tables.py --write

Only the benchmarks whose figures do not depend on the machine's speed have a shaper here (bytes,
token counts): a timing table in the docs aggregates several runs on an idle machine, and its JSON
says which runs and how they were combined.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"

UPLOAD_CASES = {"pooled_adapters": "pooled adapters", "full_model_fedavg": "full-model FedAvg"}
UPLOAD_COLUMNS = [
    "preset",
    "upload",
    "values",
    "plain float64 (bytes)",
    "SecAgg+ (uint32, bytes)",
    "plain wire, Flower (bytes)",
    "SecAgg+ wire, Flower (bytes)",
    "plain / full-model FedAvg",
]
TOKENIZER_COLUMNS = [
    "tokenizer (`data.tokenizer`)",
    "vocab",
    "real-looking: `<unk>`",
    "tokens/report mean (max)",
    "synthetic: `<unk>`",
    "tokens/report mean (max)",
]


def _int(n: int) -> str:
    return f"{n:,}"


def upload_rows(out: dict[str, Any]) -> list[list[Any]]:
    rows: list[list[Any]] = []
    for result in out["results"]:
        for key, case in result["methods"].items():
            # fedtar_T<n>, one per --T value, in the script's order
            label = UPLOAD_CASES.get(key) or f"FedTAR, T = {key.removeprefix('fedtar_T')}"
            rows.append(
                [
                    result["preset"],
                    label,
                    _int(case["values"]),
                    _int(case["plain"]["payload_bytes"]),
                    _int(case["secagg"]["payload_bytes"]),
                    _int(case["plain"]["flower_records"]["wire_bytes_sent_per_site"]),
                    _int(case["secagg"]["flower_records"]["wire_bytes_sent_per_site"]),
                    f"{case['plain_over_full_model_plain']:.2f}",
                ]
            )
    return rows


def upload_notes(out: dict[str, Any]) -> list[str]:
    notes = []
    for result in out["results"]:
        p = result["parameters"]
        share = 100 * p["adapters"] / p["total"]
        notes.append(
            f"{result['preset']}: {_int(p['total'])} parameters, {_int(p['adapters'])} trainable per "
            f"adapter copy ({share:.1f} %)."
        )
        received = result["methods"]["pooled_adapters"]["secagg"]["codec"]["wire_bytes_received_per_site"]
        notes.append(
            f"{result['preset']}: a SecAgg+ site also receives {_int(received)} bytes of keys and "
            f"shares (pooled adapters, byte codec, {out['sites']} sites)."
        )
    return notes


def _pct(rate: float) -> str:
    return "0 %" if rate == 0 else f"{100 * rate:.1f} %"


def tokenizer_rows(out: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for kind, real in out["real_looking"].items():
        if not isinstance(real, dict):  # "reports": how many were measured
            continue
        synth = out["synthetic"][kind]
        rows.append(
            [
                f"`{kind}`",
                real["vocab_size"],
                _pct(real["unk_rate"]),
                f"{real['tokens_per_report_mean']:.1f} ({real['tokens_per_report_max']})",
                _pct(synth["unk_rate"]),
                f"{synth['tokens_per_report_mean']:.1f} ({synth['tokens_per_report_max']})",
            ]
        )
    return rows


Rows = Callable[[dict[str, Any]], list[list[Any]]]
Notes = Callable[[dict[str, Any]], list[str]]
SHAPERS: dict[str, tuple[str, list[str], Rows, Notes]] = {
    "upload-bytes": (
        "Upload per site per round: values and bytes",
        UPLOAD_COLUMNS,
        upload_rows,
        upload_notes,
    ),
    "tokenizer-coverage": (
        "Tokenizers on real-looking and synthetic reports",
        TOKENIZER_COLUMNS,
        tokenizer_rows,
        lambda out: [],
    ),
}


def shape(
    name: str, out: dict[str, Any], command: str, machine: str, wall: str | None, commit: str | None = None
) -> dict[str, Any]:
    title, columns, rows, notes = SHAPERS[name]
    return {
        "title": title,
        "source": {
            "command": command,
            "commit": commit or _git_head(),
            "date": dt.date.today().isoformat(),
            "machine": machine,
            "wall": wall,
        },
        "columns": columns,
        "rows": rows(out),
        "notes": notes(out),
    }


def _git_head() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("benchmark", choices=sorted(SHAPERS))
    p.add_argument("output", type=Path, help="the benchmark's JSON output")
    p.add_argument("--command", required=True, help="the exact command that printed it")
    p.add_argument("--machine", required=True, help="the machine it ran on")
    p.add_argument("--wall", default=None, help="its wall time")
    p.add_argument("--commit", default=None, help="the commit it ran at (default: HEAD)")
    p.add_argument("--results", type=Path, default=RESULTS, help="where bench-NAME.json is written")
    args = p.parse_args(argv)
    try:
        out = json.loads(args.output.read_text(encoding="utf-8"))
        data = shape(args.benchmark, out, args.command, args.machine, args.wall, args.commit)
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
        print(f"{args.output}: not {args.benchmark}'s output ({exc!r}); rerun the benchmark", file=sys.stderr)
        return 1
    target = args.results / f"bench-{args.benchmark}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {target}; then: python tools/doc_tables.py --write")
    return 0


if __name__ == "__main__":
    sys.exit(main())
