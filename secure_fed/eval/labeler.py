"""Rule-based labels of a report in the synthetic cohort's language (any site's synonyms, any era).

Findings come from the descriptive sentences (a finding's term, not negated in its clause); the
progression comes from the comparison sentence. A present finding the comparison does not name is
"stable" (radiologists mention change, not its absence), an absent one "absent". A report that says
there is no prior, or has no comparison sentence at all, gets an empty progression.
"""

from __future__ import annotations

from secure_fed.data import lexicon
from secure_fed.data.lexicon import FINDINGS

NEGATIONS = frozenset({"no", "without", "not", "negative"})

_STATE_WORDS: dict[str, str] = {
    word: state for table in lexicon.CHANGE_WORDS.values() for state, word in table.items()
} | {w: "stable" for w in lexicon.STABLE_WORDS}


def _opener_words(key: str) -> list[list[str]]:
    """The fixed words of each era's template, up to its first placeholder, e.g. since the prior exam."""
    return [lexicon.words(t[key].split("{")[0]) for t in lexicon.TEMPLATES.values()]


_COMPARE_OPENERS = [[w for w in ws if w not in {",", "."}] for ws in _opener_words("compare")]
_NO_PRIOR = [[w for w in ws if w != "."] for ws in _opener_words("no_prior")]

# Longest terms first so that "pleural effusion" is consumed before "effusion".
_TERMS = sorted(
    ((term.split(), f) for f, terms in lexicon.TERMS.items() for term in terms), key=lambda tf: -len(tf[0])
)


def _sentences(text: str) -> list[list[str]]:
    out: list[list[str]] = [[]]
    for w in lexicon.words(text):
        if w == ".":
            out.append([])
        else:
            out[-1].append(w)
    return [s for s in out if s]


def _clauses(sentence: list[str]) -> list[list[str]]:
    out: list[list[str]] = [[]]
    for w in sentence:
        if w in {",", "and"}:
            out.append([])
        else:
            out[-1].append(w)
    return [c for c in out if c]


def _mentions(clause: list[str]) -> list[tuple[int, str]]:
    """(position, finding) of each term in the clause, longest match first, no overlaps."""
    taken = [False] * len(clause)
    found: list[tuple[int, str]] = []
    for term, finding in _TERMS:
        n = len(term)
        for i in range(len(clause) - n + 1):
            if clause[i : i + n] == term and not any(taken[i : i + n]):
                taken[i : i + n] = [True] * n
                found.append((i, finding))
    return sorted(found)


def _starts_with(sentence: list[str], prefixes: list[list[str]]) -> bool:
    return any(p and sentence[: len(p)] == p for p in prefixes)


def _contains(sentence: list[str], phrase: list[str]) -> bool:
    n = len(phrase)
    return any(sentence[i : i + n] == phrase for i in range(len(sentence) - n + 1))


def label_report(text: str) -> dict[str, dict[str, int] | dict[str, str]]:
    findings = dict.fromkeys(FINDINGS, 0)
    stated: dict[str, str] = {}
    no_prior = compared = False
    for sentence in _sentences(text):
        if any(_contains(sentence, p) for p in _NO_PRIOR):
            no_prior = True
            continue
        if _starts_with(sentence, _COMPARE_OPENERS):
            compared = True
            for clause in _clauses(sentence):
                states = [_STATE_WORDS[w] for w in clause if w in _STATE_WORDS]
                for _, finding in _mentions(clause):
                    if states:
                        stated.setdefault(finding, states[0])
            continue
        for clause in _clauses(sentence):
            for pos, finding in _mentions(clause):
                if not NEGATIONS.intersection(clause[:pos]):
                    findings[finding] = 1
    if no_prior or not compared:
        return {"findings": findings, "progression": {}}
    progression = {f: stated.get(f, "stable" if findings[f] else "absent") for f in FINDINGS}
    return {"findings": findings, "progression": progression}
