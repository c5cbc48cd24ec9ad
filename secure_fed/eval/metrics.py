"""Natural-language report metrics (BLEU-1..4, METEOR, ROUGE-L, CIDEr) via pycocoevalcap.

Text is tokenised here (lowercase words, punctuation dropped, as the PTB tokenizer of the COCO
toolkit would) rather than with pycocoevalcap's PTBTokenizer, which starts a Java process per call.
METEOR does need Java: without it METEOR is NaN, with a warning saying so, and the other metrics
are still computed. One METEOR Java process is kept per Python process (its start-up costs seconds)
and ended by ``close_meteor()`` or at exit.
"""

from __future__ import annotations

import atexit
import math
import os
import shutil
import subprocess
import threading
import warnings
from pathlib import Path

import pycocoevalcap.meteor.meteor as meteor_module
from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.cider.cider import Cider
from pycocoevalcap.meteor.meteor import METEOR_JAR, Meteor
from pycocoevalcap.rouge.rouge import Rouge

from secure_fed.data.lexicon import words

METRIC_NAMES: tuple[str, ...] = ("BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "METEOR", "ROUGE-L", "CIDEr")

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


def report_metrics(refs: list[str], hyps: list[str], meteor: bool = True) -> dict[str, float]:
    """Corpus-level scores of ``hyps[i]`` against the single reference ``refs[i]``.

    ``meteor=False`` skips the Java scorer (METEOR is then NaN, silently), for quick checks.
    """
    if len(refs) != len(hyps):
        raise ValueError(f"{len(refs)} references but {len(hyps)} hypotheses")
    if not refs:
        raise ValueError("no reports to score")
    gts: Corpus = {i: [scoring_text(r)] for i, r in enumerate(refs)}
    res: Corpus = {i: [scoring_text(h)] for i, h in enumerate(hyps)}
    bleu, _ = Bleu(4).compute_score(gts, res, verbose=0)
    rouge, _ = Rouge().compute_score(gts, res)
    cider, _ = Cider().compute_score(gts, res)
    scores = [*bleu, meteor_score(gts, res) if meteor else math.nan, rouge, cider]
    return {name: float(s) for name, s in zip(METRIC_NAMES, scores, strict=True)}
