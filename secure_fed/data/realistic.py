"""A small, real-looking example data set for tests: no patient data, only its shape.

Real exports differ from the synthetic cohort in ways that break a pipeline quietly: report words
outside the generator's lexicon (and outside any public word list), images of any size, greyscale,
RGB or 16-bit, PNG or JPEG, one or two views per study, and one visit per patient (IU-Xray). This
module writes such a set, as an IU-Xray/R2Gen ``annotation.json`` and as a JSONL manifest over the
same images. The sentences are written here in the style of chest radiograph reports.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

# Sentences in the style of IU-Xray findings/impressions ("xxxx" is IU-Xray's de-identification).
NORMAL_SENTENCES: tuple[str, ...] = (
    "The heart is normal in size.",
    "Heart size and mediastinal contour are within normal limits.",
    "The cardiomediastinal silhouette is unremarkable.",
    "The lungs are clear bilaterally.",
    "No focal airspace consolidation, pleural effusion or pneumothorax.",
    "There is no pneumothorax.",
    "Pulmonary vasculature is within normal limits.",
    "Visualized osseous structures are intact.",
    "No acute bony abnormality.",
    "No acute cardiopulmonary disease.",
)
INCIDENTAL_SENTENCES: tuple[str, ...] = (
    "Degenerative changes of the thoracic spine.",
    "Calcified granuloma in the right upper lobe.",
    "Stable dextroscoliosis of the thoracic spine.",
    "Tortuous and ectatic thoracic aorta.",
    "Postoperative sternotomy wires are intact.",
    "Xxxx opacity likely represents overlying nipple shadow.",
    "Surgical clips project over the left axilla.",
    "Hyperexpanded lungs consistent with emphysema.",
)
FINDING_SENTENCES: tuple[str, ...] = (
    "Mild cardiomegaly.",
    "The heart size is enlarged.",
    "Small left pleural effusion.",
    "Possible small right pleural effusion.",
    "Patchy opacity in the left lower lobe may represent pneumonia.",
    "Bibasilar atelectasis.",
    "Mild pulmonary edema with interstitial prominence.",
    "Right middle lobe consolidation.",
    "Healed fracture of the left seventh rib.",
    "Small right apical pneumothorax.",
    "Endotracheal tube tip 4 cm above the carina.",
    "Right-sided picc line with tip in the distal svc.",
    "9 mm nodule in the left upper lobe, recommend ct for further evaluation.",
)

MODES: tuple[tuple[str, str], ...] = (
    ("L", "png"),
    ("RGB", "jpg"),
    ("L", "jpg"),
    ("RGB", "png"),
    ("I;16", "png"),
)


def make_report(rng: np.random.Generator) -> str:
    """Two to four normal sentences, maybe an incidental one, maybe one or two findings."""
    picks = list(rng.choice(NORMAL_SENTENCES, size=int(rng.integers(2, 5)), replace=False))
    if rng.random() < 0.5:
        picks.append(str(rng.choice(INCIDENTAL_SENTENCES)))
    if rng.random() < 0.6:
        picks[:0] = list(rng.choice(FINDING_SENTENCES, size=int(rng.integers(1, 3)), replace=False))
    return " ".join(str(s) for s in picks)


def _radiograph(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """A chest-like grey picture in [0, 1]: two dark lung fields in a brighter body, plus noise."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    y, x = y / height, x / width
    body = np.exp(-(((x - 0.5) / 0.45) ** 2) - ((y - 0.55) / 0.6) ** 2)
    lungs = sum(
        np.exp(-(((x - cx) / 0.13) ** 2) - ((y - 0.45) / 0.25) ** 2)
        for cx in (0.33 + rng.normal(0, 0.02), 0.67)
    )
    picture = 0.25 + 0.6 * body - 0.4 * lungs + rng.normal(0, 0.03, size=(height, width))
    return np.clip(picture, 0.0, 1.0).astype(np.float32)


def _save(picture: np.ndarray, mode: str, path: Path) -> None:
    if mode == "I;16":  # a 16-bit greyscale export, as many PACS write
        Image.fromarray((picture * 65535).astype(np.uint16)).save(path)
        return
    grey = Image.fromarray((picture * 255).astype(np.uint8), mode="L")
    (grey if mode == "L" else grey.convert("RGB")).save(path, quality=90)


def write_realistic(out_dir: str | Path, studies: int = 24, seed: int = 0, sites: int = 3) -> Path:
    """Write ``annotation.json`` (R2Gen: train/val/test lists of ``{id, report, image_path, split}``,
    images under ``images/``) and ``manifest.jsonl`` over the same images (one visit per patient,
    dealt to ``sites`` sites). Returns the annotation file."""
    out = Path(out_dir)
    images = out / "images"
    images.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    splits: dict[str, list[dict[str, object]]] = {"train": [], "val": [], "test": []}
    manifest: list[str] = []
    for k in range(studies):
        study = f"CXR{1000 + k}_IM-{k:04d}"
        views = 1 if rng.random() < 0.4 else 2
        paths = []
        for view in range(views):
            height, width = int(rng.integers(40, 161)), int(rng.integers(40, 161))
            mode, ext = MODES[int(rng.integers(len(MODES)))]
            rel = f"{study}/{view}.{ext}"
            (images / study).mkdir(exist_ok=True)
            _save(_radiograph(rng, height, width), mode, images / rel)
            paths.append(rel)
        report = make_report(rng)
        split = "train" if k % 5 < 3 else ("val" if k % 5 == 3 else "test")
        splits[split].append({"id": study, "report": report, "image_path": paths, "split": split})
        age = None if rng.random() < 0.2 else float(rng.integers(20, 90))
        manifest.append(
            json.dumps(
                {
                    "patient_id": f"P{k:05d}",
                    "visit_index": 1,
                    "study_date": f"20{10 + k % 12:02d}-0{1 + k % 9}-1{k % 10}",
                    "image": [f"images/{p}" for p in paths],
                    "report": report,
                    "age": age,
                    "sex": str(rng.choice(["M", "F", "U"])),
                    "site": f"hospital{k % sites}",
                }
            )
        )
    annotation = out / "annotation.json"
    annotation.write_text(json.dumps(splits, indent=1))
    (out / "manifest.jsonl").write_text("\n".join(manifest) + "\n")
    return annotation
