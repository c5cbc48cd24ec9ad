"""CheXbert (Smit et al., 2020) as the free-text labeler, read from a local checkpoint folder.

CE-F1 on real reports is usually computed with CheXbert. When `model.chexbert_path` names a folder
holding its checkpoint, the sites use it instead of the rule labeler (`eval.labeler`); nothing is
downloaded. The folder holds

- `chexbert.pth`: the released checkpoint, `{"model_state_dict": ...}` with keys `bert.*` and
  `linear_heads.<i>.*` (a `module.` prefix, as DataParallel saved it, is accepted);
- `config.json` and `vocab.txt`: the BERT-base (uncased) configuration and word-piece vocabulary
  the checkpoint was trained with.

The model is a BERT encoder with 14 linear heads on the [CLS] state, one per observation in
CheXbert's order: 13 with classes blank / positive / negative / uncertain and "No Finding" with
blank / positive. Its labels map onto the rule labeler's form: 1 positive, 0 negative, -1
uncertain, blank left out.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import nn

from secure_fed.config import CHEXBERT_FILES
from secure_fed.eval.labeler import CHEXPERT

# CheXbert's head order (its constants.CONDITIONS): the 13 observations as CHEXPERT lists them,
# then "No Finding", which CHEXPERT puts first
CHEXBERT_ORDER: tuple[str, ...] = (*CHEXPERT[1:], CHEXPERT[0])
# class index → our value; class 0 (blank) is left out
_CLASS_VALUE = {1: 1.0, 2: 0.0, 3: -1.0}
CHECKPOINT = CHEXBERT_FILES[0]
MAX_TOKENS = 512

Labeler = Callable[[str], dict[str, float]]


class CheXbertError(ValueError):
    """The folder is not a usable CheXbert checkpoint; the message names the file and the fix."""


class CheXbert(nn.Module):
    def __init__(self, config: object) -> None:
        super().__init__()
        from transformers import BertModel

        self.bert = BertModel(config, add_pooling_layer=False)  # type: ignore[arg-type]
        hidden = int(config.hidden_size)  # type: ignore[attr-defined]
        self.linear_heads = nn.ModuleList(
            [nn.Linear(hidden, 4) for _ in CHEXBERT_ORDER[:-1]] + [nn.Linear(hidden, 2)]
        )

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[torch.Tensor]:
        cls = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state[:, 0]
        return [head(cls) for head in self.linear_heads]


def _clean(text: str) -> str:
    # CheXbert's preprocessing: one line, single spaces
    return re.sub(r"\s+", " ", text.replace("\n", " ")).strip()


class CheXbertLabeler:
    """Labels reports with a CheXbert checkpoint; `__call__` labels one, `label_many` a batch."""

    def __init__(self, folder: str | Path, batch_size: int = 16) -> None:
        from transformers import BertConfig, BertTokenizer

        folder = Path(folder)
        missing = [n for n in CHEXBERT_FILES if not (folder / n).is_file()]
        if missing:
            raise CheXbertError(
                f"{folder}: model.chexbert_path needs {', '.join(missing)} (the CheXbert checkpoint and "
                "its BERT config and vocabulary); unset model.chexbert_path to use the rule labeler"
            )
        config = BertConfig.from_pretrained(str(folder), local_files_only=True)
        self.tokenizer = BertTokenizer(str(folder / "vocab.txt"), do_lower_case=True)
        self.model = CheXbert(config)
        try:
            saved = torch.load(folder / CHECKPOINT, map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 (any unreadable file gets the same one-line message)
            raise CheXbertError(f"{folder / CHECKPOINT}: cannot be read ({err})") from None
        state = saved.get("model_state_dict", saved) if isinstance(saved, dict) else None
        if not isinstance(state, dict):
            raise CheXbertError(f"{folder / CHECKPOINT}: expected a state dict (model_state_dict)")
        state = {k.removeprefix("module."): v for k, v in state.items()}
        state.pop("bert.embeddings.position_ids", None)  # a buffer older transformers saved
        problems = self.model.load_state_dict(state, strict=False)
        if problems.missing_keys or problems.unexpected_keys:
            raise CheXbertError(
                f"{folder / CHECKPOINT}: not a CheXbert checkpoint for this config.json (missing "
                f"{problems.missing_keys[:3]}, unexpected {problems.unexpected_keys[:3]})"
            )
        self.model.eval()
        self.batch_size = batch_size

    def label_many(self, reports: Sequence[str]) -> list[dict[str, float]]:
        out: list[dict[str, float]] = []
        for start in range(0, len(reports), self.batch_size):
            chunk = [_clean(r) for r in reports[start : start + self.batch_size]]
            enc = self.tokenizer(
                chunk, padding=True, truncation=True, max_length=MAX_TOKENS, return_tensors="pt"
            )
            with torch.no_grad():
                heads = self.model(enc["input_ids"], enc["attention_mask"])
            classes = torch.stack([h.argmax(dim=1) for h in heads], dim=1)  # (B, 14)
            for row in classes.tolist():
                out.append(
                    {
                        name: _CLASS_VALUE[c]
                        for name, c in zip(CHEXBERT_ORDER, row, strict=True)
                        if c in _CLASS_VALUE
                    }
                )
        return out

    def __call__(self, report: str) -> dict[str, float]:
        return self.label_many([report])[0]


@functools.lru_cache(maxsize=2)
def load_chexbert(folder: Path) -> CheXbertLabeler:
    """One model per process and folder: every split a site scores reuses it."""
    return CheXbertLabeler(folder)
