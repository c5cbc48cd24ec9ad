"""A site's local world: its patients split train / validation / test, encoded for the model,
and each visit's patient profile q_p (from the site's own profile model). Nothing here leaves the
site."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from secure_fed.config import RunConfig
from secure_fed.data.batching import Examples, make_examples
from secure_fed.data.cohort import Visit, split_patients
from secure_fed.data.sites import site_cohort, split_seed
from secure_fed.data.tokenizer import load_tokenizer
from secure_fed.dp.private_files import load_or_create_secret


class ProfileModel(Protocol):
    """What turns raw profiles v_p into the model's q_p (FedTAR: the site's patient GMM)."""

    def responsibilities(self, profiles: np.ndarray) -> np.ndarray: ...


@dataclass
class SiteData:
    name: str
    train: Examples
    val: Examples
    test: Examples
    site_key: bytes

    @property
    def n_train_patients(self) -> int:
        return len(set(self.train.patient_ids))

    @property
    def n_val_patients(self) -> int:
        return len(set(self.val.patient_ids))


def simulation_site_key(seed: int, site: str) -> bytes:
    """Stand-in for the site's secret HMAC key in simulation; a deployed site reads its own."""
    return hashlib.sha256(f"secure-fed-simulation-site-key:{seed}:{site}".encode()).digest()


def deployment_site_key(cfg: RunConfig, site: str) -> bytes:
    """A deployed site's secret HMAC key for patient ids: random, made once, kept in its private
    folder. The simulation key above is derivable from the seed and the site's name, so anyone could
    turn a hashed id back into a record number by trying them."""
    return load_or_create_secret(
        Path(cfg.out) / "sites" / site / "patient-id.key",
        "patient-id HMAC key",
        "a new key changes every patient's profile, so the site's GMM is refitted",
    )


def encode_split(visits: list[Visit], cfg: RunConfig, tokenizer: object, site_key: bytes) -> Examples:
    d = cfg.data
    return make_examples(visits, tokenizer, site_key, d.max_report_tokens, d.max_visits, d.views)


def load_site(cfg: RunConfig, site: str, site_key: bytes | None = None) -> SiteData:
    cohort = site_cohort(cfg)
    if site not in cohort.sites:
        raise ValueError(f"site {site!r} not in the cohort (sites: {', '.join(sorted(cohort.sites))})")
    key = site_key or simulation_site_key(cfg.seed, site)
    tokenizer = load_tokenizer(cfg.model.tokenizer_path, cfg.data.tokenizer)
    train, val, test = split_patients(
        cohort.sites[site], cfg.data.val_fraction, cfg.data.test_fraction, split_seed(cfg)
    )
    return SiteData(
        name=site,
        train=encode_split(train, cfg, tokenizer, key),
        val=encode_split(val, cfg, tokenizer, key),
        test=encode_split(test, cfg, tokenizer, key),
        site_key=key,
    )


def patient_profiles(examples: Examples) -> np.ndarray:
    """One v_p per patient (the GMM models patients, not visits)."""
    first: dict[str, int] = {}
    for row, pid in enumerate(examples.patient_ids):
        first.setdefault(pid, row)
    return examples.raw_profiles[list(first.values())]


def attach_profiles(data: SiteData, gmm: ProfileModel, visit_slots: int = 0) -> None:
    """q_p on every row; with `visit_slots` (model.visit_input) the row's visit index one-hot after
    it, the last slot standing for any later visit."""
    for split in (data.train, data.val, data.test):
        q = torch.from_numpy(gmm.responsibilities(split.raw_profiles))
        split.profiles = with_visit(q, split.visit_index, visit_slots)


def with_visit(q: torch.Tensor, visit_index: torch.Tensor, visit_slots: int) -> torch.Tensor:
    """q with each row's visit index one-hot after it (nothing added when `visit_slots` is 0)."""
    if not visit_slots:
        return q
    slot = visit_index.clamp(1, visit_slots) - 1
    return torch.cat([q, torch.nn.functional.one_hot(slot, visit_slots).to(q.dtype)], dim=1)
