"""FM2's synthetic multi-modality benchmark: modalities that look different, reproducible
Dirichlet label skew that matches φ, disjoint-modality splits, and manifest errors by file:line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from secure_fed.data.manifest import DataValidationError
from secure_fed.data.multimodal import (
    MODALITIES,
    MODALITY_CLASSES,
    ImagingRecord,
    load_imaging_manifest,
    split_disjoint,
    split_overlapped,
    synthesize_multimodal,
)


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[ImagingRecord]]:
    manifest = synthesize_multimodal(tmp_path_factory.mktemp("mm"), per_class=6, image_size=32, seed=3)
    return manifest, load_imaging_manifest(manifest)


def _pixels(manifest: Path, record: ImagingRecord) -> np.ndarray:
    return np.asarray(Image.open(manifest.parent / record.image), dtype=float).ravel() / 255


def test_every_modality_shows_its_own_classes_with_captions(bench) -> None:
    _, records = bench
    seen = {(r.modality, r.label) for r in records}
    assert seen == {(m, c) for m, cs in MODALITY_CLASSES.items() for c in cs}
    assert all(r.caption.endswith(".") and len(r.caption.split()) >= 4 for r in records)
    # the caption names the finding in words, never the raw class id of another class
    assert all(
        "fracture" in r.caption or "cortical break" in r.caption for r in records if r.label == "fracture"
    )


def test_the_modalities_look_different(bench) -> None:
    """Held-out images are told apart by modality from raw pixels with a nearest-centroid rule."""
    manifest, records = bench
    train = [r for r in records if int(r.id.rsplit("-", 1)[1]) < 3]
    test = [r for r in records if int(r.id.rsplit("-", 1)[1]) >= 3]
    centroids = {
        m: np.mean([_pixels(manifest, r) for r in train if r.modality == m], axis=0) for m in MODALITIES
    }
    guesses = [
        min(centroids, key=lambda m: np.linalg.norm(_pixels(manifest, r) - centroids[m])) for r in test
    ]
    accuracy = np.mean([g == r.modality for g, r in zip(guesses, test, strict=True)])
    assert accuracy > 0.95


def test_the_same_seed_gives_the_same_benchmark(tmp_path: Path) -> None:
    a = synthesize_multimodal(tmp_path / "a", per_class=2, modalities=["ct"], seed=1).read_text()
    b = synthesize_multimodal(tmp_path / "b", per_class=2, modalities=["ct"], seed=1).read_text()
    assert a == b
    assert (tmp_path / "a" / "images" / "ct" / "mass_0001.png").read_bytes() == (
        tmp_path / "b" / "images" / "ct" / "mass_0001.png"
    ).read_bytes()


def _labels(classes: int, per_class: int) -> list[ImagingRecord]:
    return [
        ImagingRecord(id=f"{c}-{k}", image="x.png", modality="ct", label=f"c{c}")
        for c in range(classes)
        for k in range(per_class)
    ]


@pytest.mark.parametrize("phi", [0.1, 0.3, 100.0])
def test_dirichlet_split_matches_phi(phi: float) -> None:
    """Per class, each site's share has variance (1/K)(1 − 1/K)/(Kφ + 1) under Dirichlet(φ·1_K)."""
    k, classes, per_class = 4, 300, 400
    records = _labels(classes, per_class)
    split = split_overlapped(records, k, phi, seed=7)
    shares = np.zeros((classes, k))
    for s, site in enumerate(split.sites):
        for i in split.sites[site]:
            shares[int(records[i].label[1:]), s] += 1 / per_class
    expected = (1 / k) * (1 - 1 / k) / (k * phi + 1)
    rounding = 1 / (12 * per_class**2)  # the deal rounds each share to whole records
    assert shares.var(axis=0).mean() == pytest.approx(expected + rounding, rel=0.15)
    assert sorted(i for ix in split.sites.values() for i in ix) == list(range(len(records)))


def test_dirichlet_split_is_reproducible_and_seeded() -> None:
    records = _labels(20, 30)
    assert split_overlapped(records, 3, 0.3, seed=1) == split_overlapped(records, 3, 0.3, seed=1)
    assert split_overlapped(records, 3, 0.3, seed=1) != split_overlapped(records, 3, 0.3, seed=2)


def test_disjoint_split_gives_each_modality_to_one_site(bench) -> None:
    _, records = bench
    split = split_disjoint(records, 3)
    owners = {
        m: {site for site, ix in split.sites.items() if any(records[i].modality == m for i in ix)}
        for m in MODALITIES
    }
    assert all(len(o) == 1 for o in owners.values())
    assert all(split.sites[s] for s in split.sites)
    with pytest.raises(ValueError, match="cannot each hold their own"):
        split_disjoint(records, 6)


def test_manifest_problems_are_reported_together_by_line(tmp_path: Path) -> None:
    (tmp_path / "a.png").write_bytes(b"")
    good = {"id": "a", "image": "a.png", "modality": "ct", "label": "mass"}
    lines = [
        json.dumps(good),
        json.dumps({**good, "id": "b", "modality": "pet"}),
        json.dumps({**good, "id": "c", "image": "missing.png"}),
        json.dumps(good),
        "{not json",
        json.dumps({**good, "id": "d", "scanner": "x"}),
    ]
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataValidationError) as err:
        load_imaging_manifest(manifest)
    problems = err.value.problems
    assert [p.split(": ")[0] for p in problems] == [f"{manifest}:{n}" for n in (2, 3, 4, 5, 6)]
    assert "modality" in problems[0] and "image" in problems[1] and "already on line 1" in problems[2]
    assert "not JSON" in problems[3] and "scanner: unknown field" in problems[4]
