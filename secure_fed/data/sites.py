"""Which sites a run's data has, and the cohort behind them: read from the configuration and the
data alone, so that the server (waiting for its nodes) needs no client code to know them."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

from secure_fed.config import RunConfig
from secure_fed.data.cache import made_once
from secure_fed.data.cohort import Cohort, load_cohort
from secure_fed.data.multimodal import imaging_split
from secure_fed.data.synthetic import TAGGED_WHEN_ON, Knobs, synthesize


def cohort_manifest(cfg: RunConfig) -> Path:
    """The manifest to load; a synthetic cohort is generated once per setting and cached."""
    if cfg.data.source != "synthetic":
        assert cfg.data.path is not None
        return Path(cfg.data.path)
    s = cfg.data.synth
    # every generator knob, named once (by Knobs): a new one reaches the key and the call unasked
    knobs = {f.name: getattr(s, f.name) for f in dataclasses.fields(Knobs)}
    tags = "".join(
        f"-{name}{value:g}" for name, value in knobs.items() if value or name not in TAGGED_WHEN_ON
    )
    # unequal sites: every site's count in the name (a cohort of other sizes is another cohort)
    sizes = f"p{s.patients}" if s.site_patients is None else "p" + "_".join(map(str, s.site_patients))
    folder = (
        Path(cfg.model.cache_dir)
        / f"cohort-s{s.sites}-{sizes}-v{s.visits}-i{s.image_size}-seed{s.seed}-g2{tags}"
    )
    return made_once(
        folder,
        lambda tmp: synthesize(
            tmp,
            sites=s.sites,
            patients=s.patients,
            visits=s.visits,
            seed=s.seed,
            image_size=s.image_size,
            site_patients=s.site_patients,
            **knobs,
        ),
    )


@functools.lru_cache(maxsize=2)
def cached_cohort(
    manifest: Path, image_size: int, deal_sites: int | None = None, seed: int = 0, views: int = 1
) -> Cohort:
    """Every image of the cohort is read once per process, not once per site (read-only use)."""
    return load_cohort(manifest, image_size, deal_sites, seed, views)


def split_seed(cfg: RunConfig) -> int:
    """Which patients a site trains, validates and tests on (and, dealt, which site each is at)."""
    return cfg.seed if cfg.data.split_seed is None else cfg.data.split_seed


def site_cohort(cfg: RunConfig) -> Cohort:
    """The run's report cohort, dealt to its sites when ``data.deal_sites`` says so."""
    d = cfg.data
    return cached_cohort(cohort_manifest(cfg), d.synth.image_size, d.deal_sites, split_seed(cfg), d.views)


def site_names(cfg: RunConfig) -> list[str]:
    if cfg.data.kind == "imaging":
        return sorted(imaging_split(cfg)[1].sites)
    if cfg.data.source == "synthetic":
        return [f"site{k}" for k in range(cfg.data.synth.sites)]
    return sorted(site_cohort(cfg).sites)
