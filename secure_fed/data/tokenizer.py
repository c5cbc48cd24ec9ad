"""Report tokenizers that never look at reports: public word lists, bytes, or a pretrained local one.

A vocabulary fitted on a hospital's reports would leak its rare words (names, dates, rare findings)
into a released artefact; the public tokenizer is built from the synthetic generator's templates
only, and a pretrained tokenizer is loaded from a local folder, never fitted.
"""

from __future__ import annotations

import json
import re
import string
from pathlib import Path
from typing import Any, Protocol

from secure_fed.data.lexicon import words
from secure_fed.data.radiology_words import RADIOLOGY_WORDS
from secure_fed.data.synthetic import public_vocabulary

SPECIALS: tuple[str, ...] = ("<pad>", "<bos>", "<eos>", "<unk>")
_PUNCT = frozenset({".", ","})
_FORMAT = "secure_fed.public_tokenizer/1"


class ReportTokenizer(Protocol):
    pad_id: int
    bos_id: int
    eos_id: int

    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str, max_len: int | None = None) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


def _payload(ids: list[int], bos: int, eos: int, pad: int) -> list[int]:
    """The ids a decoder should render: a leading bos dropped, cut at the first eos, no padding."""
    if ids and ids[0] == bos:
        ids = ids[1:]
    if eos in ids:
        ids = ids[: ids.index(eos)]
    return [i for i in ids if i not in (pad, bos)]


def join_words(tokens: list[str]) -> str:
    """Words with single spaces, punctuation attached to the word before it."""
    out = ""
    for tok in tokens:
        out += tok if (tok in _PUNCT or not out) else " " + tok
    return out


class PublicTokenizer:
    """Word-level, lowercase; "." and "," are tokens; ``<pad>`` is 0, then ``<bos> <eos> <unk>``."""

    def __init__(self, tokens: list[str]) -> None:
        if list(tokens[: len(SPECIALS)]) != list(SPECIALS) or len(set(tokens)) != len(tokens):
            raise ValueError("token list must start with <pad> <bos> <eos> <unk> and have no repeats")
        self.tokens = list(tokens)
        self.index = {t: i for i, t in enumerate(self.tokens)}
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = range(len(SPECIALS))

    @classmethod
    def from_public(cls) -> PublicTokenizer:
        return cls([*SPECIALS, *public_vocabulary()])

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    def encode(self, text: str, max_len: int | None = None) -> list[int]:
        """Token ids without special tokens, truncated to ``max_len``; unknown words become <unk>."""
        ids = [self.index.get(w, self.unk_id) for w in words(text)]
        return ids if max_len is None else ids[:max_len]

    def decode(self, ids: list[int]) -> str:
        body = _payload([int(i) for i in ids], self.bos_id, self.eos_id, self.pad_id)
        return join_words([self.tokens[i] if 0 <= i < len(self.tokens) else "<unk>" for i in body])

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps({"format": _FORMAT, "tokens": self.tokens}, indent=0))

    @classmethod
    def load(cls, path: str | Path) -> PublicTokenizer:
        data = json.loads(Path(path).read_text())
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            raise ValueError(f"{path}: not a saved PublicTokenizer")
        return cls(list(data["tokens"]))


# Word tokens of the real-text tokenizer: runs of letters/digits, or any single other character.
_REAL_WORD = re.compile(r"[a-z0-9]+|[^\sa-z0-9]")
# Every character it can spell: a word outside the lists is spelled with these, so only a
# character outside them (e.g. a non-ASCII letter) becomes <unk>.
SPELL_CHARS: str = string.ascii_lowercase + string.digits
PUNCTUATION: tuple[str, ...] = tuple(".,:;-/()%'\"?!+=<>&#*[]")
_WORD_START, _WORD_CONT = "\u2581", "##"  # first / following character of a spelled-out word


class WordCharTokenizer:
    """Public word list (generator vocabulary + hand-written radiology words) with a character
    fallback: a word outside the list is spelled as ``\u2581c ##h ##a ...``, so any ASCII report is
    encoded without ``<unk>`` and nothing is fitted on reports. The generator's words keep the ids
    they have in ``PublicTokenizer``."""

    def __init__(self) -> None:
        base = [*SPECIALS, *public_vocabulary()]
        extra = [*RADIOLOGY_WORDS, *PUNCTUATION]
        extra += [_WORD_START + c for c in SPELL_CHARS] + [_WORD_CONT + c for c in SPELL_CHARS]
        seen = set(base)
        self.tokens = base + [t for t in dict.fromkeys(extra) if t not in seen]
        self.index = {t: i for i, t in enumerate(self.tokens)}
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = range(len(SPECIALS))

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    def _word_ids(self, word: str) -> list[int]:
        known = self.index.get(word)
        if known is not None:
            return [known]
        if len(word) == 1 or not word.isalnum() or not word.isascii():
            return [self.index.get(_WORD_START + word, self.unk_id)] if word.isalnum() else [self.unk_id]
        return [self.index[_WORD_START + word[0]], *(self.index[_WORD_CONT + c] for c in word[1:])]

    def encode(self, text: str, max_len: int | None = None) -> list[int]:
        ids = [i for w in _REAL_WORD.findall(text.lower()) for i in self._word_ids(w)]
        return ids if max_len is None else ids[:max_len]

    def decode(self, ids: list[int]) -> str:
        body = _payload([int(i) for i in ids], self.bos_id, self.eos_id, self.pad_id)
        out: list[str] = []
        for i in body:
            tok = self.tokens[i] if 0 <= i < len(self.tokens) else "<unk>"
            if tok.startswith(_WORD_CONT) and out:
                out[-1] += tok[len(_WORD_CONT) :]
            else:
                out.append(tok.removeprefix(_WORD_START).removeprefix(_WORD_CONT))
        return join_words(out)


class ByteTokenizer:
    """UTF-8 bytes of the lowercased, whitespace-normalised report: covers any text, no fitting."""

    def __init__(self) -> None:
        self.pad_id, self.bos_id, self.eos_id = range(3)
        self.unk_id: int | None = None  # no byte is unknown

    @property
    def vocab_size(self) -> int:
        return len(SPECIALS) + 256

    def encode(self, text: str, max_len: int | None = None) -> list[int]:
        raw = " ".join(text.lower().split()).encode("utf-8")
        ids = [len(SPECIALS) + b for b in raw]
        return ids if max_len is None else ids[:max_len]

    def decode(self, ids: list[int]) -> str:
        body = _payload([int(i) for i in ids], self.bos_id, self.eos_id, self.pad_id)
        raw = bytes(i - len(SPECIALS) for i in body if len(SPECIALS) <= i < len(SPECIALS) + 256)
        return raw.decode("utf-8", errors="replace")


class PretrainedTokenizer:
    """A transformers tokenizer behind the PublicTokenizer interface (GPT-2 style: no pad, bos == eos)."""

    def __init__(self, hf: Any) -> None:
        self.hf = hf
        eos = hf.eos_token_id if hf.eos_token_id is not None else hf.sep_token_id
        if eos is None:
            raise ValueError("the pretrained tokenizer has no eos (or sep) token")
        self.eos_id = int(eos)
        self.bos_id = int(hf.bos_token_id if hf.bos_token_id is not None else self.eos_id)
        self.pad_id = int(hf.pad_token_id if hf.pad_token_id is not None else self.eos_id)

    @property
    def vocab_size(self) -> int:
        return len(self.hf)

    def encode(self, text: str, max_len: int | None = None) -> list[int]:
        ids = list(self.hf(text, add_special_tokens=False)["input_ids"])
        return ids if max_len is None else ids[:max_len]

    def decode(self, ids: list[int]) -> str:
        body = _payload([int(i) for i in ids], self.bos_id, self.eos_id, self.pad_id)
        return str(self.hf.decode(body, skip_special_tokens=True)).strip()


TOKENIZER_KINDS: tuple[str, ...] = ("public", "words+chars", "bytes")

AnyTokenizer = PublicTokenizer | WordCharTokenizer | ByteTokenizer | PretrainedTokenizer


def load_tokenizer(path: str | Path | None = None, kind: str = "public") -> AnyTokenizer:
    """A local tokenizer (a saved PublicTokenizer file or a transformers folder) when ``path`` is
    given; else the built-in ``kind`` (``data.tokenizer``): "public" (the generator's words),
    "words+chars" (public word list, character fallback) or "bytes"."""
    if path is None:
        if kind == "words+chars":
            return WordCharTokenizer()
        if kind == "bytes":
            return ByteTokenizer()
        if kind != "public":
            raise ValueError(
                f"data.tokenizer: unknown tokenizer {kind!r} (one of {', '.join(TOKENIZER_KINDS)})"
            )
        return PublicTokenizer.from_public()
    path = Path(path)
    if path.is_file():
        return PublicTokenizer.load(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no tokenizer there (expected a local folder or a saved file)")
    from transformers import AutoTokenizer  # heavy; only when a pretrained tokenizer is asked for

    return PretrainedTokenizer(AutoTokenizer.from_pretrained(str(path), local_files_only=True))
