"""Reading an audit log file into numbered lines, without trusting or judging the content."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TORN = "torn last line (the record was cut mid-write: log truncated, no head record after it)"


@dataclass(frozen=True)
class Line:
    number: int  # 1-based, as editors and `path:line` messages count
    record: dict[str, Any] | None
    error: str | None = None


def read_log(path: Path | str) -> list[Line]:
    """Every line of the file; a line that is not a JSON object carries an error instead."""
    data = Path(path).read_bytes()
    if not data:
        return []
    chunks = data.split(b"\n")
    # Every record ends with "\n", so a non-empty final chunk is a write that never finished.
    torn = chunks[-1] != b""
    lines: list[Line] = []
    for index, chunk in enumerate(chunks[:-1] if not torn else chunks, start=1):
        if torn and index == len(chunks):
            lines.append(Line(index, None, TORN))
            continue
        try:
            record = json.loads(chunk.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            reason = "blank line" if not chunk.strip() else "not valid JSON"
            lines.append(Line(index, None, f"{reason} (record damaged)"))
            continue
        if not isinstance(record, dict):
            lines.append(Line(index, None, "not a JSON object (record damaged)"))
            continue
        lines.append(Line(index, record))
    return lines
