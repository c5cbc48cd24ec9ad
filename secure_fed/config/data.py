"""The data a run reads: a synthetic cohort, a reports manifest, or the imaging benchmark."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from secure_fed.config.base import _Strict


class SynthConfig(_Strict):
    sites: int = Field(3, ge=1, le=64)
    patients: int = Field(60, ge=2, description="patients per site")
    site_patients: list[int] | None = Field(
        None,
        description="patients of each site, site0 first (one number per site): unequal sites, as a "
        "network of one academic and several community hospitals; None = `patients` at every site",
    )
    visits: int = Field(5, ge=1, le=16, description="maximum visits per patient (T)")
    image_size: int = Field(32, ge=16, le=256)
    seed: int = 0
    temporal_drift: float = Field(
        1.0,
        ge=0.0,
        le=1.0,
        description="chance a visit from the third on follows the follow-up protocol (0 = off)",
    )
    demographic_effect: float = Field(
        1.0, ge=0.0, le=1.0, description="chance of each age/sex-dependent report sentence (0 = off)"
    )
    site_wording: float = Field(
        1.0,
        ge=0.0,
        le=1.0,
        description="chance a report uses its site's own synonyms, else the standard terms "
        "(0 = one shared vocabulary)",
    )
    scanner_shift: float = Field(
        1.0, ge=0.0, le=1.0, description="how far each site's scanner look is from site 0's (0 = all alike)"
    )
    age_mix_shift: float = Field(
        1.0, ge=0.0, le=1.0, description="how far each site's mean age is from 58 (0 = all alike)"
    )
    institution_drift: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="pace of each site's year-by-year report drift: in exam year y a report convention's "
        "chance moves towards the site's own target by this x the site's pace (0.5-1) x (y - 2018) / 6, "
        "each site in its own direction (0 = off, today's generator)",
    )
    institution_clusters: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="chance a report keeps each of its site's house conventions (sentence order, "
        "pertinent negatives), so that sites' reports form separate clusters (0 = off, today's generator)",
    )

    @model_validator(mode="after")
    def _one_size_per_site(self) -> SynthConfig:
        sizes = self.site_patients
        if sizes is not None:
            if len(sizes) != self.sites:
                raise ValueError(
                    f"site_patients has {len(sizes)} size(s) for {self.sites} site(s); give one per site"
                )
            if min(sizes) < 2:
                raise ValueError("site_patients: every site needs at least 2 patients")
        return self

    def patients_at(self, site: int) -> int:
        """Patients of site ``site`` (its entry in ``site_patients``, else ``patients``)."""
        return self.patients if self.site_patients is None else self.site_patients[site]


class ImagingConfig(_Strict):
    """The multi-modality imaging benchmark FM2 and its baselines run on (data.kind = "imaging")."""

    path: Path | None = Field(
        None, description="a multi-modality manifest.jsonl with a site per record; None = synthetic"
    )
    sites: int = Field(4, ge=1, le=64, description="synthetic: sites the images are dealt to")
    per_class: int = Field(40, ge=4, description="synthetic: images per (modality, class)")
    image_size: int = Field(32, ge=16, le=128)
    split: Literal["overlapped", "disjoint"] = Field(
        "overlapped",
        description="synthetic: every site every modality with Dirichlet(phi) label skew, or each "
        "site its own modalities",
    )
    phi: float = Field(0.3, gt=0, description="Dirichlet concentration of the overlapped split")
    test_fraction: float = Field(0.25, gt=0.0, lt=0.5, description="each site's held-out images")


class DataConfig(_Strict):
    kind: Literal["reports", "imaging"] = Field(
        "reports",
        description="longitudinal reports (FedTAR and its baselines) or multi-modality images (FM2)",
    )
    imaging: ImagingConfig = ImagingConfig()
    source: Literal["synthetic", "manifest", "annotation"] = "synthetic"
    path: Path | None = Field(None, description="manifest.jsonl or annotation.json when not synthetic")
    synth: SynthConfig = SynthConfig()
    val_fraction: float = Field(0.2, gt=0.0, lt=0.5, description="patients held out for α")
    test_fraction: float = Field(0.2, gt=0.0, lt=0.5)
    max_visits: int = Field(5, ge=1, le=16, description="T: visit indices beyond this are dropped")
    max_report_tokens: int = Field(56, ge=8, le=512)  # the knobs add up to 2 sentences: 48 words max
    views: Literal[1, 2] = Field(
        1,
        description="images per study the model reads: 2 = a study's first two images (IU-Xray: "
        "frontal and lateral) through the same encoder, a one-image study repeating its image",
    )
    deal_sites: int | None = Field(
        None,
        ge=1,
        le=64,
        description="deal a single-source data set's patients (IU-Xray) at random to this many sites "
        "site0..; None = each record's own site",
    )
    split_seed: int | None = Field(
        None,
        ge=0,
        description="seed of each site's train/validation/test split (and of deal_sites); None: the "
        "run's seed. Set, a sweep holds the data (this split, data.synth.seed's cohort) fixed, and "
        "its seeds vary only the training (adapter init, batch order): the training noise alone",
    )
    tokenizer: Literal["public", "words+chars", "bytes"] = Field(
        "public",
        description="built-in tokenizer when model.tokenizer_path is unset: the generator's words, "
        "a public word list with a character fallback (real reports), or UTF-8 bytes",
    )

    @model_validator(mode="after")
    def _needs_path(self) -> DataConfig:
        if self.source != "synthetic" and self.path is None:
            raise ValueError(f"data.path is required when data.source = {self.source!r}")
        return self
