import json
from pathlib import Path

import pytest

from secure_fed.data.manifest import (
    DataValidationError,
    check_main,
    check_path,
    load_annotation,
    load_manifest,
    load_records,
)


def _png(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    from PIL import Image

    Image.new("L", (8, 8), 128).save(path)


def _row(**overrides) -> dict:
    row = {
        "patient_id": "p1",
        "visit_index": 1,
        "study_date": "2020-03-04",
        "image": "img/a.png",
        "report": "the lungs are clear.",
        "age": 61,
        "sex": "F",
        "site": "siteA",
    }
    row.update(overrides)
    return row


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    _png(tmp_path / "img" / "a.png")
    _png(tmp_path / "img" / "b.png")
    return tmp_path


def _write(folder: Path, lines: list) -> Path:
    path = folder / "manifest.jsonl"
    path.write_text("".join((ln if isinstance(ln, str) else json.dumps(ln)) + "\n" for ln in lines))
    return path


def test_valid_manifest_loads_and_normalises_sex_spellings(folder):
    path = _write(
        folder,
        [
            _row(),
            _row(visit_index=2, image=["img/a.png", "img/b.png"], sex="female"),
            _row(patient_id="p2", sex="male", age=None),
            _row(patient_id="p3", sex="unknown"),
        ],
    )
    records = load_manifest(path)
    assert [r.sex for r in records] == ["F", "F", "M", "U"]
    assert records[1].image_paths == ["img/a.png", "img/b.png"]
    assert records[2].age is None
    assert check_path(path) == []


BAD_CASES = [
    ({"drop": "report"}, "report: missing"),
    ({"drop": "study_date"}, "study_date: missing"),
    ({"age": 130}, "age: must be between 0 and 120, got 130"),
    ({"age": -1}, "age: must be between 0 and 120, got -1"),
    ({"sex": "X"}, "sex: unknown value 'X' (expected M, F, U, male, female or unknown)"),
    ({"image": "img/missing.png"}, "image: file not found: img/missing.png"),
    ({"image": ["img/a.png", "img/gone.png"]}, "image: file not found: img/gone.png"),
    ({"report": "   "}, "report: empty"),
    ({"visit_index": 0}, "visit_index: must be >= 1 (visits are numbered from 1), got 0"),
    ({"study_date": "2020-13-01"}, "study_date: expected a date YYYY-MM-DD, got '2020-13-01'"),
    ({"colour": "blue"}, "colour: unknown field"),
    # in words a data steward uses, not the validation library's ("Input should be a valid integer")
    ({"visit_index": "2nd"}, 'visit_index: must be a whole number, got "2nd"'),
    ({"visit_index": 1.5}, "visit_index: must be a whole number, got 1.5"),
    ({"age": "old"}, 'age: must be a number or null, got "old"'),
    ({"study_date": 20200304}, 'study_date: must be a date "YYYY-MM-DD", got 20200304'),
    ({"report": None}, "report: must be text in quotes, got null"),
    ({"patient_id": 7}, "patient_id: must be text in quotes, got 7"),
    ({"image": 5}, "image: must be a path or a list of paths, got 5"),
    ({"split": "later"}, 'split: must be "train", "val" or "test", got "later"'),
]


@pytest.mark.parametrize(("change", "problem"), BAD_CASES)
def test_each_bad_field_is_reported_with_file_line_and_field(folder, change, problem):
    bad = _row(patient_id="p9")
    if "drop" in change:
        del bad[change["drop"]]
    else:
        bad.update(change)
    path = _write(folder, [_row(), bad])
    with pytest.raises(DataValidationError) as err:
        load_manifest(path)
    assert err.value.problems == [f"{path}:2: {problem}"]


def test_bad_json_line_and_duplicate_visit(folder):
    path = _write(folder, [_row(), "{not json", _row()])
    with pytest.raises(DataValidationError) as err:
        load_manifest(path)
    assert err.value.problems[0].startswith(f"{path}:2: json: invalid JSON (")
    assert err.value.problems[1] == (
        f"{path}:3: visit_index: duplicate visit 1 of patient 'p1' (first at {path}:1)"
    )
    assert len(err.value.problems) == 2


def test_all_problems_reported_at_once_in_line_order(folder):
    no_report = _row(patient_id="p2")
    del no_report["report"]
    lines = [
        _row(),
        no_report,
        _row(patient_id="p3", age=200, sex="?"),
        "[1, 2]",
        _row(patient_id="p4", image="img/nope.png"),
        _row(),
        _row(patient_id="p5", report=""),
    ]
    path = _write(folder, lines)
    with pytest.raises(DataValidationError) as err:
        load_manifest(path)
    problems = err.value.problems
    assert [p.split(": ")[0] for p in problems] == [
        f"{path}:2",
        f"{path}:3",
        f"{path}:3",
        f"{path}:4",
        f"{path}:5",
        f"{path}:6",
        f"{path}:7",
    ]
    fields = [p.split(": ")[1] for p in problems]
    assert fields == ["report", "age", "sex", "json", "image", "visit_index", "report"]
    assert str(len(problems)) in str(err.value)


def test_check_main_prints_problems_and_exit_code(folder, capsys):
    good = _write(folder, [_row()])
    assert check_main(good) == 0
    assert "OK, 1 visits" in capsys.readouterr().out
    bad = _write(folder, [_row(age=999)])
    assert check_main(bad) == 2
    out = capsys.readouterr().out
    assert f"{bad}:1: age: must be between 0 and 120, got 999" in out
    assert check_main(folder / "nothing.jsonl") == 2


def _annotation(folder: Path, doc: dict) -> Path:
    path = folder / "annotation.json"
    path.write_text(json.dumps(doc, indent=2))
    return path


def _entry(sid: str, split: str, **extra) -> dict:
    return {
        "id": sid,
        "report": f"report of {sid}.",
        "image_path": [f"{sid}/0.png", f"{sid}/1.png"],
        "split": split,
        **extra,
    }


@pytest.fixture
def iu_folder(tmp_path: Path) -> Path:
    for sid in ("CXR1_IM-1", "CXR2_IM-2", "CXR3_IM-3", "CXR4_IM-4", "CXR5_IM-5", "CXR6_IM-6"):
        _png(tmp_path / "images" / sid / "0.png")
        _png(tmp_path / "images" / sid / "1.png")
    return tmp_path


def test_annotation_loader_reads_r2gen_layout(iu_folder):
    path = _annotation(
        iu_folder,
        {
            "train": [_entry("CXR1_IM-1", "train"), _entry("CXR2_IM-2", "train")],
            "val": [_entry("CXR3_IM-3", "val", age=44, sex="male")],
            "test": [_entry("CXR4_IM-4", "test")],
        },
    )
    records = load_annotation(path)
    assert [(r.patient_id, r.visit_index, r.split) for r in records] == [
        ("CXR1_IM-1", 1, "train"),
        ("CXR2_IM-2", 1, "train"),
        ("CXR3_IM-3", 1, "val"),
        ("CXR4_IM-4", 1, "test"),
    ]
    assert records[0].image_paths == ["images/CXR1_IM-1/0.png", "images/CXR1_IM-1/1.png"]
    assert (records[0].age, records[0].sex, records[0].site) == (None, "U", "iu_xray")
    assert (records[2].age, records[2].sex) == (44, "M")
    assert records[1].report == "report of CXR2_IM-2."
    assert load_records(iu_folder) == records  # a folder resolves to the annotation inside it


def test_annotation_numbers_a_subjects_studies_by_date(iu_folder):
    path = _annotation(
        iu_folder,
        {
            "train": [
                _entry("CXR1_IM-1", "train", subject_id=7, study_date="2021-05-01"),
                _entry("CXR2_IM-2", "train", subject_id=7, study_date="2019-02-03"),
                _entry("CXR3_IM-3", "train", subject_id=8),
            ]
        },
    )
    records = {r.image_paths[0]: r for r in load_annotation(path)}
    assert (records["images/CXR2_IM-2/0.png"].patient_id, records["images/CXR2_IM-2/0.png"].visit_index) == (
        "7",
        1,
    )
    assert records["images/CXR1_IM-1/0.png"].visit_index == 2
    assert records["images/CXR3_IM-3/0.png"].visit_index == 1


def _line_of(text: str, marker: str) -> int:
    """Line of the '{' that opens the entry whose first key line contains ``marker``."""
    return text[: text.index(marker)].count("\n")


def test_annotation_problems_name_the_entry_line(iu_folder):
    no_report = _entry("CXR2_IM-2", "train")
    del no_report["report"]
    doc = {
        "train": [
            _entry("CXR1_IM-1", "train"),
            no_report,
            {**_entry("CXR3_IM-3", "train"), "image_path": []},
        ],
        "val": [
            {**_entry("CXR4_IM-4", "val"), "image_path": ["CXR4_IM-4/9.png"]},
            _entry("CXR5_IM-5", "val", age=150),
        ],
        "test": [_entry("CXR6_IM-6", "train")],
    }
    path = _annotation(iu_folder, doc)
    text = path.read_text()
    starts = [i for i, line in enumerate(text.splitlines(), start=1) if line.strip() == "{"][1:]
    with pytest.raises(DataValidationError) as err:
        load_annotation(path)
    assert err.value.problems == [
        f"{path}:{starts[1]}: report: missing",
        f"{path}:{starts[2]}: image_path: empty list",
        f"{path}:{starts[3]}: image_path: file not found: CXR4_IM-4/9.png",
        f"{path}:{starts[4]}: age: must be between 0 and 120, got 150",
        f"{path}:{starts[5]}: split: says 'train' but the entry is listed under 'test'",
    ]
    assert _line_of(text, '"id": "CXR2_IM-2"') == starts[1]


def test_annotation_duplicate_and_bad_json(iu_folder):
    path = _annotation(
        iu_folder, {"train": [_entry("CXR1_IM-1", "train")], "test": [_entry("CXR1_IM-1", "test")]}
    )
    with pytest.raises(DataValidationError) as err:
        load_annotation(path)
    assert (
        len(err.value.problems) == 1
        and "id: duplicate study 'CXR1_IM-1' (first at" in (err.value.problems[0])
    )
    path.write_text('{"train": [\n  {"id": 1,,}\n]}')
    with pytest.raises(DataValidationError) as err:
        load_annotation(path)
    assert err.value.problems[0].startswith(f"{path}:2: json: invalid JSON")
