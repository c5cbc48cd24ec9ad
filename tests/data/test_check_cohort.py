"""`data check` and the run's start-up check: dates in order, sites large enough, images readable."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from secure_fed.config import load_config
from secure_fed.data.cohort import check_main, cohort_problems, load_image, min_patients
from secure_fed.data.manifest import DataValidationError
from secure_fed.data.synthetic import synthesize
from secure_fed.launch.runner import preflight


@pytest.fixture(scope="module")
def cohort(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthesize(
        tmp_path_factory.mktemp("c"), sites=2, patients=5, visits=3, seed=1, image_size=16
    ).parent


def _copy(cohort: Path, dest: Path, edit: object = None) -> Path:
    shutil.copytree(cohort, dest)
    rows = [json.loads(line) for line in (dest / "manifest.jsonl").read_text().splitlines()]
    if edit is not None:
        rows = edit(rows)  # type: ignore[operator]
    (dest / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return dest / "manifest.jsonl"


def _swap_first_two_dates(rows: list[dict]) -> list[dict]:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["patient_id"]] = counts.get(r["patient_id"], 0) + 1
    patient = next(p for p, n in counts.items() if n >= 2)
    visits = sorted((r for r in rows if r["patient_id"] == patient), key=lambda r: r["visit_index"])
    first, second = visits[0], visits[1]
    assert first["study_date"] < second["study_date"]  # the generator dates visits in order
    first["study_date"], second["study_date"] = second["study_date"], first["study_date"]
    return rows


def test_clean_cohort_has_no_problems(cohort: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cohort_problems(cohort) == []
    assert check_main(cohort) == 0
    assert "OK" in capsys.readouterr().out


def test_visit_dated_before_the_previous_one_is_named(
    cohort: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = _copy(cohort, tmp_path / "d", _swap_first_two_dates)
    problems = cohort_problems(manifest)
    assert len(problems) == 1
    assert "study_date" in problems[0] and "is dated before visit 1" in problems[0]
    assert str(manifest) in problems[0]
    assert check_main(manifest) == 2
    assert "1 problem(s)" in capsys.readouterr().out


def test_site_too_small_to_split_is_named(cohort: Path, tmp_path: Path) -> None:
    def add_tiny_site(rows: list[dict]) -> list[dict]:
        first = rows[0]
        return rows + [dict(first, site="clinic-x", patient_id=f"x{k}", visit_index=1) for k in range(2)]

    manifest = _copy(cohort, tmp_path / "s", add_tiny_site)
    (problem,) = cohort_problems(manifest)
    assert "site 'clinic-x' has 2 patient(s)" in problem and "at least 3 needed" in problem
    # The threshold follows the configured fractions, not a constant.
    assert min_patients(0.2, 0.2) == 3
    assert cohort_problems(manifest, 0.2, 0.2, n_sites=2) == []  # dealt sites: not checked per file site
    (dealt,) = cohort_problems(manifest, 0.2, 0.2, n_sites=5)  # 12 patients, 5 sites: 2 each
    assert "dealt to 5 sites leave 2 per site" in dealt and "data.deal_sites" in dealt


def test_unreadable_image_is_named_by_check_and_by_loading(cohort: Path, tmp_path: Path) -> None:
    manifest = _copy(cohort, tmp_path / "i")
    first = json.loads(manifest.read_text().splitlines()[0])
    broken = manifest.parent / first["image"]
    broken.write_bytes(b"not a png")
    (problem,) = cohort_problems(manifest)
    assert str(broken) in problem and "cannot be read" in problem
    with pytest.raises(DataValidationError, match="cannot be read"):
        load_image(broken, 16)


def test_run_refuses_bad_data_at_start(cohort: Path, tmp_path: Path) -> None:
    manifest = _copy(cohort, tmp_path / "r", _swap_first_two_dates)
    cfg = load_config(None, {"data.source": "manifest", "data.path": str(manifest)})
    with pytest.raises(DataValidationError, match="dated before"):
        preflight(cfg)
    missing = load_config(None, {"data.source": "manifest", "data.path": str(tmp_path / "none.jsonl")})
    with pytest.raises(DataValidationError, match="data.path: .* does not exist"):
        preflight(missing)
    too_few = load_config(None, {"data.synth.patients": 2})
    with pytest.raises(DataValidationError, match="data.synth.patients"):
        preflight(too_few)
    preflight(load_config(None, {"data.source": "manifest", "data.path": str(cohort)}))  # clean: no error
