"""Real-looking data: the example generator, image loading of any size/mode, real-text tokenizers."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from secure_fed.data.cohort import load_cohort, load_image
from secure_fed.data.lexicon import words
from secure_fed.data.manifest import load_annotation, load_manifest
from secure_fed.data.realistic import write_realistic
from secure_fed.data.synthetic import public_vocabulary
from secure_fed.data.tokenizer import (
    ByteTokenizer,
    PublicTokenizer,
    WordCharTokenizer,
    load_tokenizer,
)


@pytest.fixture(scope="module")
def real_set(tmp_path_factory):
    return write_realistic(tmp_path_factory.mktemp("real"), studies=30, seed=5)


def _reports(annotation):
    return [e["report"] for split in json.loads(annotation.read_text()).values() for e in split]


def _unk_rate(tok, reports):
    ids = [i for r in reports for i in tok.encode(r)]
    return sum(i == tok.unk_id for i in ids) / len(ids)


def test_generator_writes_real_shapes(real_set):
    records = load_annotation(real_set)
    assert len(records) == 30 and {r.visit_index for r in records} == {1}  # one visit per patient
    assert {len(r.image_paths) for r in records} == {1, 2}  # one or two views
    folder = real_set.parent / "images"
    files = sorted(folder.glob("*/*"))
    modes = set()
    sizes = set()
    for f in files:
        with Image.open(f) as im:
            modes.add((im.mode, f.suffix))
            sizes.add(im.size)
    assert {".png", ".jpg"} <= {suffix for _, suffix in modes}
    assert {"L", "RGB"} <= {mode for mode, _ in modes}
    assert any(mode.startswith("I") for mode, _ in modes)  # a 16-bit greyscale export
    assert len(sizes) > 10 and all(size != (32, 32) for size in sizes)
    # its words are not the synthetic generator's
    vocab = set(public_vocabulary())
    outside = {w for r in _reports(real_set) for w in words(r)} - vocab
    assert len(outside) > 30
    manifest = load_manifest(real_set.parent / "manifest.jsonl")
    assert sorted(r.report for r in manifest) == sorted(r.report for r in records)


def test_images_of_any_mode_and_size_load_alike(tmp_path):
    picture = np.linspace(0.0, 1.0, 50 * 70, dtype=np.float32).reshape(50, 70)
    Image.fromarray((picture * 255).astype(np.uint8)).save(tmp_path / "grey.png")
    Image.fromarray((picture * 255).astype(np.uint8)).convert("RGB").save(tmp_path / "rgb.png")
    Image.fromarray((picture * 65535).astype(np.uint16)).save(tmp_path / "wide.png")
    Image.fromarray((picture * 255).astype(np.uint8)).convert("RGB").save(tmp_path / "rgb.jpg", quality=95)
    loaded = {
        name: load_image(tmp_path / name, 24) for name in ("grey.png", "rgb.png", "wide.png", "rgb.jpg")
    }
    for name, image in loaded.items():
        assert image.shape == (24, 24) and image.dtype == np.float32, name
        assert 0.0 <= image.min() and image.max() <= 1.0, name
        # a 16-bit export is scaled by its range, not clipped to white by an 8-bit conversion
        assert abs(float(image.mean()) - float(loaded["grey.png"].mean())) < 0.02, name


def test_cohort_from_either_format(real_set):
    by_annotation = load_cohort(real_set, 32)
    assert list(by_annotation.sites) == ["iu_xray"]
    dealt = load_cohort(real_set, 32, n_sites=3, seed=0)
    assert sorted(dealt.sites) == ["site0", "site1", "site2"]
    by_manifest = load_cohort(real_set.parent / "manifest.jsonl", 32)
    assert sorted(by_manifest.sites) == ["hospital0", "hospital1", "hospital2"]
    means = [float(v.image.mean()) for v in by_manifest.visits]
    assert max(means) < 0.9  # no 16-bit image saturated


def test_word_char_tokenizer_covers_real_reports(real_set):
    reports = _reports(real_set)
    public, wordchar, byte = PublicTokenizer.from_public(), WordCharTokenizer(), ByteTokenizer()
    assert _unk_rate(public, reports) > 0.05  # why the public tokenizer is not enough
    assert _unk_rate(wordchar, reports) < 0.01
    assert byte.unk_id is None  # no byte is unknown
    for report in reports:
        ids = wordchar.encode(report)
        # decoding gives back every word (the labeler's and the metrics' view of the text)
        assert words(wordchar.decode([wordchar.bos_id, *ids, wordchar.eos_id])) == words(report)
        assert byte.decode(byte.encode(report)) == " ".join(report.lower().split())
    # a word in no list is spelled out, not lost
    spelled = wordchar.encode("dextroscoliosis")
    assert len(spelled) == len("dextroscoliosis") and wordchar.decode(spelled) == "dextroscoliosis"


def test_word_char_keeps_the_public_ids_for_synthetic_text(synth_manifest):
    public, wordchar = PublicTokenizer.from_public(), WordCharTokenizer()
    assert wordchar.tokens[: public.vocab_size] == public.tokens
    for record in load_manifest(synth_manifest)[:50]:
        assert wordchar.encode(record.report) == public.encode(record.report)


def test_tokenizer_is_chosen_by_config():
    from secure_fed.config import build_config

    assert build_config({}).data.tokenizer == "public"
    cfg = build_config({"data": {"tokenizer": "words+chars"}})
    assert isinstance(load_tokenizer(None, cfg.data.tokenizer), WordCharTokenizer)
    assert isinstance(load_tokenizer(None, "bytes"), ByteTokenizer)
    assert isinstance(load_tokenizer(None), PublicTokenizer)
    with pytest.raises(ValueError, match="data.tokenizer"):
        load_tokenizer(None, "sentencepiece")
