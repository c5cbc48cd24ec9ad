"""Two-view studies (IU-Xray's frontal and lateral): loaded, laid out per view, encoded by one
encoder whose tokens the decoder reads together; a one-image study repeats its image."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from secure_fed.data.batching import make_examples
from secure_fed.data.cohort import load_cohort
from secure_fed.data.realistic import write_realistic
from secure_fed.data.tokenizer import WordCharTokenizer


@pytest.fixture(scope="module")
def annotation(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_realistic(tmp_path_factory.mktemp("views"), studies=12, seed=3)


def _studies(annotation: Path) -> dict[str, int]:
    entries = [e for split in json.loads(annotation.read_text()).values() for e in split]
    return {e["id"]: len(e["image_path"]) for e in entries}


def test_the_second_view_is_loaded_only_when_asked_for(annotation: Path) -> None:
    counts = _studies(annotation)
    assert set(counts.values()) == {1, 2}  # the generated set mixes one- and two-view studies
    one = {v.patient_id: v for v in load_cohort(annotation, 32).visits}
    two = {v.patient_id: v for v in load_cohort(annotation, 32, views=2).visits}
    for study, n in counts.items():
        assert one[study].extra_views == ()
        assert len(two[study].extra_views) == n - 1
        np.testing.assert_array_equal(one[study].image, two[study].image)  # the first view is unchanged
    double = next(s for s, n in counts.items() if n == 2)
    assert not np.array_equal(two[double].image, two[double].extra_views[0])


def test_examples_hold_current_and_prior_per_view(annotation: Path) -> None:
    visits = load_cohort(annotation, 32, views=2).visits
    tok = WordCharTokenizer()
    single = make_examples(visits, tok, b"k", 64, 1)
    double = make_examples(visits, tok, b"k", 64, 1, views=2)
    assert single.images.shape[1] == 2 and double.images.shape[1] == 4
    torch.testing.assert_close(double.images[:, :2], single.images)  # view 1 exactly as before
    counts = _studies(annotation)
    for row, patient in enumerate(double.patient_ids):
        lateral, frontal = double.images[row, 2], double.images[row, 0]
        # a one-image study repeats its image; a two-image one carries its own second view
        assert torch.equal(lateral, frontal) == (counts[patient] == 1)
        assert not double.images[row, [1, 3]].any()  # one visit per patient: no prior study


def test_a_prior_study_brings_its_same_view() -> None:
    from secure_fed.data.cohort import Visit

    def visit(index: int, fill: float) -> Visit:
        front, side = np.full((4, 4), fill, np.float32), np.full((4, 4), fill + 0.5, np.float32)
        return Visit("p", index, None, front, "no effusion.", 50.0, "F", "s", extra_views=(side,))

    examples = make_examples([visit(1, 0.1), visit(2, 0.2)], WordCharTokenizer(), b"k", 16, 2, views=2)
    second = examples.images[1]
    assert [float(second[c, 0, 0]) for c in range(4)] == pytest.approx([0.2, 0.1, 0.7, 0.6])


def test_the_model_reads_every_views_tokens() -> None:
    from secure_fed.config import ModelConfig
    from secure_fed.model.build import build_base

    model = build_base(ModelConfig(), vocab_size=40, pad_id=0, bos_id=1, eos_id=2, image_size=32).eval()
    images = torch.rand(2, 4, 32, 32)
    with torch.no_grad():
        one, both = model.visual_tokens(images[:, :2]), model.visual_tokens(images)
        torch.testing.assert_close(both[:, : one.shape[1]], one)  # view 1's tokens, then view 2's
        assert both.shape[1] == 2 * one.shape[1]
        ids = torch.ones(2, 5, dtype=torch.long)
        changed = images.clone()
        changed[:, 2:] = torch.rand(2, 2, 32, 32)
        profiles = torch.zeros(2, 1)
        assert not torch.allclose(model(images, ids, profiles), model(changed, ids, profiles))
