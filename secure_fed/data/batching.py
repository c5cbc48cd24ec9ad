"""Turn a site's visits into model-ready tensors.

Each example pairs the current image with the patient's previous image (zeros at a first visit),
so the decoder can write the comparison-to-prior sentence. Patients are given dense slots so the
DP code can group a patient's rows across the per-visit-index copies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from secure_fed.data.profile import profile_vector


class _Tokenizer(Protocol):
    pad_id: int
    bos_id: int
    eos_id: int

    def encode(self, text: str, max_len: int | None = None) -> list[int]: ...


@dataclass
class Examples:
    images: torch.Tensor  # (N, 2V, H, W): current, prior for each of V views
    input_ids: torch.Tensor  # (N, L): bos, report, eos, pad
    raw_profiles: np.ndarray  # (N, 3) v_p
    patient_slot: torch.Tensor  # (N,) dense patient index
    visit_index: torch.Tensor  # (N,) 1-based
    patient_ids: list[str]
    reports: list[str]
    labels: list[dict[str, Any] | None]
    profiles: torch.Tensor | None = None  # (N, K) q_p once a GMM is fitted

    def __len__(self) -> int:
        return len(self.reports)

    def subset(self, rows: np.ndarray | torch.Tensor | Sequence[int]) -> Examples:
        idx = torch.as_tensor(np.asarray(rows, dtype=np.int64))
        return Examples(
            images=self.images[idx],
            input_ids=self.input_ids[idx],
            raw_profiles=self.raw_profiles[idx.numpy()],
            patient_slot=self.patient_slot[idx],
            visit_index=self.visit_index[idx],
            patient_ids=[self.patient_ids[i] for i in idx.tolist()],
            reports=[self.reports[i] for i in idx.tolist()],
            labels=[self.labels[i] for i in idx.tolist()],
            profiles=None if self.profiles is None else self.profiles[idx],
        )

    def at_visit(self, t: int) -> Examples:
        return self.subset(torch.nonzero(self.visit_index == t).flatten())


def encode_reports(reports: Sequence[str], tokenizer: _Tokenizer, max_tokens: int) -> torch.Tensor:
    ids = torch.full((len(reports), max_tokens + 2), tokenizer.pad_id, dtype=torch.long)
    for i, text in enumerate(reports):
        body = tokenizer.encode(text)[:max_tokens]
        row = [tokenizer.bos_id, *body, tokenizer.eos_id]
        ids[i, : len(row)] = torch.tensor(row)
    return ids


def _views(visit: Any, views: int) -> list[np.ndarray]:
    """A study's first `views` images; a study with fewer repeats its first (R2Gen's convention for
    single-image studies), so every example has the same shape."""
    have = [visit.image, *getattr(visit, "extra_views", ())]
    return [have[k] if k < len(have) else have[0] for k in range(views)]


def make_examples(
    visits: Sequence[Any],
    tokenizer: _Tokenizer,
    site_key: bytes,
    max_tokens: int,
    max_visits: int,
    views: int = 1,
) -> Examples:
    """`visits`: objects with patient_id, visit_index, image (H, W), report, age, sex, labels, and
    optionally extra_views (more images of the study, same size)."""
    kept = sorted(
        (v for v in visits if v.visit_index <= max_visits), key=lambda v: (v.patient_id, v.visit_index)
    )
    if not kept:
        raise ValueError("no visits to encode")
    h, w = np.asarray(kept[0].image).shape[-2:]
    images = np.zeros((len(kept), 2 * views, h, w), dtype=np.float32)
    slots: dict[str, int] = {}
    prev: dict[str, list[np.ndarray]] = {}
    for i, v in enumerate(kept):
        current = _views(v, views)
        for k, image in enumerate(current):
            images[i, 2 * k] = image
            if v.patient_id in prev:  # the prior study's same view
                images[i, 2 * k + 1] = prev[v.patient_id][k]
        prev[v.patient_id] = current
        slots.setdefault(v.patient_id, len(slots))
    return Examples(
        images=torch.from_numpy(images),
        input_ids=encode_reports([v.report for v in kept], tokenizer, max_tokens),
        raw_profiles=np.stack([profile_vector(v.patient_id, v.age, v.sex, site_key) for v in kept]),
        patient_slot=torch.tensor([slots[v.patient_id] for v in kept]),
        visit_index=torch.tensor([v.visit_index for v in kept]),
        patient_ids=[v.patient_id for v in kept],
        reports=[v.report for v in kept],
        labels=[getattr(v, "labels", None) for v in kept],
    )
