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


# -- real reports: the 14 CheXpert observations --------------------------------------------------
# Rules in the spirit of the CheXpert/NegBio labeler, written here: a mention (phrase list per
# observation), then a negation or an uncertainty cue in its scope decides 0 or -1, else 1. An
# observation never mentioned is left out (CheXpert's blank). "No Finding" is 1 when no pathology
# (anything but Support Devices) is positive or uncertain.

CHEXPERT: tuple[str, ...] = (
    "No Finding",
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
)

_MENTIONS: dict[str, tuple[str, ...]] = {
    "Enlarged Cardiomediastinum": (
        "enlarged cardiomediastinum",
        "cardiomediastinal enlargement",
        "widened mediastinum",
        "mediastinal widening",
        "mediastinum is widened",
        "mediastinum is enlarged",
        "enlarged mediastinum",
    ),
    "Cardiomegaly": (
        "cardiomegaly",
        "cardiac enlargement",
        "heart enlargement",
        "enlarged heart",
        "enlarged cardiac silhouette",
        "heart size is enlarged",
        "heart is enlarged",
        "cardiac silhouette is enlarged",
        "heart size is increased",
    ),
    "Lung Opacity": (
        "opacity",
        "opacities",
        "opacification",
        "infiltrate",
        "infiltrates",
        "airspace disease",
    ),
    "Lung Lesion": ("nodule", "nodules", "mass", "masses", "lesion", "lesions", "nodular density"),
    "Edema": ("edema", "vascular congestion", "pulmonary congestion", "interstitial prominence"),
    "Consolidation": ("consolidation", "consolidations", "consolidative"),
    "Pneumonia": ("pneumonia", "infection", "infectious process"),
    "Atelectasis": ("atelectasis", "atelectatic", "collapse"),
    "Pneumothorax": ("pneumothorax", "pneumothoraces"),
    "Pleural Effusion": ("pleural effusion", "pleural effusions", "effusion", "effusions", "pleural fluid"),
    "Pleural Other": (
        "pleural thickening",
        "pleural scarring",
        "fibrothorax",
        "pleural plaque",
        "pleural plaques",
    ),
    "Fracture": ("fracture", "fractures", "fractured"),
    "Support Devices": (
        "tube",
        "tubes",
        "catheter",
        "picc",
        "pacemaker",
        "pacer",
        "line",
        "lines",
        "sternotomy wires",
        "clips",
        "stent",
        "drain",
        "device",
        "devices",
    ),
}
# Statements of normality that negate an observation without a negation word.
_NORMAL: dict[str, tuple[str, ...]] = {
    "Cardiomegaly": (
        "heart size is normal",
        "normal heart size",
        "heart is normal in size",
        "heart size normal",
    ),
    "Enlarged Cardiomediastinum": (
        "cardiomediastinal silhouette is normal",
        "cardiomediastinal silhouette is unremarkable",
        "mediastinal contour is normal",
        "mediastinal contours are normal",
    ),
}
_NEGATION_BEFORE = (
    ("no",),
    ("without",),
    ("not",),
    ("negative", "for"),
    ("free", "of"),
    ("clear", "of"),
    ("absence", "of"),
    ("resolution", "of"),
    ("resolved",),
)
_NEGATION_AFTER = (
    ("has", "resolved"),
    ("have", "resolved"),
    ("resolved",),
    ("is", "not"),
    ("are", "not"),
    ("absent",),
)
_UNCERTAIN_BEFORE = (
    ("possible",),
    ("possibly",),
    ("may",),
    ("might",),
    ("could",),
    ("likely",),
    ("probable",),
    ("probably",),
    ("questionable",),
    ("suspicious", "for"),
    ("suspected",),
    ("suggest",),
    ("suggests",),
    ("suggestive", "of"),
    ("concerning", "for"),
    ("concern", "for"),
    ("borderline",),
    ("versus",),
    ("vs",),
    ("rule", "out"),
    ("cannot", "exclude"),
    ("not", "excluded"),
)
_UNCERTAIN_AFTER = (
    ("cannot", "be", "excluded"),
    ("not", "excluded"),
    ("can", "not", "be", "excluded"),
    ("is", "possible"),
    ("versus",),
    ("vs",),
)
# Words that end a cue's scope inside a sentence ("no effusion but a small nodule").
_SCOPE_BREAKS = frozenset({"but", "however", "although", "though", "which", "with", "otherwise"})


def _scopes(sentence: list[str]) -> list[list[str]]:
    out: list[list[str]] = [[]]
    for w in sentence:
        if w in _SCOPE_BREAKS or w == ";":
            out.append([])
        else:
            out[-1].append(w)
    return [s for s in out if s]


def _find(words_: list[str], phrase: tuple[str, ...]) -> list[int]:
    n = len(phrase)
    return [i for i in range(len(words_) - n + 1) if tuple(words_[i : i + n]) == phrase]


def _cue_before(scope: list[str], pos: int, cues: tuple[tuple[str, ...], ...]) -> bool:
    return any(i + len(c) <= pos for c in cues for i in _find(scope, c))


def _cue_after(scope: list[str], end: int, cues: tuple[tuple[str, ...], ...]) -> bool:
    return any(i >= end for c in cues for i in _find(scope, c))


def _real_words(text: str) -> list[list[str]]:
    """Sentences of lowercase words; hyphens split words ("right-sided" → "right sided")."""
    return _sentences(text.replace("-", " ").replace(";", " ; "))


def label_chexpert(text: str) -> dict[str, float]:
    """The 14 CheXpert observations of a free-text report: 1 positive, 0 negative, -1 uncertain;
    an observation the report does not mention is absent from the result."""
    found: dict[str, float] = {}

    def note(name: str, value: float) -> None:
        # positive beats uncertain beats negative across mentions, as CheXpert aggregates them
        rank = {1.0: 2, -1.0: 1, 0.0: 0}
        if name not in found or rank[value] > rank[found[name]]:
            found[name] = value

    for sentence in _real_words(text):
        for scope in _scopes(sentence):
            plain = [w for w in scope if w != ","]
            for name, phrases in _NORMAL.items():
                if any(_find(plain, tuple(p.split())) for p in phrases):
                    note(name, 0.0)
            taken = [False] * len(plain)
            for name, phrases in _MENTIONS.items():
                for phrase in sorted(phrases, key=lambda p: -len(p.split())):
                    words_ = tuple(phrase.split())
                    for pos in _find(plain, words_):
                        end = pos + len(words_)
                        if any(taken[pos:end]):
                            continue
                        taken[pos:end] = [True] * (end - pos)
                        if _cue_before(plain, pos, _UNCERTAIN_BEFORE) or _cue_after(
                            plain, end, _UNCERTAIN_AFTER
                        ):
                            value = -1.0
                        elif _cue_before(plain, pos, _NEGATION_BEFORE) or _cue_after(
                            plain, end, _NEGATION_AFTER
                        ):
                            value = 0.0
                        else:
                            value = 1.0
                        note(name, value)
    pathology = [n for n in CHEXPERT[1:] if n != "Support Devices"]
    if not any(found.get(n) in (1.0, -1.0) for n in pathology):
        found["No Finding"] = 1.0
    return found
