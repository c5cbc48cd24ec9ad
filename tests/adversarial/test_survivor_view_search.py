"""Every way a server can show the sites survivor sets, searched exhaustively (n = 4…8 sites).

A model of what one SecAgg+ round reveals (the same algebra as `harness_secagg.what_is_learned`):
an honest site u that answers the unmask request with survivor view S_u reveals its shares of each
partner's self-mask seed for partners in S_u and the pairwise key it shares with each partner not
in S_u; colluding sites reveal everything. A site's input can be stripped when t seed shares of it
are known and its pairwise masks with honest partners outside the set are known, so what the server
learns are sums over components of honest sites linked by unknown pairwise keys. Distributed DP
needs each such sum to hold at least h − c honest noise shares.

The rules each site applies are the real code's: the Shamir threshold t (`round_params`), the
masking graph (`neighbour_graph`, log-degree), the partner-level view check (|survived| + 1 ≥ h,
|survived| ≥ t) and, with the consistency step, that a site answers only for the set it confirmed
(once a round), carried with confirmations of it from at least h of its members (the model lets
any member confirm to any other; the code takes confirmations from neighbours only, which admits
less, so what holds here holds for the code). Full routing is
assumed (every share delivered): the server's freedom searched here is the survivor views.

- Which confirmations a server can show a site depends on the tags it has seen and how it routes
  them. A confirmation names its sender and recipient (`confirmation_statement`), so a tag honest v
  made for u verifies only at u, as v's: routing gives the server nothing beyond delivering it or
  not, which the model's confirmers already cover. Without that binding the pair's symmetric key
  made the tag u sent v verify at u as v's, so every site's own tags, reflected, confirmed any set
  it was shown (`views_with_reflection`): the search finds that attack at 5 sites, as it finds the
  split without the consistency step.
- Without the consistency step (the rule before it) the search finds the review's attack at 5 sites.
- With it, no view assignment, at the defaults (c = 1, h = n − c) and at c = 2, for n = 4…8, and at
  the lowest h the config allows for which the claim says anything (h = c + 2: at h = c + 1 any sum
  holds the one honest share h − c asks for), unmasks a sum of fewer than h − c honest shares.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Mapping

import pytest

from secure_fed.crypto.secagg_graph import neighbour_graph
from secure_fed.crypto.secagg_protocol import SecAggSettings, round_params

Views = Mapping[int, frozenset[int] | None]  # honest node → the survivor set it answers with


def learnable(
    graph: Mapping[int, list[int]], t: int, colluders: frozenset[int], views: Views
) -> list[frozenset[int]]:
    """The smallest sets of honest sites whose summed input the server can strip of every mask."""
    honest = sorted(u for u in graph if u not in colluders)

    def answered_with(v: int, u: int) -> bool:  # v's answer treats u as a survivor
        view = views.get(v)
        return view is not None and u in view

    def key_known(u: int, w: int) -> bool:
        if u in colluders or w in colluders:
            return True
        return any(views.get(a) is not None and b not in views[a] for a, b in ((u, w), (w, u)))

    usable = {u for u in honest if sum(1 for v in graph[u] if v in colluders or answered_with(v, u)) >= t}
    seen: set[int] = set()
    found = []
    for u in honest:
        if u in seen:
            continue
        part, todo = {u}, [u]
        while todo:
            a = todo.pop()
            for w in graph[a]:
                if w not in colluders and w not in part and not key_known(a, w):
                    part.add(w)
                    todo.append(w)
        seen |= part
        if part <= usable:
            found.append(frozenset(part))
    return found


def _passes_partner_rules(
    u: int, view: frozenset[int], graph: Mapping[int, list[int]], t: int, h: int
) -> bool:
    survived = sum(1 for w in graph[u] if w in view)
    return survived + 1 >= h and survived >= t


def views_without_consistency(
    graph: Mapping[int, list[int]], t: int, h: int, colluders: frozenset[int]
) -> Iterator[Views]:
    """Each honest site answers any list of survivors among its partners that passes its own checks."""
    honest = sorted(u for u in graph if u not in colluders)
    options = []
    for u in honest:
        mine: list[frozenset[int] | None] = [None]
        for size in range(len(graph[u]) + 1):
            for chosen in itertools.combinations(graph[u], size):
                view = frozenset(chosen) | {u}
                if _passes_partner_rules(u, view, graph, t, h):
                    mine.append(view)
        options.append(mine)
    for choice in itertools.product(*options):
        yield dict(zip(honest, choice, strict=True))


def views_with_consistency(
    graph: Mapping[int, list[int]], t: int, h: int, colluders: frozenset[int], confirmers: int | None = None
) -> Iterator[Views]:
    """Each honest site confirms one set holding itself; it answers (if its partner checks pass) only
    for that set, with h of the set's members' confirmations over it: its honest confirmers and any
    colluder in it (colluders confirm anything). Confirmers who do not answer only reveal less, so
    every assignment the server can reach is dominated by one enumerated here: disjoint groups of
    honest confirmers, each with the set it confirmed; every other honest site silent.
    `confirmers`: the confirmations a site asks for (the code's h; fewer only to show what the rule
    is worth)."""
    nodes = sorted(graph)
    honest = [u for u in nodes if u not in colluders]
    needed = h if confirmers is None else confirmers
    smallest_group = needed - len(colluders)  # a group needs at least h − |C ∩ S| honest confirmers

    def families(free: list[int]) -> Iterator[list[tuple[frozenset[int], frozenset[int]]]]:
        if not free:
            yield []
            return
        lead, rest = free[0], free[1:]
        yield from families(rest)  # the lead confirms nothing that gets answered
        for size in range(max(0, smallest_group - 1), len(rest) + 1):
            for others in itertools.combinations(rest, size):
                group = frozenset((lead, *others))
                outside = [v for v in nodes if v not in group]
                for extra in range(len(outside) + 1):
                    for added in itertools.combinations(outside, extra):
                        confirmed = group | frozenset(added)
                        if len(group) + len(colluders & confirmed) < needed or len(confirmed) < h:
                            continue
                        left = [v for v in rest if v not in group]
                        for tail in families(left):
                            yield [(group, confirmed), *tail]

    for family in families(honest):
        views: dict[int, frozenset[int] | None] = dict.fromkeys(honest)
        for group, confirmed in family:
            for u in group:
                if _passes_partner_rules(u, confirmed, graph, t, h):
                    views[u] = confirmed
        yield views


def views_with_reflection(
    graph: Mapping[int, list[int]], t: int, h: int, colluders: frozenset[int]
) -> Iterator[Views]:
    """Confirmations that name neither sender nor recipient: the tag u sent a neighbour v over u's
    own set verifies at u as v's, so each honest site needs no other honest site to agree. It
    answers any set S holding itself (its partner checks passed) whose members it shares a
    confirmation key with (its neighbours, its own tags reflected) or that collude number h."""
    honest = sorted(u for u in graph if u not in colluders)
    nodes = sorted(graph)
    options = []
    for u in honest:
        others = [v for v in nodes if v != u]
        mine: list[frozenset[int] | None] = [None]
        for size in range(h - 1, len(others) + 1):
            for chosen in itertools.combinations(others, size):
                view = frozenset(chosen) | {u}
                confirmers = {u} | {v for v in chosen if v in graph[u] or v in colluders}
                if len(confirmers) >= h and _passes_partner_rules(u, view, graph, t, h):
                    mine.append(view)
        options.append(mine)
    for choice in itertools.product(*options):
        yield dict(zip(honest, choice, strict=True))


def _graph(n: int, seed: int) -> tuple[dict[int, list[int]], int]:
    params = round_params(n, 1, SecAggSettings())
    return neighbour_graph(list(range(n)), params.degree, random.Random(seed)), params.threshold


def _smallest_sum(n: int, h: int, c: int, search, seed: int = 0, **rule: int) -> int | None:  # noqa: ANN001
    """The fewest honest shares in any sum the search lets the server strip (None: none)."""
    graph, t = _graph(n, seed)
    colluders = frozenset(range(n - c, n))
    smallest = None
    for views in search(graph, t, h, colluders, **rule):
        for found in learnable(graph, t, colluders, views):
            if smallest is None or len(found) < smallest:
                smallest = len(found)
    return smallest


def test_without_the_consistency_step_split_views_unmask_two_honest_shares_at_five_sites() -> None:
    """The review's attack, found by the search: at 5 sites (h = 4, c = 1) some view assignment
    lets the server strip a sum of 2 < h − c = 3 honest shares."""
    assert _smallest_sum(5, h=4, c=1, search=views_without_consistency) == 2


def test_with_fewer_confirmations_the_split_comes_back() -> None:
    """What the confirmations are worth: a site that asked only for its own confirmation and one more
    (which the colluder gives for any set) would be back to trusting its own view, and the search
    finds the split again. (At 5 sites h − 1 = 3 would still hold: two honest confirmers of one set of
    h sites share a view, and their pairwise masks with the rest link the groups.)"""
    assert _smallest_sum(5, h=4, c=1, search=views_with_consistency, confirmers=2) == 2
    assert _smallest_sum(5, h=4, c=1, search=views_with_consistency, confirmers=3) == 3


def test_with_reflectable_confirmations_the_split_comes_back_at_five_sites() -> None:
    """The direction binding has teeth: with tags that name neither sender nor recipient the search
    finds the review's attack at the hospital configuration (5 sites, h = 4, c = 1): a sum of two
    honest shares where the ledger prices h − c = 3."""
    assert _smallest_sum(5, h=4, c=1, search=views_with_reflection) == 2


@pytest.mark.parametrize(("n", "h", "c"), [(4, 3, 1), (6, 5, 1), (5, 3, 2), (6, 4, 2), (7, 5, 2)])
def test_reflection_gives_back_all_the_consistency_step_took(n: int, h: int, c: int) -> None:
    """Reflected confirmations let the server reach what it reached with no consistency step at all:
    wherever that rule held (these sizes, by counting), it holds for want of the attack, not because
    of the confirmations."""
    assert _smallest_sum(n, h, c, views_with_reflection) == _smallest_sum(n, h, c, views_without_consistency)


CASES = (
    [(n, n - 1, 1) for n in range(4, 9)] + [(n, n - 2, 2) for n in range(5, 9)] + [(n, 3, 1) for n in (5, 6)]
)


@pytest.mark.parametrize(("n", "h", "c"), CASES)
def test_with_the_consistency_step_no_view_assignment_unmasks_fewer_than_h_minus_c(
    n: int, h: int, c: int
) -> None:
    for seed in range(3 if n >= 8 else 1):  # sparse graphs (8 sites: degree 6) differ by draw
        smallest = _smallest_sum(n, h, c, views_with_consistency, seed)
        assert smallest is None or smallest >= h - c, (n, h, c, seed, smallest)
