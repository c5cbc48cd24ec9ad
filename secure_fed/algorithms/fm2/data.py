"""A site's images for FM2 and the imaging baselines: the benchmark (synthetic, cached, or a
manifest), the federated split, each site's train/test share as tensors. Nothing here leaves the site.

Privacy unit: the patient. Each split carries every image's patient slot (from the records'
`patient_id`), so DP-SGD samples patients and clips all of a patient's images together; a DP run
on records without patient ids is refused (`ImagingLearner.create`), since several images of one
patient would otherwise each count as a separate unit.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from secure_fed.algorithms.fm2.model import modality_index
from secure_fed.config import RunConfig
from secure_fed.data.multimodal import CLASSES, MODALITIES, ImagingRecord, imaging_manifest, imaging_split

CAPTION_BUCKETS = 512  # hashed caption words: no vocabulary fitted on any site's text


@dataclass
class ImagingSplit:
    x: torch.Tensor  # (n, 1, size, size) in [0, 1]
    modality: torch.Tensor  # index into MODALITIES: the domain expert
    labels: torch.Tensor  # index into CLASSES
    caption_tokens: torch.Tensor  # (n, words), 0 = padding
    caption_lengths: torch.Tensor
    patient: torch.Tensor  # (n,) each image's patient slot, 0..n_patients-1
    missing_patient_ids: int = 0  # images without a patient_id (each made its own slot)

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def n_patients(self) -> int:
        return int(self.patient.max()) + 1 if len(self.patient) else 0


@dataclass
class ImagingSite:
    name: str
    train: ImagingSplit
    test: ImagingSplit
    record_ids: list[str]


def caption_tokens(captions: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Words hashed into CAPTION_BUCKETS - 1 buckets (1…), padded with 0, and each caption's length."""
    rows = [
        [
            1
            + int.from_bytes(hashlib.blake2s(w.encode(), digest_size=4).digest(), "big")
            % (CAPTION_BUCKETS - 1)
            for w in re.findall(r"[a-z0-9-]+", c.lower())
        ]
        or [0]
        for c in captions
    ]
    width = max((len(r) for r in rows), default=1)
    tokens = torch.zeros(len(rows), width, dtype=torch.long)
    for i, r in enumerate(rows):
        tokens[i, : len(r)] = torch.tensor(r)
    return tokens, torch.tensor([len(r) for r in rows])


def _tensors(records: Sequence[ImagingRecord], root: Path, size: int) -> ImagingSplit:
    images = []
    for r in records:
        with Image.open(root / r.image) as img:
            pixels = img.convert("L").resize((size, size), Image.Resampling.BILINEAR)
            images.append(np.asarray(pixels, dtype=np.float32) / 255.0)
    x = torch.from_numpy(np.stack(images)[:, None]) if images else torch.zeros(0, 1, size, size)
    tokens, lengths = caption_tokens([r.caption for r in records])
    slots: dict[str, int] = {}
    patient = []
    for r in records:
        # an image without a patient id is a unit of its own (refused under DP by the learner)
        patient.append(slots.setdefault(r.patient_id or f"\0{r.id}", len(slots)))
    return ImagingSplit(
        x=x,
        modality=modality_index([r.modality for r in records], MODALITIES),
        labels=torch.tensor([CLASSES.index(r.label) for r in records], dtype=torch.long),
        caption_tokens=tokens,
        caption_lengths=lengths,
        patient=torch.tensor(patient, dtype=torch.long),
        missing_patient_ids=sum(1 for r in records if not r.patient_id),
    )


def load_imaging_site(cfg: RunConfig, site: str) -> ImagingSite:
    records, split = imaging_split(cfg)
    if site not in split.sites:
        raise ValueError(
            f"site {site!r} not in the imaging benchmark (sites: {', '.join(sorted(split.sites))})"
        )
    mine = [records[i] for i in split.sites[site]]
    # the test share is drawn per site from the run's seed: paired across methods
    digest = hashlib.sha256(f"{cfg.seed}|{site}".encode()).digest()
    order = np.random.default_rng(int.from_bytes(digest[:8], "big")).permutation(len(mine))
    n_test = int(round(cfg.data.imaging.test_fraction * len(mine)))
    test = [mine[i] for i in sorted(order[:n_test])]
    train = [mine[i] for i in sorted(order[n_test:])]
    root = imaging_manifest(cfg).parent
    size = cfg.data.imaging.image_size
    return ImagingSite(site, _tensors(train, root, size), _tensors(test, root, size), [r.id for r in mine])
