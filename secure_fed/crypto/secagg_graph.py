"""The k-regular masking graph of SecAgg+: a Harary (circulant) graph over a random node order."""

from __future__ import annotations

import random
from collections.abc import Sequence


def neighbour_graph(nodes: Sequence[int], degree: int, rng: random.Random) -> dict[int, list[int]]:
    """Each node's neighbours in a `degree`-regular graph; needs len(nodes) * degree even.

    Placing the nodes on a ring in random order and joining each to its degree/2 nearest on either
    side (plus the opposite node when degree is odd) gives a connected regular graph for any
    n > degree, and the random order keeps the server from choosing who masks with whom.
    """
    n = len(nodes)
    if len(set(nodes)) != n:
        raise ValueError("node ids must be distinct")
    if not 1 <= degree < n or (n * degree) % 2:
        raise ValueError(f"no {degree}-regular graph on {n} nodes")
    order = list(nodes)
    rng.shuffle(order)
    offsets = list(range(1, degree // 2 + 1))
    if degree % 2:
        offsets.append(n // 2)
    graph: dict[int, set[int]] = {node: set() for node in order}
    for i, node in enumerate(order):
        for off in offsets:
            other = order[(i + off) % n]
            graph[node].add(other)
            graph[other].add(node)
    return {node: sorted(peers) for node, peers in graph.items()}
