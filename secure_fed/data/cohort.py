"""Visits with their pixels loaded, grouped by site, and split by patient."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from secure_fed.data.manifest import DataValidationError, load_records, resolve_input
from secure_fed.data.records import VisitRecord

# Fixed, data-independent scaling: 8-bit grey levels to [0, 1]. Statistics fitted on a site's images
# would be one more release of private data.
PIXEL_SCALE = 255.0


@dataclass(frozen=True, eq=False)
class Visit:
    patient_id: str
    visit_index: int
    study_date: str | None
    image: np.ndarray  # float32 [H, W] in [0, 1]
    report: str
    age: float | None
    sex: str
    site: str
    labels: dict[str, Any] | None = None
    split: str | None = None
    extra_views: tuple[np.ndarray, ...] = ()  # the study's further images (IU-Xray: the lateral)


@dataclass
class Cohort:
    sites: dict[str, list[Visit]]

    @property
    def visits(self) -> list[Visit]:
        return [v for site in self.sites.values() for v in site]


def _unreadable(path: Path, err: Exception) -> DataValidationError:
    reason = "not an image format PIL reads" if isinstance(err, Image.UnidentifiedImageError) else str(err)
    return DataValidationError(
        [f"{path}: image: cannot be read ({reason}); replace the file or drop its visit from the manifest"]
    )


# Full scale of the wide greyscale modes PIL opens 16-bit PNG/TIFF exports in: fixed by the file
# format, like PIXEL_SCALE, never by the pixels. convert("L") would clip them to white.
_WIDE_SCALE = {"I;16": 65535.0, "I;16B": 65535.0, "I;16L": 65535.0, "I": 65535.0, "F": 1.0}


def _grey(im: Image.Image) -> Image.Image:
    """Any mode as one grey channel: 8-bit "L" (RGB, palette, alpha: PIL's luminance), or for the
    wide modes a float "F" image already in [0, 1]."""
    scale = _WIDE_SCALE.get(im.mode)
    if scale is None:
        return im.convert("L")
    return Image.fromarray(np.asarray(im, dtype=np.float32) / np.float32(scale))


def load_image(path: Path, image_size: int) -> np.ndarray:
    try:
        with Image.open(path) as im:
            grey = _grey(im)
            if grey.size != (image_size, image_size):
                grey = grey.resize((image_size, image_size), Image.Resampling.BILINEAR)
            scale = np.float32(1.0 if grey.mode == "F" else PIXEL_SCALE)
            return np.clip(np.asarray(grey, dtype=np.float32) / scale, 0.0, 1.0)
    except (OSError, ValueError, SyntaxError) as err:  # PIL raises all three for broken files
        raise _unreadable(path, err) from err


def _read_labels(path: Path) -> dict[tuple[str, int], dict[str, Any]]:
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            out[(row["patient_id"], int(row["visit_index"]))] = {
                "findings": row["findings"],
                "progression": row["progression"],
            }
    return out


def to_visit(
    record: VisitRecord, base: Path, image_size: int, labels: dict[str, Any] | None, views: int = 1
) -> Visit:
    """A record with its first `views` images loaded (for IU-Xray: the frontal view, listed first,
    then the lateral)."""
    paths = record.image_paths[:views]
    return Visit(
        patient_id=record.patient_id,
        visit_index=record.visit_index,
        study_date=record.study_date,
        image=load_image(base / paths[0], image_size),
        report=record.report,
        age=record.age,
        sex=record.sex,
        site=record.site,
        labels=labels,
        split=record.split,
        extra_views=tuple(load_image(base / p, image_size) for p in paths[1:]),
    )


def partition_by_site(
    visits: list[Visit], n_sites: int | None = None, seed: int = 0
) -> dict[str, list[Visit]]:
    """Group by each visit's site; with ``n_sites``, deal whole patients to ``site0..`` at random instead.

    The second form turns a single-source data set (IU-Xray) into ``n_sites`` federated sites.
    """
    if n_sites is None:
        out: dict[str, list[Visit]] = {}
        for v in visits:
            out.setdefault(v.site, []).append(v)
        return out
    if n_sites < 1:
        raise ValueError("n_sites must be >= 1")
    patients = sorted({v.patient_id for v in visits})
    order = np.random.default_rng(seed).permutation(len(patients))
    home = {patients[p]: f"site{rank % n_sites}" for rank, p in enumerate(order)}
    dealt: dict[str, list[Visit]] = {f"site{k}": [] for k in range(n_sites)}
    for v in visits:
        dealt[home[v.patient_id]].append(dataclasses.replace(v, site=home[v.patient_id]))
    return dealt


def load_cohort(
    manifest_path: str | Path, image_size: int, n_sites: int | None = None, seed: int = 0, views: int = 1
) -> Cohort:
    """Manifest or annotation file (or a folder holding one), with ``labels.jsonl`` beside it if present."""
    path = resolve_input(manifest_path)
    records = load_records(path)
    labels_path = path.parent / "labels.jsonl"
    labels = _read_labels(labels_path) if labels_path.is_file() else {}
    visits = [
        to_visit(r, path.parent, image_size, labels.get((r.patient_id, r.visit_index)), views)
        for r in records
    ]
    visits.sort(key=lambda v: (v.site, v.patient_id, v.visit_index))
    return Cohort(partition_by_site(visits, n_sites, seed))


def dates_going_backwards(records: list[VisitRecord], where: str | Path) -> list[str]:
    """One problem per visit dated before the patient's previous visit (by visit_index).

    The temporal model reads a patient's visits in index order as a history: a later visit with an
    earlier date means either field is wrong, and the model would learn the wrong progression.
    """
    by_patient: dict[tuple[str, str], list[VisitRecord]] = {}
    for r in records:
        by_patient.setdefault((r.site, r.patient_id), []).append(r)
    problems: list[str] = []
    for (site, patient), visits in sorted(by_patient.items()):
        dated = sorted((v for v in visits if v.study_date), key=lambda v: v.visit_index)
        for before, after in zip(dated, dated[1:], strict=False):
            if str(after.study_date) < str(before.study_date):  # ISO dates sort as strings
                problems.append(
                    f"{where}: study_date: patient {patient!r} at site {site!r}: visit {after.visit_index}"
                    f" ({after.study_date}) is dated before visit {before.visit_index}"
                    f" ({before.study_date}); fix the study_date or visit_index of one of them"
                )
    return problems


def unreadable_images(records: list[VisitRecord], base: Path) -> list[str]:
    """One problem per image file that exists but does not decode (missing ones the manifest reports)."""
    problems: list[str] = []
    for r in records:
        for rel in r.image_paths:
            path = base / rel
            if not path.is_file():
                continue
            try:
                with Image.open(path) as im:
                    im.verify()
            except (OSError, ValueError, SyntaxError) as err:
                problems += _unreadable(path, err).problems
    return problems


def sites_too_small(
    records: list[VisitRecord], val_fraction: float, test_fraction: float, where: str | Path
) -> list[str]:
    """One problem per site whose patients cannot fill train, validation and test."""
    patients: dict[str, set[str]] = {}
    for r in records:
        patients.setdefault(r.site, set()).add(r.patient_id)
    problems: list[str] = []
    for site, ids in sorted(patients.items()):
        try:
            n_val, n_test = _split_sizes(len(ids), val_fraction, test_fraction)
        except ValueError:
            n_val = n_test = 0
        if n_val < 1 or n_test < 1 or len(ids) - n_val - n_test < 1:
            problems.append(
                f"{where}: site: site {site!r} has {len(ids)} patient(s), too few to split into"
                f" train, validation and test (at least {min_patients(val_fraction, test_fraction)}"
                " needed); add patients or merge it with another site"
            )
    return problems


def min_patients(val_fraction: float, test_fraction: float) -> int:
    """The smallest site that gets a non-empty train, validation and test split."""
    for n in range(1, 100_000):
        try:
            n_val, n_test = _split_sizes(n, val_fraction, test_fraction)
        except ValueError:
            continue
        if n_val >= 1 and n_test >= 1 and n - n_val - n_test >= 1:
            return n
    raise ValueError(f"no site size splits with val {val_fraction} and test {test_fraction}")


def cohort_problems(
    path: str | Path, val_fraction: float = 0.2, test_fraction: float = 0.2, n_sites: int | None = None
) -> list[str]:
    """Every problem that stops a run on this input: the file's own, then dates and site sizes.

    Reads the records only (no pixels), so a run can refuse its data before anything slow starts.
    With ``n_sites`` (a single-source data set dealt to that many sites, ``data.deal_sites``) the
    file's own sites are not checked, the dealt ones are.
    """
    where = resolve_input(path)
    try:
        records = load_records(where)
    except DataValidationError as err:
        return err.problems
    problems = unreadable_images(records, where.parent) + dates_going_backwards(records, where)
    if n_sites is None:
        problems += sites_too_small(records, val_fraction, test_fraction, where)
        return problems
    patients = len({r.patient_id for r in records})
    need = min_patients(val_fraction, test_fraction)
    if patients // n_sites < need:  # dealt round-robin: the smallest site gets the floor
        problems.append(
            f"{where}: site: {patients} patient(s) dealt to {n_sites} sites leave {patients // n_sites}"
            f" per site, too few to split into train, validation and test (at least {need} needed);"
            " lower data.deal_sites"
        )
    return problems


def check_main(path: str | Path, val_fraction: float = 0.2, test_fraction: float = 0.2) -> int:
    """``secure-fed data check PATH``: print each problem; exit code 2 when there are any, else 0."""
    problems = cohort_problems(path, val_fraction, test_fraction)
    where = resolve_input(path)
    if problems:
        for problem in problems:
            print(problem)
        print(f"{len(problems)} problem(s) in {where}")
        return 2
    records = load_records(where)
    patients = {r.patient_id for r in records}
    sites = {r.site for r in records}
    print(f"{where}: OK, {len(records)} visits, {len(patients)} patients, {len(sites)} site(s)")
    return 0


def _split_sizes(n: int, val_fraction: float, test_fraction: float) -> tuple[int, int]:
    n_val, n_test = round(n * val_fraction), round(n * test_fraction)
    if n >= 3:  # every split non-empty when there are patients enough for it
        n_val, n_test = max(n_val, 1 if val_fraction > 0 else 0), max(n_test, 1 if test_fraction > 0 else 0)
    if n - n_val - n_test < 1:
        raise ValueError(f"{n} patient(s) cannot fill train, val ({val_fraction}) and test ({test_fraction})")
    return n_val, n_test


def split_patients(
    visits: list[Visit], val_fraction: float, test_fraction: float, seed: int
) -> tuple[list[Visit], list[Visit], list[Visit]]:
    """(train, val, test) with each patient's visits all in one of them, visits kept in input order."""
    patients = sorted({v.patient_id for v in visits})
    n_val, n_test = _split_sizes(len(patients), val_fraction, test_fraction)
    order = np.random.default_rng(seed).permutation(len(patients))
    test_ids = {patients[i] for i in order[:n_test]}
    val_ids = {patients[i] for i in order[n_test : n_test + n_val]}
    train = [v for v in visits if v.patient_id not in test_ids | val_ids]
    val = [v for v in visits if v.patient_id in val_ids]
    test = [v for v in visits if v.patient_id in test_ids]
    return train, val, test
