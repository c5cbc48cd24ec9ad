"""Gaussian mechanism on the (age-bin × sex) demographic histogram, and sampling from its output.

Each patient is counted in exactly one cell, so adding or removing one patient changes the count
vector by one unit vector: L2 sensitivity 1, and noise std = σ. The bin edges are public and
fixed in advance (data-independent); sampling from the noisy histogram is post-processing.

The noise comes from a `NoiseStream` (fresh key per release), so a site that restarts cannot redraw
the same histogram: `persisted_gaussian_histogram` keeps the noisy counts in the site's private
folder and hands them back instead of releasing a second, differently noised histogram.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from secure_fed.dp.events import Gaussian
from secure_fed.dp.keystream import NoiseStream
from secure_fed.dp.private_files import atomic_write_bytes

SEXES: tuple[str, ...] = ("M", "F", "U")


@dataclass(frozen=True)
class HistogramBins:
    """Public cells: age bins [edges[i], edges[i+1]) (ages outside are clamped into the end bins),
    plus one "unknown age" bin, crossed with the sexes."""

    age_edges: tuple[float, ...] = (0.0, 20.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 120.0)
    sexes: tuple[str, ...] = SEXES

    def __post_init__(self) -> None:
        edges = tuple(float(edge) for edge in self.age_edges)
        if len(edges) < 2 or any(b <= a for a, b in zip(edges, edges[1:], strict=False)):
            raise ValueError(
                f"age_edges must be at least two strictly increasing numbers, got {self.age_edges}"
            )
        if len(set(self.sexes)) != len(self.sexes) or not self.sexes:
            raise ValueError(f"sexes must be distinct and non-empty, got {self.sexes}")
        object.__setattr__(self, "age_edges", edges)
        object.__setattr__(self, "sexes", tuple(self.sexes))

    @property
    def n_age_bins(self) -> int:
        return len(self.age_edges)  # len(edges) - 1 finite bins + 1 unknown-age bin

    @property
    def n_cells(self) -> int:
        return self.n_age_bins * len(self.sexes)

    def cell_of(self, age: float | None, sex: str) -> int:
        """Cell index: age-bin major, sex minor; the last age bin is "unknown age"."""
        if sex not in self.sexes:
            raise ValueError(f"sex {sex!r} is not one of the histogram's sexes {self.sexes}")
        if age is None or (isinstance(age, float) and math.isnan(age)):
            age_bin = self.n_age_bins - 1
        else:
            inner = np.asarray(self.age_edges[1:-1])
            age_bin = int(np.searchsorted(inner, float(age), side="right"))
        return age_bin * len(self.sexes) + self.sexes.index(sex)

    def cells_of(self, ages: Sequence[float | None], sexes: Sequence[str]) -> np.ndarray:
        """One cell per patient (pass each patient once, e.g. their age at the first visit)."""
        if len(ages) != len(sexes):
            raise ValueError(f"{len(ages)} ages but {len(sexes)} sexes")
        return np.asarray(
            [self.cell_of(age, sex) for age, sex in zip(ages, sexes, strict=True)], dtype=np.int64
        )


def histogram_counts(cells: np.ndarray, n_cells: int) -> np.ndarray:
    cells = np.asarray(cells)
    if cells.ndim != 1 or (cells.size and (cells.min() < 0 or cells.max() >= n_cells)):
        raise ValueError(f"cells must be a 1-d array of indices in [0, {n_cells})")
    return np.bincount(cells.astype(np.int64), minlength=n_cells).astype(np.float64)


class Sampler(Protocol):
    """What sampling from a noisy histogram needs: numpy's Generator or a `NoiseStream`."""

    def choice(self, a: Any, size: Any = ..., replace: bool = ..., p: Any = ...) -> Any: ...

    def uniform(self, low: Any = ..., high: Any = ..., size: Any = ...) -> Any: ...


def _check_noise_source(noise: object) -> NoiseStream:
    if not isinstance(noise, NoiseStream):
        # a seeded statistical generator is predictable from its seed: no DP noise may come from one
        raise TypeError(f"DP noise must come from a NoiseStream (keystream), got {type(noise).__name__}")
    return noise


def gaussian_histogram(cells: np.ndarray, n_cells: int, sigma: float, noise: NoiseStream) -> np.ndarray:
    """Noisy counts: histogram of one cell per patient + N(0, σ²) per cell (sensitivity 1)."""
    if not sigma >= 0:
        raise ValueError(f"sigma must be >= 0, got {sigma}")
    _check_noise_source(noise)
    counts = histogram_counts(cells, n_cells)
    return counts + noise.normal(0.0, sigma, size=n_cells)


HISTOGRAM_FORMAT = "secure_fed.noisy_histogram/1"


def persisted_gaussian_histogram(
    cells: np.ndarray, n_cells: int, sigma: float, noise: NoiseStream, path: Path
) -> tuple[np.ndarray, bool]:
    """(noisy counts, fresh): the histogram released before if `path` holds one, else a new
    `gaussian_histogram` release, written atomically to `path` before it is returned.

    Only the noisy counts are kept (they are the DP output), never the noise or the stream key:
    the file reveals nothing a release does not. `fresh` is False when the counts were read back,
    so the caller charges the ledger once. A stored histogram of another shape or σ is refused:
    it belongs to another configuration, and reusing or replacing it would both be wrong.
    """
    path = Path(path)
    if path.exists():
        try:
            stored = json.loads(path.read_text())
            if stored.get("format") != HISTOGRAM_FORMAT:
                raise ValueError(f"format is not {HISTOGRAM_FORMAT!r}")
            counts = np.asarray(stored["counts"], dtype=np.float64)
            stored_sigma = float(stored["sigma"])
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise ValueError(f"{path} is not a noisy histogram this site wrote ({error})") from None
        if counts.shape != (n_cells,) or stored_sigma != float(sigma):
            raise ValueError(
                f"{path} holds a noisy histogram with {counts.size} cells and sigma {stored_sigma}, "
                f"but this run asks for {n_cells} cells and sigma {float(sigma)}: it was released under "
                "another configuration. Resume with that configuration, or start a new run folder."
            )
        return counts, False
    noisy = gaussian_histogram(cells, n_cells, sigma, noise)
    record = {"format": HISTOGRAM_FORMAT, "sigma": float(sigma), "counts": noisy.tolist()}
    atomic_write_bytes(path, json.dumps(record).encode(), 0o600)
    return noisy, True


def histogram_event(sigma: float) -> Gaussian:
    """The ledger event for one `gaussian_histogram` release."""
    return Gaussian(noise_multiplier=sigma, count=1)


def sample_from_histogram(
    noisy_counts: np.ndarray, bins: HistogramBins, n: int, rng: Sampler
) -> tuple[np.ndarray, np.ndarray]:
    """n synthetic (age, sex) profiles: a cell with probability ∝ max(count, 0), an age uniform in
    its bin (NaN for the unknown-age bin). If noise left no positive cell, cells are uniform,
    which is still data-independent. Post-processing: `rng` may be a seeded generator."""
    counts = np.clip(np.asarray(noisy_counts, dtype=np.float64), 0.0, None)
    if counts.shape != (bins.n_cells,):
        raise ValueError(f"noisy_counts must have shape ({bins.n_cells},), got {counts.shape}")
    total = counts.sum()
    probabilities = counts / total if total > 0 else np.full(bins.n_cells, 1.0 / bins.n_cells)
    cells = rng.choice(bins.n_cells, size=n, p=probabilities)
    age_bins, sex_index = np.divmod(cells, len(bins.sexes))
    edges = np.asarray(bins.age_edges)
    known = age_bins < bins.n_age_bins - 1
    ages = np.full(n, np.nan)
    low, high = edges[age_bins[known]], edges[age_bins[known] + 1]
    ages[known] = rng.uniform(low, high)
    sexes = np.asarray(bins.sexes, dtype=object)[sex_index]
    return ages, sexes
