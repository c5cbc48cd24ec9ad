"""Natural-language report metrics (BLEU-1..4, METEOR, ROUGE-L, CIDEr) via pycocoevalcap.

Text is tokenised here (lowercase words, punctuation dropped, as the PTB tokenizer of the COCO
toolkit would) rather than with pycocoevalcap's PTBTokenizer, which starts a Java process per call.
METEOR does need Java: without it METEOR is NaN, with a warning saying so, and the other metrics
are still computed. One METEOR Java process is kept per Python process (its start-up costs seconds)
and ended by ``close_meteor()`` or at exit.

CIDEr's document frequencies come from a fixed corpus (``reference_df``: reports of a fixed-seed
synthetic cohort), not from the references being scored: pycocoevalcap refits them to each call's
references, so the same report scored against another site's or seed's test split got another
weight, and small splits made the weights (and the score) noisy. Pass ``cider_df=None`` for
pycocoevalcap's own refitted CIDEr.
"""

from __future__ import annotations

import atexit
import functools
import math
import os
import shutil
import subprocess
import threading
import warnings
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pycocoevalcap.meteor.meteor as meteor_module
from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.cider.cider import Cider
from pycocoevalcap.cider.cider_scorer import precook
from pycocoevalcap.meteor.meteor import METEOR_JAR, Meteor
from pycocoevalcap.rouge.rouge import Rouge

from secure_fed.data.lexicon import words

METRIC_NAMES: tuple[str, ...] = ("BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "METEOR", "ROUGE-L", "CIDEr")
# what a site reports for a report model: the language metrics, then the clinical ones
REPORT_SCORES: tuple[str, ...] = (*METRIC_NAMES, "CE-F1", "CE-F1-micro", "temporal_consistency")

Corpus = dict[int, list[str]]


def scoring_text(text: str) -> str:
    return " ".join(w for w in words(text) if w not in {".", ","})


class _MeteorProcess(Meteor):
    """pycocoevalcap's METEOR scorer with a lifetime we control.

    Its own ``__init__`` pipes Java's stderr without reading it (a full pipe would hang the scorer)
    and its ``__del__`` re-takes a lock that a failed call may still hold. Only the process that
    started Java may end it, so that a forked worker cannot kill its parent's scorer.
    """

    def __init__(self) -> None:  # deliberately not Meteor.__init__, see the class docstring
        self.owner = os.getpid()
        self.lock = threading.Lock()
        self.meteor_cmd = ["java", "-jar", "-Xmx2G", METEOR_JAR, "-", "-", "-stdio", "-l", "en", "-norm"]
        self.meteor_p = subprocess.Popen(
            self.meteor_cmd,
            cwd=Path(meteor_module.__file__).parent,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )

    def close(self) -> None:
        proc = getattr(self, "meteor_p", None)
        if proc is None or os.getpid() != self.owner:
            return
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
        proc.kill()
        proc.wait()

    def __del__(self) -> None:
        self.close()


# Loading METEOR's paraphrase table takes seconds, so one Java process serves every call of this
# Python process; close_meteor() (also run at exit) ends it.
_scorer_lock = threading.Lock()
_scorer: _MeteorProcess | None = None


def close_meteor() -> None:
    global _scorer
    with _scorer_lock:
        if _scorer is not None:
            _scorer.close()
        _scorer = None


atexit.register(close_meteor)


def _shared_scorer() -> _MeteorProcess:
    global _scorer
    with _scorer_lock:
        if _scorer is None or _scorer.owner != os.getpid() or _scorer.meteor_p.poll() is not None:
            _scorer = _MeteorProcess()
        return _scorer


def _no_meteor(reason: str) -> float:
    warnings.warn(f"{reason}; METEOR is reported as NaN", RuntimeWarning, stacklevel=4)
    return math.nan


def meteor_score(gts: Corpus, res: Corpus) -> float:
    """Corpus METEOR 1.5, or NaN with a RuntimeWarning when Java is missing or the scorer fails."""
    if shutil.which("java") is None:
        return _no_meteor("METEOR needs Java (no `java` on PATH)")
    try:
        scorer = _shared_scorer()
    except OSError as err:
        return _no_meteor(f"METEOR needs Java, which did not start ({err})")
    try:
        score, _ = scorer.compute_score(gts, res)
        return float(score)
    except (OSError, ValueError) as err:
        close_meteor()  # a scorer that answered garbage once is not trusted again
        return _no_meteor(f"METEOR's Java scorer failed ({err!r})")


@dataclass(frozen=True)
class DocumentFrequencies:
    """CIDEr's n-gram document counts over a corpus of ``n_docs`` reference sets."""

    counts: dict[tuple[str, ...], float]
    n_docs: int

    @classmethod
    def of(cls, references: Sequence[Sequence[str]], n: int = 4) -> DocumentFrequencies:
        """``references[i]``: the scoring texts of document i (one or more references)."""
        counts: dict[tuple[str, ...], float] = defaultdict(float)
        for refs in references:
            for gram in {g for r in refs for g in precook(r, n)}:
                counts[gram] += 1.0
        return cls(dict(counts), len(references))


@functools.lru_cache(maxsize=1)
def reference_df() -> DocumentFrequencies:
    """The fixed corpus: every report of the generator's reference cohort (fixed seed, 3 sites)."""
    from secure_fed.data.synthetic import reference_reports

    return DocumentFrequencies.of([[scoring_text(r)] for r in reference_reports()])


def cider(gts: Corpus, res: Corpus, df: DocumentFrequencies, n: int = 4, sigma: float = 6.0) -> float:
    """CIDEr-D exactly as pycocoevalcap computes it, with document frequencies from ``df``."""
    ref_len = np.log(float(df.n_docs))

    def vec(text: str) -> tuple[list[dict[tuple[str, ...], float]], list[float], int]:
        grams = precook(text, n)
        v: list[dict[tuple[str, ...], float]] = [defaultdict(float) for _ in range(n)]
        norm = [0.0] * n
        length = 0
        for gram, tf in grams.items():
            k = len(gram) - 1
            v[k][gram] = float(tf) * (ref_len - np.log(max(1.0, df.counts.get(gram, 0.0))))
            norm[k] += v[k][gram] ** 2
            if k == 1:  # pycocoevalcap's length is its bigram count; kept for identical scores
                length += tf
        return v, [float(np.sqrt(x)) for x in norm], length

    scores = []
    for key, refs in gts.items():
        hv, hn, hl = vec(res[key][0])
        total = np.zeros(n)
        for ref in refs:
            rv, rn, rl = vec(ref)
            for k in range(n):
                val = sum(min(w, rv[k][g]) * rv[k][g] for g, w in hv[k].items())
                if hn[k] != 0 and rn[k] != 0:
                    val /= hn[k] * rn[k]
                total[k] += val * np.e ** (-(float(hl - rl) ** 2) / (2 * sigma**2))
        scores.append(float(np.mean(total)) / len(refs) * 10.0)
    return float(np.mean(scores))


_FIXED = "fixed"


def report_metrics(
    refs: list[str],
    hyps: list[str],
    meteor: bool = True,
    cider_df: DocumentFrequencies | str | None = _FIXED,
) -> dict[str, float]:
    """Corpus-level scores of ``hyps[i]`` against the single reference ``refs[i]``.

    ``meteor=False`` skips the Java scorer (METEOR is then NaN, silently), for quick checks.
    ``cider_df``: CIDEr's document frequencies: ``"fixed"`` (the reference corpus, default), a
    ``DocumentFrequencies``, or None to refit them to ``refs`` as pycocoevalcap does.
    """
    if len(refs) != len(hyps):
        raise ValueError(f"{len(refs)} references but {len(hyps)} hypotheses")
    if not refs:
        raise ValueError("no reports to score")
    gts: Corpus = {i: [scoring_text(r)] for i, r in enumerate(refs)}
    res: Corpus = {i: [scoring_text(h)] for i, h in enumerate(hyps)}
    bleu, _ = Bleu(4).compute_score(gts, res, verbose=0)
    rouge, _ = Rouge().compute_score(gts, res)
    if cider_df is None:
        cider_score, _ = Cider().compute_score(gts, res)
    else:
        df = reference_df() if isinstance(cider_df, str) else cider_df
        cider_score = cider(gts, res, df)
    scores = [*bleu, meteor_score(gts, res) if meteor else math.nan, rouge, cider_score]
    return {name: float(s) for name, s in zip(METRIC_NAMES, scores, strict=True)}
