import pytest

from secure_fed.config import DataConfig
from secure_fed.data.manifest import load_manifest
from secure_fed.data.synthetic import synthesize
from secure_fed.data.tokenizer import PretrainedTokenizer, PublicTokenizer, load_tokenizer


def test_specials_and_layout():
    tok = PublicTokenizer.from_public()
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (0, 1, 2, 3)
    assert tok.vocab_size == len(tok.tokens) > 40
    assert tok.encode("Nodule, LARGER.") == [
        tok.index["nodule"],
        tok.index[","],
        tok.index["larger"],
        tok.index["."],
    ]
    assert tok.encode("the zebra") == [tok.index["the"], tok.unk_id]
    assert len(tok.encode("no prior study for comparison.", max_len=3)) == 3


def test_decode_stops_at_eos_and_skips_pad_bos():
    tok = PublicTokenizer.from_public()
    ids = tok.encode("no change. heart size is normal.")
    assert tok.decode([tok.bos_id, *ids, tok.eos_id, *tok.encode("lesion"), tok.pad_id]) == (
        "no change. heart size is normal."
    )
    assert tok.decode([tok.pad_id, *ids[:2], tok.pad_id]) == "no change"
    assert tok.decode([]) == ""


def test_vocabulary_does_not_depend_on_the_data(tmp_path):
    a = synthesize(tmp_path / "a", sites=2, patients=5, visits=3, seed=1)
    b = synthesize(tmp_path / "b", sites=4, patients=7, visits=5, seed=2)
    assert a.read_text() != b.read_text()
    # the tokenizer is built without ever being shown a cohort, so both get the same one
    assert load_tokenizer(None).tokens == PublicTokenizer.from_public().tokens


def test_round_trips_every_generated_report_without_unk(synth_manifest, tmp_path):
    tok = PublicTokenizer.from_public()
    other = synthesize(tmp_path / "other", sites=5, patients=30, visits=6, seed=9)
    public = synthesize(tmp_path / "public", sites=1, patients=60, visits=5, seed=9, domain="public")
    records = load_manifest(synth_manifest) + load_manifest(other) + load_manifest(public)
    seen = set()
    for r in records:
        ids = tok.encode(r.report)
        assert tok.unk_id not in ids, r.report
        assert tok.decode([tok.bos_id, *ids, tok.eos_id]) == r.report
        assert len(ids) + 2 <= DataConfig().max_report_tokens  # fits the default with bos and eos
        seen.update(ids)
    assert len(seen) >= 0.9 * (tok.vocab_size - 4)  # the cohorts use (almost) the whole vocabulary


def test_save_and_load(tmp_path):
    tok = PublicTokenizer.from_public()
    tok.save(tmp_path / "tok.json")
    again = load_tokenizer(tmp_path / "tok.json")
    assert isinstance(again, PublicTokenizer) and again.tokens == tok.tokens
    (tmp_path / "junk.json").write_text('{"tokens": ["a"]}')
    with pytest.raises(ValueError, match="not a saved PublicTokenizer"):
        PublicTokenizer.load(tmp_path / "junk.json")
    with pytest.raises(FileNotFoundError):
        load_tokenizer(tmp_path / "absent")


def test_wraps_a_local_transformers_tokenizer(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, "the": 4, "lungs": 5, "are": 6, "clear": 7}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>"
    ).save_pretrained(tmp_path / "hf")
    tok = load_tokenizer(tmp_path / "hf")
    assert isinstance(tok, PretrainedTokenizer)
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.vocab_size) == (0, 1, 2, 8)
    ids = tok.encode("the lungs are clear")
    assert ids == [4, 5, 6, 7] and tok.encode("the lungs are clear", max_len=2) == [4, 5]
    assert tok.decode([1, *ids, 2, 4, 0]) == "the lungs are clear"
