"""Loading and validating a JSONL visit manifest or an IU-Xray/R2Gen ``annotation.json``.

Both loaders read the whole file, collect every problem as ``file:line: field: problem`` and raise
them together: a hospital fixes its export once, not one error per run, and no caller ever sees a
partly loaded cohort.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path, PurePath
from typing import Any

from pydantic import ValidationError

from secure_fed.data.records import VisitRecord

ANNOTATION_SPLITS = ("train", "val", "test")


class DataValidationError(ValueError):
    """Every problem found in one input file; ``problems`` holds one ``file:line: field: problem`` each."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__(f"{len(self.problems)} data problem(s):\n" + "\n".join(self.problems))


# what a field holds, where its type alone would say it badly (a union, an optional value)
_FIELD_WANTS = {
    "image": "a path or a list of paths",
    "study_date": 'a date "YYYY-MM-DD"',
    "age": "a number or null",
}
_TYPE_WANTS = {
    "string_type": "text in quotes",
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "list_type": "a list",
}


def plain_problem(error: Any, field: str) -> str:
    """A validation error in a data steward's words: what the field must hold, and what it held
    (as JSON, the file's own notation), instead of the library's "Input should be a valid ...".
    The record's own checks (dates, ages, sex spellings) already speak plainly and pass through."""
    kind = error["type"]
    if kind == "value_error":
        return str(error["msg"]).removeprefix("Value error, ")
    if kind == "literal_error":
        wants = str(error.get("ctx", {}).get("expected", "")).replace("'", '"')
    else:
        wants = _FIELD_WANTS.get(field) or _TYPE_WANTS.get(kind, "")
    if not wants:
        return str(error["msg"]).replace("Input should be", "must be")
    shown = json.dumps(error.get("input"), default=str)
    return f"must be {wants}, got {shown if len(shown) <= 40 else shown[:37] + '...'}"


def _schema_problems(err: ValidationError) -> list[tuple[str, str]]:
    """(field, problem) pairs, one per field: a union type would otherwise report each member."""
    seen: dict[str, str] = {}
    for e in err.errors():
        field = str(e["loc"][0]) if e["loc"] else "record"
        if field in seen:
            continue
        if e["type"] == "missing":
            seen[field] = "missing"
        elif e["type"] == "extra_forbidden":
            seen[field] = "unknown field"
        else:
            seen[field] = plain_problem(e, field)
    return list(seen.items())


def outside_folder(path: str) -> bool:
    """An image path that could name a file outside the data folder: absolute, or with a '..' (a
    site reads whatever file such a path names as a patient's image)."""
    pure = PurePath(path)
    return pure.is_absolute() or ".." in pure.parts


def _image_problems(paths: list[str], folder: Path, field: str, what: str) -> list[str]:
    return [
        f"{field}: not inside the {what} folder (a path relative to {folder}, without '..'): {p}"
        if outside_folder(p)
        else f"{field}: file not found: {p}"
        for p in paths
        if outside_folder(p) or not (folder / p).is_file()
    ]


def _duplicate_problems(keyed: Iterable[tuple[int, str, int]], where: str) -> list[tuple[int, str]]:
    """(line, problem) for every (patient, visit) seen before, naming where it was first seen."""
    first: dict[tuple[str, int], int] = {}
    out: list[tuple[int, str]] = []
    for line, patient, visit in keyed:
        key = (patient, visit)
        if key in first:
            out.append(
                (
                    line,
                    f"visit_index: duplicate visit {visit} of patient {patient!r} "
                    f"(first at {where}:{first[key]})",
                )
            )
        else:
            first[key] = line
    return out


def load_manifest(path: str | Path) -> list[VisitRecord]:
    """One JSON object per line with every VisitRecord field (age may be null, sex may be "U")."""
    path = Path(path)
    base = path.parent
    problems: list[tuple[int, str]] = []
    records: list[tuple[int, VisitRecord]] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise DataValidationError([f"{path}:0: file: cannot read ({err})"]) from None
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as err:
            problems.append((number, f"json: invalid JSON ({err.msg} at column {err.colno})"))
            continue
        if not isinstance(obj, dict):
            problems.append((number, f"json: expected an object, got {type(obj).__name__}"))
            continue
        if "study_date" in obj and obj["study_date"] is None:
            problems.append((number, "study_date: required in a manifest (null given)"))
            continue
        try:
            record = VisitRecord.model_validate(obj)
        except ValidationError as err:
            problems.extend((number, f"{field}: {msg}") for field, msg in _schema_problems(err))
            continue
        problems.extend((number, p) for p in _image_problems(record.image_paths, base, "image", "data"))
        records.append((number, record))
    problems.extend(_duplicate_problems(((n, r.patient_id, r.visit_index) for n, r in records), str(path)))
    if not problems and not records:
        problems.append((1, "file: no records"))
    if problems:
        problems.sort(key=lambda p: p[0])
        raise DataValidationError([f"{path}:{line}: {msg}" for line, msg in problems])
    return [r for _, r in records]


_WS = re.compile(r"\s*")


def _array_entry_lines(text: str) -> dict[str, list[int]]:
    """Line of each element of each top-level array; ``text`` must already be valid JSON."""
    decoder = json.JSONDecoder()
    out: dict[str, list[int]] = {}
    line, counted = 1, 0

    def line_at(pos: int) -> int:
        nonlocal line, counted
        line += text.count("\n", counted, pos)
        counted = pos
        return line

    def skip(pos: int) -> int:
        return _WS.match(text, pos).end()  # type: ignore[union-attr]

    i = skip(0)
    if text[i : i + 1] != "{":
        return out
    i = skip(i + 1)
    while i < len(text) and text[i] != "}":
        key, i = decoder.raw_decode(text, i)
        i = skip(skip(i) + 1)  # past ':'
        if text[i] == "[":
            starts: list[int] = []
            i = skip(i + 1)
            while text[i] != "]":
                starts.append(line_at(i))
                _, i = decoder.raw_decode(text, i)
                i = skip(i)
                if text[i] == ",":
                    i = skip(i + 1)
            i += 1
            out[str(key)] = starts
        else:
            _, i = decoder.raw_decode(text, i)
        i = skip(i)
        if text[i : i + 1] == ",":
            i = skip(i + 1)
    return out


def _visit_order_key(entry: dict[str, Any]) -> tuple[str, str]:
    return (str(entry.get("study_date") or ""), str(entry.get("study_id") or entry.get("id")))


def _annotation_entry(
    entry: dict[str, Any], split: str, site: str, image_dir: Path, base: Path
) -> tuple[dict[str, Any] | None, list[str]]:
    """The VisitRecord fields of one annotation entry (visit_index still unset), or its problems."""
    problems: list[str] = []
    known = {
        "id",
        "report",
        "image_path",
        "split",
        "study_id",
        "subject_id",
        "patient_id",
        "visit_index",
        "study_date",
        "age",
        "sex",
        "site",
    }
    problems += [f"{k}: unknown field" for k in entry if k not in known]
    sid = entry.get("id")
    if not isinstance(sid, str | int) or not str(sid).strip():
        problems.append("id: missing" if sid is None else "id: must be a non-empty string")
    report = entry.get("report")
    if report is None:
        problems.append("report: missing")
    elif not isinstance(report, str) or not report.strip():
        problems.append("report: empty" if isinstance(report, str) else "report: must be a string")
    images = entry.get("image_path")
    if images is None:
        problems.append("image_path: missing")
    elif not isinstance(images, list) or not all(isinstance(p, str) for p in images):
        problems.append("image_path: must be a list of paths")
    elif not images:
        problems.append("image_path: empty list")
    else:
        problems += _image_problems(images, image_dir, "image_path", "image")
    if "split" in entry and entry["split"] != split:
        problems.append(f"split: says {entry['split']!r} but the entry is listed under {split!r}")
    if problems:
        return None, problems
    patient = entry.get("patient_id", entry.get("subject_id", sid))
    fields = {
        "patient_id": str(patient),
        "visit_index": entry.get("visit_index", 1),
        "study_date": entry.get("study_date"),
        "image": [os.path.relpath(image_dir / p, base) for p in images],  # type: ignore[union-attr]
        "report": entry.get("report"),
        "age": entry.get("age"),
        "sex": entry.get("sex", "U"),
        "site": entry.get("site", site),
        "split": split,
    }
    return fields, []


def load_annotation(
    path: str | Path, image_dir: str | Path | None = None, site: str = "iu_xray"
) -> list[VisitRecord]:
    """R2Gen ``{"train": [...], "val": [...], "test": [...]}``; entries ``{id, report, image_path, split}``.

    ``image_path`` entries are relative to ``image_dir`` (default: ``images/`` beside the file when it
    exists, as R2Gen lays IU-Xray out, else the file's folder). Optional per entry: ``age``, ``sex``,
    ``site``, ``study_date`` and the patient (``patient_id`` or MIMIC's ``subject_id``; default: the
    id, i.e. each IU-Xray study is its own patient). A patient's visits are numbered by
    (study_date, study_id) unless ``visit_index`` is given.
    """
    path = Path(path)
    base = path.parent
    if image_dir is None:
        image_dir = base / "images" if (base / "images").is_dir() else base
    image_dir = Path(image_dir)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise DataValidationError([f"{path}:0: file: cannot read ({err})"]) from None
    try:
        top = json.loads(text)
    except json.JSONDecodeError as err:
        raise DataValidationError([f"{path}:{err.lineno}: json: invalid JSON ({err.msg})"]) from None
    if not isinstance(top, dict):
        raise DataValidationError([f"{path}:1: json: expected an object of splits"])
    lines = _array_entry_lines(text)
    problems: list[tuple[int, str]] = []
    pending: list[tuple[int, dict[str, Any], dict[str, Any]]] = []
    for split, entries in top.items():
        if split not in ANNOTATION_SPLITS:
            problems.append((1, f"{split}: unknown split (expected {', '.join(ANNOTATION_SPLITS)})"))
            continue
        if not isinstance(entries, list):
            problems.append((1, f"{split}: must be a list of entries"))
            continue
        for entry, line in zip(entries, lines.get(split, []), strict=True):
            if not isinstance(entry, dict):
                problems.append((line, f"json: expected an object, got {type(entry).__name__}"))
                continue
            fields, found = _annotation_entry(entry, split, site, image_dir, base)
            problems.extend((line, p) for p in found)
            if fields is not None:
                pending.append((line, entry, fields))
    first_line: dict[str, int] = {}
    for line, entry, _ in pending:
        sid = str(entry["id"])
        if sid in first_line:
            problems.append((line, f"id: duplicate study {sid!r} (first at {path}:{first_line[sid]})"))
        first_line.setdefault(sid, line)
    _number_visits(pending)
    records: list[tuple[int, VisitRecord]] = []
    for line, _, fields in pending:
        try:
            records.append((line, VisitRecord.model_validate(fields)))
        except ValidationError as err:
            problems.extend((line, f"{field}: {msg}") for field, msg in _schema_problems(err))
    problems.extend(_duplicate_problems(((n, r.patient_id, r.visit_index) for n, r in records), str(path)))
    if not problems and not records:
        problems.append((1, "file: no entries"))
    if problems:
        problems.sort(key=lambda p: p[0])
        raise DataValidationError([f"{path}:{line}: {msg}" for line, msg in problems])
    return [r for _, r in records]


def _number_visits(pending: list[tuple[int, dict[str, Any], dict[str, Any]]]) -> None:
    """Give each patient's studies without an explicit visit_index the numbers 1, 2, ... in time order."""
    by_patient: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    for _, entry, fields in pending:
        if "visit_index" not in entry:
            by_patient.setdefault(fields["patient_id"], []).append((entry, fields))
    for studies in by_patient.values():
        studies.sort(key=lambda pair: _visit_order_key(pair[0]))
        for number, (_, fields) in enumerate(studies, start=1):
            fields["visit_index"] = number


def resolve_input(path: str | Path) -> Path:
    """A folder stands for the manifest.jsonl (or else annotation.json) inside it."""
    path = Path(path)
    if path.is_dir():
        for name in ("manifest.jsonl", "annotation.json"):
            if (path / name).is_file():
                return path / name
    return path


def load_records(path: str | Path) -> list[VisitRecord]:
    """Either format, told apart by suffix: ``.json`` is an annotation file, anything else JSONL."""
    path = resolve_input(path)
    if path.is_dir():
        found = "a folder with no manifest.jsonl or annotation.json"
        raise DataValidationError(
            [f"{path}:0: file: {found}; give the data file or the folder that holds it"]
        )
    if not path.is_file():
        raise DataValidationError([f"{path}:0: file: no such file; give a manifest.jsonl or annotation.json"])
    return load_annotation(path) if path.suffix == ".json" else load_manifest(path)


def check_path(path: str | Path) -> list[str]:
    """All problems of a manifest or annotation file (empty when it loads)."""
    try:
        load_records(path)
    except DataValidationError as err:
        return err.problems
    return []


def check_main(path: str | Path) -> int:
    """``secure-fed data check PATH``: print each problem; exit code 2 when there are any, else 0."""
    try:
        records = load_records(path)
    except DataValidationError as err:
        for problem in err.problems:
            print(problem)
        print(f"{len(err.problems)} problem(s) in {resolve_input(path)}")
        return 2
    patients = {r.patient_id for r in records}
    sites = {r.site for r in records}
    print(f"{resolve_input(path)}: OK, {len(records)} visits, {len(patients)} patients, {len(sites)} site(s)")
    return 0
