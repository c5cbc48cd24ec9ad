"""A synthetic multi-modality imaging benchmark for FM2, in the spirit of the seed's MIMH, and the
federated splits the FM2 paper studies.

Five imaging modalities differ in what the image is (anatomy) and how it looks (intensity, texture,
noise model): a chest radiograph (ribs over dark lungs, Gaussian noise), a CT slice (a body disc
with a bone ring), a brain MRI (an ellipse with folded cortex, little noise), an ultrasound sector
(a fan with multiplicative speckle) and a fundus photograph (a disc with vessels and an optic
disc). Classes come from one shared vocabulary; each modality shows its own subset of them, as
real scanners do (no fundus "fracture"). A class is drawn as the same kind of lesion whatever the
modality (a mass a bright blob, an effusion a fluid level, ...), so what a class looks like can
transfer across modalities while the background never does. Each image has a template caption
(modality, finding, location) for Caption-Enhanced Learning.

Splits: `split_overlapped` gives every site every modality with Dirichlet(φ) label skew per class
(small φ: each class mostly at one site; φ = 100: nearly even), `split_disjoint` gives each site
its own modalities. Everything is drawn from generators keyed by the seed, so a benchmark and its
splits are reproducible.

Patients: DP's unit is the patient, and a patient may have several images. Every record carries
a `patient_id` (the synthetic benchmark deals each modality's images to patients of one to three
images, drawn after rendering, so the images themselves do not change); a DP run groups a site's
images by it and refuses records without one.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from secure_fed.config import RunConfig
from secure_fed.data.cache import made_once
from secure_fed.data.manifest import DataValidationError, outside_folder, plain_problem

CLASSES: tuple[str, ...] = (
    "normal",
    "mass",
    "effusion",
    "fracture",
    "hemorrhage",
    "edema",
    "nodule",
    "cyst",
    "retinopathy",
    "stone",
)
MODALITY_CLASSES: dict[str, tuple[str, ...]] = {
    "xray": ("normal", "effusion", "fracture", "nodule", "edema"),
    "ct": ("normal", "mass", "hemorrhage", "stone", "nodule"),
    "mri": ("normal", "mass", "hemorrhage", "cyst", "edema"),
    "ultrasound": ("normal", "cyst", "stone", "mass", "effusion"),
    "fundus": ("normal", "retinopathy", "hemorrhage", "edema"),
}
MODALITIES: tuple[str, ...] = tuple(MODALITY_CLASSES)
_MODALITY_WORDS = {
    "xray": ("chest radiograph", "frontal chest x-ray"),
    "ct": ("axial CT slice", "computed tomography image"),
    "mri": ("brain MRI", "T2-weighted MR image"),
    "ultrasound": ("ultrasound scan", "sonographic image"),
    "fundus": ("fundus photograph", "retinal image"),
}
_FINDING_WORDS = {
    "normal": ("no abnormality", "normal appearance"),
    "mass": ("a solid mass", "a space-occupying lesion"),
    "effusion": ("a fluid collection", "an effusion"),
    "fracture": ("a fracture line", "a cortical break"),
    "hemorrhage": ("a hemorrhage", "a bleed"),
    "edema": ("diffuse edema", "swelling with fluid"),
    "nodule": ("a small nodule", "a rounded nodule"),
    "cyst": ("a cyst", "a thin-walled cystic lesion"),
    "retinopathy": ("retinopathy with exudates", "scattered exudates"),
    "stone": ("a calcified stone", "a dense calculus"),
}
_LOCATIONS = ("upper left", "upper right", "lower left", "lower right", "centre")


class ImagingRecord(BaseModel):
    """One image of a multi-modality manifest (JSONL, one object per line)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    image: str
    modality: str
    label: str
    caption: str = ""
    site: str = ""
    # the patient the image belongs to: DP clips a patient's images together (empty: unknown,
    # refused under DP, each image its own unit otherwise)
    patient_id: str = ""

    @field_validator("id", "image", "modality", "label")
    @classmethod
    def _not_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value


def _grid(size: int) -> tuple[np.ndarray, np.ndarray]:
    axis = np.linspace(-1.0, 1.0, size)
    return np.meshgrid(axis, axis, indexing="ij")


def _background(modality: str, size: int, rng: np.random.Generator) -> np.ndarray:
    y, x = _grid(size)
    r = np.hypot(x, y)
    if modality == "xray":
        img = 0.15 + 0.25 * np.exp(-(x**2) / 0.02)  # mediastinum
        for k in range(-3, 4):  # ribs: bright arcs over dark lungs
            img += 0.25 * np.exp(-(((y - 0.2 * k) - 0.15 * x**2) ** 2) / 0.002)
        return img + rng.normal(0, 0.05, img.shape)
    if modality == "ct":
        body = (np.hypot(x / 0.9, y / 0.7) < 1).astype(float)
        ring = np.exp(-((np.hypot(x / 0.55, y / 0.45) - 1) ** 2) / 0.005)
        return 0.05 + 0.4 * body + 0.5 * ring + rng.normal(0, 0.03, body.shape)
    if modality == "mri":
        brain = np.hypot(x / 0.75, y / 0.9) < 1
        folds = 0.15 * np.sin(18 * np.arctan2(y, x) + 10 * r)
        return np.where(brain, 0.45 + folds, 0.02) + rng.normal(0, 0.01, r.shape)
    if modality == "ultrasound":
        angle = np.arctan2(x, y + 1.0)
        fan = (np.abs(angle) < 0.6) & (np.hypot(x, y + 1.0) < 1.9)
        speckle = rng.gamma(2.0, 0.5, r.shape)  # multiplicative speckle: the look of ultrasound
        return np.where(fan, 0.35 * speckle, 0.0)
    if modality == "fundus":
        disc = r < 0.95
        img = np.where(disc, 0.5 - 0.2 * r, 0.0)
        img += 0.3 * np.exp(-((x - 0.45) ** 2 + y**2) / 0.01)  # optic disc
        for k in range(4):  # vessels leaving the optic disc
            img -= 0.15 * np.exp(-((y - (k - 1.5) * 0.4 * (x - 0.45)) ** 2) / 0.0015) * disc
        return img + rng.normal(0, 0.02, r.shape)
    raise ValueError(f"unknown modality {modality!r}; known: {', '.join(MODALITIES)}")


def _lesion(label: str, size: int, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """The class's lesion, the same kind of mark in every modality; returns it and its location."""
    loc = int(rng.integers(len(_LOCATIONS)))
    cy, cx = [(-0.4, -0.4), (-0.4, 0.4), (0.4, -0.4), (0.4, 0.4), (0.0, 0.0)][loc]
    cy, cx = cy + rng.normal(0, 0.05), cx + rng.normal(0, 0.05)
    y, x = _grid(size)
    d2 = (x - cx) ** 2 + (y - cy) ** 2
    if label == "normal":
        return np.zeros((size, size)), loc
    shapes = {
        "mass": 0.6 * np.exp(-d2 / 0.02),
        "nodule": 0.7 * np.exp(-d2 / 0.004),
        "cyst": 0.5 * np.exp(-((np.sqrt(d2) - 0.15) ** 2) / 0.001),  # a bright wall, dark centre
        "effusion": 0.4 * (y > 0.45 + 0.1 * np.sign(cx) * x),  # a fluid level at the base
        "fracture": 0.6 * np.exp(-(((x - cx) - 0.5 * (y - cy)) ** 2) / 0.0008) * (d2 < 0.08),
        "hemorrhage": -0.35 * np.exp(-d2 / 0.01) + 0.35 * np.exp(-d2 / 0.002),
        "edema": 0.2 * np.exp(-d2 / 0.15),
        "retinopathy": sum(
            0.5 * np.exp(-((x - cx - dx) ** 2 + (y - cy - dy) ** 2) / 0.0015)
            for dx, dy in rng.normal(0, 0.15, (6, 2))
        ),
        "stone": 0.9 * (d2 < 0.004),
    }
    return np.asarray(shapes[label], dtype=float), loc


def render(modality: str, label: str, size: int, rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """One image in [0, 1] and its caption."""
    if label not in MODALITY_CLASSES.get(modality, ()):
        raise ValueError(f"{modality} images do not show {label!r}")
    lesion, loc = _lesion(label, size, rng)
    img = np.clip(_background(modality, size, rng) + lesion, 0.0, 1.0)
    where = "" if label == "normal" else f" in the {_LOCATIONS[loc]} region"
    words = _MODALITY_WORDS[modality][int(rng.integers(2))]
    finding = _FINDING_WORDS[label][int(rng.integers(2))]
    return img.astype(np.float32), f"{words} showing {finding}{where}."


def synthesize_multimodal(
    out_dir: Path | str,
    per_class: int = 40,
    modalities: Sequence[str] = MODALITIES,
    image_size: int = 32,
    seed: int = 0,
) -> Path:
    """Write images/ and manifest.jsonl (`ImagingRecord`s, no site yet); returns the manifest."""
    out = Path(out_dir)
    rng = np.random.default_rng(seed)
    records: list[ImagingRecord] = []
    for modality in modalities:
        (out / "images" / modality).mkdir(parents=True, exist_ok=True)
        for label in MODALITY_CLASSES[modality]:
            for k in range(per_class):
                pixels, caption = render(modality, label, image_size, rng)
                rel = f"images/{modality}/{label}_{k:04d}.png"
                Image.fromarray(np.round(pixels * 255).astype(np.uint8)).save(out / rel)
                record = ImagingRecord(
                    id=f"{modality}-{label}-{k}", image=rel, modality=modality, label=label, caption=caption
                )
                records.append(record)
    lines = [r.model_dump_json() for r in assign_patients(records, seed)]
    manifest = out / "manifest.jsonl"
    manifest.write_text("\n".join(lines) + "\n")
    return manifest


def assign_patients(records: Sequence[ImagingRecord], seed: int, most: int = 3) -> list[ImagingRecord]:
    """Deal each modality's images, shuffled, to patients of 1..`most` images (a patient scanned
    several times, with different findings). Its own generator: the rendered images stay the same."""
    rng = np.random.default_rng([seed, 0x9A71E27])
    patient_of: dict[int, str] = {}
    count = 0
    for modality in sorted({r.modality for r in records}):
        mine = [i for i, r in enumerate(records) if r.modality == modality]
        order = rng.permutation(len(mine))
        at = 0
        while at < len(order):
            size = int(rng.integers(1, most + 1))
            for j in order[at : at + size]:
                patient_of[mine[j]] = f"patient-{count:05d}"
            count, at = count + 1, at + size
    return [r.model_copy(update={"patient_id": patient_of[i]}) for i, r in enumerate(records)]


def load_imaging_manifest(path: Path | str, modalities: Sequence[str] = MODALITIES) -> list[ImagingRecord]:
    """Every record, or `DataValidationError` with every problem as `file:line: field: problem`.

    `modalities` is the federation's global modality vocabulary: DMoE's expert indices."""
    path = Path(path)
    problems: list[str] = []
    records: list[ImagingRecord] = []
    seen: dict[str, int] = {}
    try:
        text = path.read_text()
    except OSError as err:
        raise DataValidationError([f"{path}: cannot read ({err.strerror or err})"]) from None
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{line_no}"
        try:
            record = ImagingRecord.model_validate(json.loads(line))
        except json.JSONDecodeError as err:
            problems.append(f"{where}: record: not JSON ({err.msg})")
            continue
        except ValidationError as err:
            for e in err.errors():
                field = str(e["loc"][0]) if e["loc"] else "record"
                msg = "unknown field" if e["type"] == "extra_forbidden" else plain_problem(e, "")
                problems.append(f"{where}: {field}: {msg}")
            continue
        if record.modality not in modalities:
            problems.append(f"{where}: modality: {record.modality!r} is not one of {', '.join(modalities)}")
        if outside_folder(record.image):  # a site would read whatever file it names as an image
            problems.append(
                f"{where}: image: not inside the data folder "
                f"(a path relative to {path.parent}, without '..'): {record.image}"
            )
        elif not (path.parent / record.image).is_file():
            problems.append(f"{where}: image: {record.image} not found beside the manifest")
        if record.id in seen:
            problems.append(f"{where}: id: {record.id!r} already on line {seen[record.id]}")
        seen.setdefault(record.id, line_no)
        records.append(record)
    if problems:
        raise DataValidationError(problems)
    if not records:
        raise DataValidationError([f"{path}: no records"])
    return records


@dataclass(frozen=True)
class Split:
    """Which record indices each site holds."""

    sites: dict[str, list[int]]

    def labels(self, records: Sequence[ImagingRecord], site: str) -> list[str]:
        return [records[i].label for i in self.sites[site]]


def split_overlapped(records: Sequence[ImagingRecord], n_sites: int, phi: float, seed: int = 0) -> Split:
    """Every site sees every modality; within each (modality, class) the records are dealt to
    sites in proportions drawn from Dirichlet(φ, …, φ) (Hsu et al. 2019's label skew)."""
    if n_sites < 1 or not phi > 0:
        raise ValueError("need at least one site and φ > 0")
    rng = np.random.default_rng(seed)
    groups: dict[tuple[str, str], list[int]] = {}
    for i, r in enumerate(records):
        groups.setdefault((r.modality, r.label), []).append(i)
    sites: dict[str, list[int]] = {f"site{k}": [] for k in range(n_sites)}
    for key in sorted(groups):
        members = np.array(groups[key])
        rng.shuffle(members)
        shares = rng.dirichlet(np.full(n_sites, phi))
        cuts = np.round(np.cumsum(shares)[:-1] * len(members)).astype(int)
        for k, part in enumerate(np.split(members, cuts)):
            sites[f"site{k}"].extend(int(i) for i in part)
    return Split({s: sorted(ix) for s, ix in sites.items()})


def split_disjoint(
    records: Sequence[ImagingRecord], n_sites: int, modalities: Sequence[str] | None = None
) -> Split:
    """Each site holds whole modalities, no two sites the same one (dealt round-robin)."""
    present = sorted({r.modality for r in records}) if modalities is None else list(modalities)
    if n_sites > len(present):
        raise ValueError(f"{n_sites} sites cannot each hold their own of {len(present)} modalities")
    owner: Mapping[str, str] = {m: f"site{k % n_sites}" for k, m in enumerate(present)}
    sites: dict[str, list[int]] = {f"site{k}": [] for k in range(n_sites)}
    for i, r in enumerate(records):
        if r.modality in owner:
            sites[owner[r.modality]].append(i)
    return Split(sites)


def synthesize_sited(
    out_dir: Path | str,
    sites: int,
    per_class: int = 40,
    split: str = "overlapped",
    phi: float = 0.3,
    image_size: int = 32,
    seed: int = 0,
) -> tuple[Path, dict[str, int]]:
    """The benchmark with each record's site set by the split: a manifest `data.imaging.path` can
    name, as a real federation's would be. Returns the manifest and the images per site."""
    if split == "disjoint" and sites > len(MODALITIES):  # before minutes of rendering
        raise ValueError(f"{sites} sites cannot each hold their own of {len(MODALITIES)} modalities")
    manifest = synthesize_multimodal(out_dir, per_class=per_class, image_size=image_size, seed=seed)
    records = load_imaging_manifest(manifest)
    dealt = (
        split_overlapped(records, sites, phi, seed)
        if split == "overlapped"
        else split_disjoint(records, sites)
    )
    owner = {i: site for site, members in dealt.sites.items() for i in members}
    lines = [
        r.model_copy(update={"site": owner[i]}).model_dump_json() for i, r in enumerate(records) if i in owner
    ]
    manifest.write_text("\n".join(lines) + "\n")
    return manifest, {site: len(members) for site, members in dealt.sites.items()}


def imaging_manifest(cfg: RunConfig) -> Path:
    """The manifest to load; the synthetic benchmark is rendered once per setting and cached."""
    im = cfg.data.imaging
    if im.path is not None:
        return Path(im.path)
    # "-patients": records carry patient ids (a cache made before them lacks them)
    folder = Path(cfg.model.cache_dir) / f"imaging-pc{im.per_class}-i{im.image_size}-seed{cfg.seed}-patients"
    return made_once(
        folder,
        lambda tmp: synthesize_multimodal(
            tmp, per_class=im.per_class, image_size=im.image_size, seed=cfg.seed
        ),
    )


@functools.lru_cache(maxsize=2)
def _records(manifest: Path) -> tuple[ImagingRecord, ...]:
    records = tuple(load_imaging_manifest(manifest))
    unknown = sorted({r.label for r in records} - set(CLASSES))
    if unknown:
        raise DataValidationError(
            [f"{manifest}: label: {', '.join(unknown)} not in the class vocabulary {', '.join(CLASSES)}"]
        )
    return records


def imaging_split(cfg: RunConfig) -> tuple[tuple[ImagingRecord, ...], Split]:
    im = cfg.data.imaging
    records = _records(imaging_manifest(cfg))
    if cfg.dp.enabled:
        # DP's unit is the patient: an image without one would count as a patient of its own
        anonymous = [r.id for r in records if not r.patient_id]
        if anonymous:
            raise DataValidationError(
                [
                    f"{imaging_manifest(cfg)}: patient_id: missing on {len(anonymous)} record(s), e.g. "
                    f"{anonymous[0]}; DP's unit is the patient: give every record its patient_id "
                    "(or turn dp.enabled off)"
                ]
            )
    if im.path is not None:
        missing = [r.id for r in records if not r.site]
        if missing:
            raise DataValidationError(
                [f"{im.path}: site: missing on {len(missing)} record(s), e.g. {missing[0]}"]
            )
        sites: dict[str, list[int]] = {}
        for i, r in enumerate(records):
            sites.setdefault(r.site, []).append(i)
        return records, Split(sites)
    if im.split == "disjoint":
        return records, split_disjoint(records, im.sites)
    return records, split_overlapped(records, im.sites, im.phi, seed=cfg.seed)
