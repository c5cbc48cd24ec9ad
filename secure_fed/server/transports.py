"""Transports the server protocol runs over: Flower's Grid (simulation or deployment) and a direct
in-process engine for tests and quick experiments. Both carry the same payload dicts."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from flwr.app import Message
from flwr.serverapp import Grid
from flwr.superlink.grid import InMemoryGrid

from secure_fed.crypto.transport import decode_payload, encode_payload
from secure_fed.protocol.failures import SITE_ERROR, UNKNOWN, Failure, classify, failure
from secure_fed.protocol.wire import from_records, to_records

log = logging.getLogger(__name__)
# Flower's own log (its file handler is flower/simulation.log under `secure-fed run`): the one
# place a framework's raw error text is kept, for whoever debugs the run on that machine
raw_log = logging.getLogger("flwr")

Handler = Callable[[str, dict[str, Any]], dict[str, Any]]


# Flower's own send_and_receive sleeps a fixed interval between pulls — 3 s on a deployment's
# HTTP Grid, 0.1 s in simulation — so every round trip costs at least that, and SecAgg+'s four
# round trips per sum paid it four times (benchmarks/secagg_flower.py).
#
# Flower 1.42's Grid offers no readiness to wait on: no blocking pull, no condition, no event.
# InMemoryGrid.pull_messages is a lookup in the InMemoryLinkState under a plain lock (the engine's
# injector thread stores each reply there with store_message_res, notifying no one), and
# HttpGrid.pull_messages is one request to the SuperLink. So the transport polls, at the rate
# each grid's pull affords:
# - simulation (InMemoryGrid, the same process): a pull checks each pending message in memory
#   (tens of microseconds a message, under the state's lock and the GIL the engine's threads
#   share), so poll at a short fixed interval: a reply is seen at most SIMULATION_POLL_S after it
#   is stored, where a growing sleep saw a reply ready at ~90 ms at 104 or 161 ms (issue 53);
# - any other grid (a deployment's HttpGrid: a request to the SuperLink each): poll soon, then
#   back off ×POLL_BACKOFF to MAX_POLL_S, a few pulls a second at most while sites train.
SIMULATION_POLL_S = 0.005
FIRST_POLL_S, MAX_POLL_S, POLL_BACKOFF = 0.005, 0.25, 1.5


def poll_schedule(grid: object) -> tuple[float, float, float]:
    """(first sleep, longest sleep, growth) between pulls on ``grid``: fixed and short in process,
    backing off where each pull is a request to a SuperLink."""
    if isinstance(grid, InMemoryGrid):
        return SIMULATION_POLL_S, SIMULATION_POLL_S, 1.0
    return FIRST_POLL_S, MAX_POLL_S, POLL_BACKOFF


def message_type(phase: str) -> str:
    return "train" if phase == "train" else f"query.{phase}"


class _Failures:
    """A transport's record of its sites' failures: the last one of each node (the orchestrator
    reads it to tell a lost worker from a refusal), and the console's one line per site and kind
    of failure (a dead worker fails every later message: the operator needs to read it once)."""

    def __init__(self, resume: str | None) -> None:
        self.resume = resume
        self.failures: dict[int, Failure] = {}
        self._told: set[tuple[str, str]] = set()

    def failed(self, node: int, who: str, phase: str, raw: str, default: str = UNKNOWN) -> dict[str, Any]:
        found = classify(raw)
        if found.kind == UNKNOWN:
            found = failure(default)
        self.failures[node] = found
        raw_log.info("%s: %s failed: %s", phase, who, raw)
        if (who, found.kind) not in self._told:
            self._told.add((who, found.kind))
            log.warning("%s", found.line(who, self.resume))
        return {"status": "error", "error": found.reason, "failure": found.kind}


class GridTransport(_Failures):
    """One Message per node and phase; a node whose reply is missing or an error counts as dropped.

    ``site_of``: the site a Flower node runs, where the runtime knows it before the node answers
    (the simulation's partition of each node). ``resume``: how the operator continues the run,
    appended to the console's line on a failure."""

    def __init__(
        self,
        grid: Grid,
        timeout: float | None = None,
        site_of: Callable[[int], str | None] | None = None,
        resume: str | None = None,
    ) -> None:
        super().__init__(resume)
        self.grid = grid
        self.timeout = timeout
        self.site_of = site_of or (lambda node: None)
        self.names: dict[int, str] = {}  # Flower node id → site, once the sites answered hello

    def name_sites(self, sites: Mapping[int, str]) -> None:
        """An operator reads site names, not Flower's node numbers, in the server's log."""
        self.names = dict(sites)

    def name(self, node: int) -> str:
        """The site node ``node`` runs, or its Flower id where no site name is known."""
        return self.names.get(node) or self.site_of(node) or f"Flower node {node}"

    def send_and_receive(self, messages: Iterable[Message]) -> list[Message]:
        """Push, then pull until every reply is in or `timeout` passes (None: wait for all)."""
        pending = set(self.grid.push_messages(messages))
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        replies: list[Message] = []
        wait, longest, growth = poll_schedule(self.grid)
        while pending:
            arrived = list(self.grid.pull_messages(pending))
            replies += arrived
            pending -= {m.metadata.reply_to_message_id for m in arrived}
            if not pending:
                break
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            time.sleep(wait if left is None else min(wait, left))
            wait = min(wait * growth, longest)
        return replies

    def exchange(self, phase: str, requests: Mapping[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
        messages = [
            Message(to_records(payload), dst_node_id=node, message_type=message_type(phase))
            for node, payload in requests.items()
        ]
        replies: dict[int, dict[str, Any]] = {}
        for reply in self.send_and_receive(messages):
            node = reply.metadata.src_node_id
            if reply.has_error():
                replies[node] = self.failed(node, self.name(node), phase, str(reply.error.reason))
                continue
            replies[node] = from_records(reply.content)
        return replies


class InProcessTransport(_Failures):
    """Calls each node's handler directly, still through the byte codec so that what the server
    holds is exactly what would have crossed the wire. `drop[phase]` lists nodes that vanish."""

    def __init__(self, handlers: Mapping[int, Handler], drop: Mapping[str, set[int]] | None = None) -> None:
        super().__init__(None)
        self.names: dict[int, str] = {}
        self.handlers = dict(handlers)
        self.drop = {k: set(v) for k, v in (drop or {}).items()}
        self.bytes_received: dict[int, int] = {n: 0 for n in handlers}
        self.bytes_sent: dict[int, int] = {n: 0 for n in handlers}

    def exchange(self, phase: str, requests: Mapping[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
        replies: dict[int, dict[str, Any]] = {}
        for node, payload in requests.items():
            if node in self.drop.get(phase, set()):
                continue
            wire_in = encode_payload(payload)
            self.bytes_sent[node] += len(wire_in)
            try:
                reply = self.handlers[node](phase, decode_payload(wire_in))
            except Exception as err:  # a failing site is a dropped site, as over the network
                raw = f"{type(err).__module__}.{type(err).__name__}: {err}"
                reply = self.failed(node, self.names.get(node, f"node {node}"), phase, raw, SITE_ERROR)
            wire_out = encode_payload(reply)
            self.bytes_received[node] += len(wire_out)
            replies[node] = decode_payload(wire_out)
        return replies

    def name_sites(self, sites: Mapping[int, str]) -> None:
        self.names = dict(sites)
