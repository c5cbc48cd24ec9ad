"""FM2's privacy unit is the patient, not the image.

The finding: imaging records had no patient field, so FM2's DP-SGD sampled and clipped each image
on its own while the ledger and report said "per patient": a patient with k images moved the
released sum by up to k·C, and the accountant's ε was per image. Its DMoE upload weights under DP
were whether the site held any image of each modality, which one patient can flip.

Now records carry `patient_id` (the synthetic benchmark has patients with several images), DP
steps Poisson-sample patients and clip each patient's images jointly, a DP run on records without
patient ids is refused, and the DMoE weights under DP are 1 for every modality.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from secure_fed.algorithms.fm2.learner import ImagingLearner
from secure_fed.config import RunConfig, load_config
from secure_fed.data.manifest import DataValidationError
from secure_fed.data.multimodal import MODALITIES, imaging_manifest, load_imaging_manifest
from secure_fed.dp.keystream import NoiseStream
from secure_fed.launch.runner import preflight
from secure_fed.site.private import DPGradients


def _config(cache_dir: Path, out: Path, **overrides: Any) -> RunConfig:
    base = {
        "fed.method": "fedavg",
        "data.kind": "imaging",
        "fed.rounds": 1,
        "fed.engine": "inprocess",
        "data.imaging.per_class": 8,
        "data.imaging.sites": 3,
        "train.threads": 1,
        "model.cache_dir": str(cache_dir),
        "out": str(out),
        "dp.enabled": True,
        "dp.target_epsilon": 4.0,
        "dp.sample_rate": 0.5,  # two DP steps per stage: enough to see the units, and fast
        "train.local_epochs": 1,
    }
    return load_config(None, {**base, **overrides})


class Recording(DPGradients):
    """The site's DPGradients at σ = 0, recording which rows each step trained and their units."""

    def __init__(self, n_patients: int) -> None:
        noise = NoiseStream(hashlib.sha256(b"fm2 patient unit").digest())
        super().__init__(0.5, 1.0, 0.0, n_patients, steps=4, noise=noise)
        self.units: list[torch.Tensor] = []

    def backward(
        self,
        copies: list[torch.nn.Module],
        losses: list[torch.Tensor],
        patient_index: list[torch.Tensor],
        last_pass: bool = True,
    ) -> None:
        assert last_pass  # a few patients a step: one pass
        self.units.append(patient_index[0].clone())
        super().backward(copies, losses, patient_index, last_pass)


def test_the_synthetic_benchmark_has_patients_with_several_images(cache_dir: Path, tmp_path: Path) -> None:
    records = load_imaging_manifest(imaging_manifest(_config(cache_dir, tmp_path)))
    assert all(r.patient_id for r in records)
    sizes = Counter(r.patient_id for r in records)
    assert max(sizes.values()) > 1 and min(sizes.values()) >= 1


@pytest.mark.parametrize("method", ["fedavg", "fm2"])
def test_a_dp_step_takes_all_of_a_sampled_patient_s_images_as_one_unit(
    cache_dir: Path, tmp_path: Path, method: str
) -> None:
    cfg = _config(cache_dir, tmp_path, **{"fed.method": method})
    learner = ImagingLearner.create(cfg, "site0")
    train = learner.data.train
    assert learner.n_train == train.n_patients < len(train)  # DP's n counts patients
    made: list[Recording] = []

    def gradients() -> Recording:
        made.append(Recording(learner.n_train))
        return made[-1]

    params = dict(learner.model.named_parameters())
    start = torch.nn.utils.parameters_to_vector([params[n] for n in learner.names]).detach().double()
    learner.local_update(1, method, start.numpy(), gradients)
    steps = [units for grads in made for units in grads.units]
    assert steps
    for units in steps:
        # the rule sees each row's patient: a multi-image patient in a step is one unit with all
        # of its images (so one patient is clipped to C once, not once per image)
        sampled = set(units.tolist())
        for p in sampled:
            assert int((units == p).sum()) == int((train.patient == p).sum())
    assert any(len(units) > len(set(units.tolist())) for units in steps)


def test_dp_refuses_imaging_records_without_patient_ids(cache_dir: Path, tmp_path: Path) -> None:
    source = imaging_manifest(_config(cache_dir, tmp_path))
    folder = tmp_path / "no-ids"
    folder.mkdir()
    (folder / "images").symlink_to(source.parent / "images")
    lines = []
    for i, line in enumerate(source.read_text().splitlines()):
        record = json.loads(line)
        record.pop("patient_id", None)
        record["site"] = f"site{i % 2}"
        lines.append(json.dumps(record))
    (folder / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    cfg = _config(cache_dir, tmp_path, **{"data.imaging.path": str(folder / "manifest.jsonl")})
    with pytest.raises(ValueError, match="patient_id"):
        ImagingLearner.create(cfg, "site0")
    # and before anything of the run exists: one line naming the file and the field
    with pytest.raises(DataValidationError) as refused:
        preflight(cfg)
    assert (
        len(refused.value.problems) == 1
        and "manifest.jsonl: patient_id: missing on" in refused.value.problems[0]
    )
    # without DP the same records still run, each image its own unit
    plain = _config(
        cache_dir, tmp_path, **{"data.imaging.path": str(folder / "manifest.jsonl"), "dp.enabled": False}
    )
    learner = ImagingLearner.create(plain, "site0")
    assert learner.n_train == len(learner.data.train)


def test_fm2_dmoe_weights_under_dp_depend_on_no_patient(cache_dir: Path, tmp_path: Path) -> None:
    """Disjoint split: each site holds only some modalities; its DP upload's expert weights are
    still 1 for every modality (public), not whether it holds an image of each."""
    cfg = _config(cache_dir, tmp_path, **{"fed.method": "fm2", "data.imaging.split": "disjoint"})
    learner = ImagingLearner.create(cfg, "site0")
    assert len(set(learner.data.train.modality.tolist())) < len(MODALITIES)
    start = {n: p.detach().clone() for n, p in learner.model.named_parameters()}
    upload = learner._upload(start, private=True)
    weights = upload[-len(MODALITIES) :]
    assert np.all(weights == weights[0]) and weights[0] > 0
