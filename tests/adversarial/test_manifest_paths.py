"""Image paths that leave the data folder: a manifest (or an IU-Xray annotation file) written by
someone else than the site's data steward, or an export gone wrong, names `../../etc/passwd` or an
absolute path, and the site's loader reads that file as a patient's image. A path must stay inside
the folder the data lives in; anything else is one validation problem, `file:line: field: ...`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from secure_fed.data.manifest import DataValidationError, load_annotation, load_manifest


def _png(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("L", (8, 8), 128).save(path)
    return path


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    """A data folder with one image of its own, and a readable image outside it."""
    data = tmp_path / "hospital" / "data"
    _png(data / "img" / "a.png")
    return data, _png(tmp_path / "elsewhere" / "secret.png")


def _outside_paths(data: Path, outside: Path) -> list[str]:
    return [str(outside), f"../../elsewhere/{outside.name}", f"img/../../../elsewhere/{outside.name}"]


def test_a_manifest_cannot_point_outside_its_data_folder(layout: tuple[Path, Path]) -> None:
    data, outside = layout
    escapes = _outside_paths(data, outside)
    row = {
        "patient_id": "p1",
        "study_date": "2020-03-04",
        "report": "the lungs are clear.",
        "age": 61,
        "sex": "F",
        "site": "siteA",
    }
    lines = [{**row, "visit_index": 1, "image": "img/a.png"}]
    lines += [{**row, "visit_index": k, "image": p} for k, p in enumerate(escapes, start=2)]
    lines.append({**row, "visit_index": 9, "image": ["img/a.png", escapes[1]]})
    path = data / "manifest.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(DataValidationError) as err:
        load_manifest(path)
    expected = [*escapes, escapes[1]]
    assert err.value.problems == [
        f"{path}:{line}: image: not inside the data folder (a path relative to {data}, without '..'): {p}"
        for line, p in enumerate(expected, start=2)
    ]


def test_an_annotation_file_cannot_point_outside_its_image_folder(layout: tuple[Path, Path]) -> None:
    data, outside = layout
    escapes = _outside_paths(data, outside)
    entries = [{"id": "s0", "report": "clear.", "image_path": ["img/a.png"]}]
    entries += [{"id": f"s{k}", "report": "clear.", "image_path": [p]} for k, p in enumerate(escapes, 1)]
    path = data / "annotation.json"
    path.write_text(json.dumps({"train": entries}, indent=1))
    with pytest.raises(DataValidationError) as err:
        load_annotation(path)
    assert [p.split(": ", 1)[1] for p in err.value.problems] == [
        f"image_path: not inside the image folder (a path relative to {data}, without '..'): {p}"
        for p in escapes
    ]


def test_an_imaging_manifest_cannot_point_outside_its_folder(layout: tuple[Path, Path]) -> None:
    """FM2's multi-modality manifest: the same rule, the same kind of problem line."""
    from secure_fed.data.multimodal import load_imaging_manifest

    data, outside = layout
    escapes = _outside_paths(data, outside)
    rows = [{"id": "i0", "image": "img/a.png", "modality": "xray", "label": "normal"}]
    rows += [{**rows[0], "id": f"i{k}", "image": p} for k, p in enumerate(escapes, 1)]
    path = data / "manifest.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(DataValidationError) as err:
        load_imaging_manifest(path, ["xray"])
    assert err.value.problems == [
        f"{path}:{line}: image: not inside the data folder (a path relative to {data}, without '..'): {p}"
        for line, p in enumerate(escapes, start=2)
    ]
