"""A CheXbert checkpoint folder, when given, labels free text for CE-F1 instead of the rules.

No real checkpoint can be downloaded here: the tests write one in CheXbert's layout (a small random
BERT, a word-piece vocabulary, the 14 heads under `module.`) whose heads are set by hand, so the
expected labels are known, and check that loading, the head order and the class mapping hold."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from secure_fed.config import ConfigError, load_config
from secure_fed.eval.chexbert import CHEXBERT_ORDER, CheXbert, CheXbertError, CheXbertLabeler
from secure_fed.eval.clinical import chexpert_ce_f1

WORDS = ["heart", "size", "is", "enlarged", "no", "pleural", "effusion", "possible", "small", "left", "."]
# class per head: 0 blank, 1 positive, 2 negative, 3 uncertain ("No Finding": 0 blank, 1 positive)
FORCED = {"Cardiomegaly": 1, "Pleural Effusion": 2, "Edema": 3}


def write_checkpoint(folder: Path, prefix: str = "module.", forced: dict[str, int] = FORCED) -> Path:
    from transformers import BertConfig

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n"
    )
    config = BertConfig(
        vocab_size=len(WORDS) + 5,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
    )
    config.save_pretrained(folder)
    torch.manual_seed(0)
    model = CheXbert(config)
    with torch.no_grad():
        for name, head in zip(CHEXBERT_ORDER, model.linear_heads, strict=True):
            head.weight.zero_()
            head.bias.zero_()
            head.bias[forced.get(name, 0)] = 5.0  # this class wins whatever the text
    state = {prefix + k: v for k, v in model.state_dict().items()}
    torch.save({"model_state_dict": state, "epoch": 7}, folder / "chexbert.pth")
    return folder


def test_a_checkpoint_in_chexberts_layout_labels_in_the_rule_labelers_form(tmp_path: Path) -> None:
    labeler = CheXbertLabeler(write_checkpoint(tmp_path / "chexbert"))
    expected = {"Cardiomegaly": 1.0, "Pleural Effusion": 0.0, "Edema": -1.0}  # blanks left out
    assert labeler("heart size is enlarged.") == expected
    assert labeler.label_many(["no pleural effusion.", "possible small left\n effusion."]) == [expected] * 2


def test_the_no_finding_head_has_two_classes(tmp_path: Path) -> None:
    labeler = CheXbertLabeler(write_checkpoint(tmp_path / "c", forced={"No Finding": 1}))
    assert labeler("heart size is enlarged.") == {"No Finding": 1.0}


def test_ce_f1_reads_free_text_with_the_labeler_it_is_given() -> None:
    def says_big_heart(text: str) -> dict[str, float]:
        return {"Cardiomegaly": 1.0} if "enlarged" in text else {"Cardiomegaly": 0.0}

    refs = ["heart is enlarged.", "heart is enlarged.", "normal heart."]
    hyps = ["heart is enlarged.", "normal heart.", "normal heart."]
    assert chexpert_ce_f1(refs, hyps, says_big_heart) == pytest.approx(2 / 3)  # tp 1, fn 1
    # the labeler reads the references too: one that finds nothing leaves nothing to score
    assert math.isnan(chexpert_ce_f1(refs, hyps, lambda _: {}))


def test_a_folder_that_is_not_a_chexbert_checkpoint_is_refused(tmp_path: Path) -> None:
    folder = write_checkpoint(tmp_path / "other")
    state = torch.load(folder / "chexbert.pth", weights_only=True)["model_state_dict"]
    state["module.extra_head.weight"] = torch.zeros(2, 2)
    torch.save({"model_state_dict": state}, folder / "chexbert.pth")
    with pytest.raises(CheXbertError, match="not a CheXbert checkpoint"):
        CheXbertLabeler(folder)
    (folder / "chexbert.pth").write_bytes(b"not a torch file")
    with pytest.raises(CheXbertError, match="chexbert.pth: cannot be read"):
        CheXbertLabeler(folder)


def test_the_config_names_a_missing_file_at_load(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    config = tmp_path / "run.toml"
    config.write_text(f'[model]\nchexbert_path = "{empty}"\n')
    with pytest.raises(ConfigError) as err:
        load_config(config)
    assert "model.chexbert_path" in str(err.value) and "chexbert.pth, config.json, vocab.txt" in str(
        err.value
    )
    write_checkpoint(empty)
    assert load_config(config).model.chexbert_path == empty


def test_a_site_scores_free_text_with_the_configured_checkpoint(tmp_path: Path) -> None:
    from secure_fed.site.evaluation import free_text_labeler, score

    cfg = load_config(None, {"model.chexbert_path": str(write_checkpoint(tmp_path / "c"))})
    labeler = free_text_labeler(cfg)
    assert isinstance(labeler, CheXbertLabeler)
    assert free_text_labeler(cfg) is labeler  # loaded once per process
    assert free_text_labeler(load_config(None, {})) is None
    # every report gets the forced labels: Cardiomegaly positive on both sides → CE-F1 1
    scores = score(["heart is enlarged."] * 2, ["no effusion."] * 2, [None, None], labeler)
    assert scores["CE-F1"] == 1.0


def test_the_head_order_is_chexberts() -> None:
    # CheXbert's constants.CONDITIONS, written out: the heads of a released checkpoint are in this order
    assert CHEXBERT_ORDER == (
        "Enlarged Cardiomediastinum",
        "Cardiomegaly",
        "Lung Opacity",
        "Lung Lesion",
        "Edema",
        "Consolidation",
        "Pneumonia",
        "Atelectasis",
        "Pneumothorax",
        "Pleural Effusion",
        "Pleural Other",
        "Fracture",
        "Support Devices",
        "No Finding",
    )
