"""GridTransport's own pull loop: soon after the push, backing off (a fixed short interval in
simulation), honouring the timeout."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from flwr.superlink.grid import InMemoryGrid

from secure_fed.server import transports
from secure_fed.server.transports import (
    FIRST_POLL_S,
    MAX_POLL_S,
    SIMULATION_POLL_S,
    GridTransport,
    poll_schedule,
)


class FakeGrid:
    """Replies appear after a given number of pulls; `None` means never."""

    def __init__(self, ready_after: list[int | None]) -> None:
        self.ready_after = ready_after
        self.pulls = 0

    def push_messages(self, messages: list[object]) -> list[str]:
        return [f"m{i}" for i, _ in enumerate(messages)]

    def pull_messages(self, ids: set[str]) -> list[SimpleNamespace]:
        self.pulls += 1
        out = []
        for i, after in enumerate(self.ready_after):
            if f"m{i}" in ids and after is not None and self.pulls >= after:
                out.append(SimpleNamespace(metadata=SimpleNamespace(reply_to_message_id=f"m{i}")))
        return out


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """A fake clock: sleeps are recorded and advance it, nothing really waits."""
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    monkeypatch.setattr(transports.time, "sleep", sleep)
    monkeypatch.setattr(transports.time, "monotonic", lambda: now[0])
    return slept


def test_collects_every_reply_polling_soon_then_backing_off(clock: list[float]) -> None:
    grid = FakeGrid([1, 4, 20])
    replies = GridTransport(grid).send_and_receive([object()] * 3)  # type: ignore[arg-type]
    assert sorted(r.metadata.reply_to_message_id for r in replies) == ["m0", "m1", "m2"]
    assert grid.pulls == 20 and len(clock) == 19
    # Flower's own loop sleeps 3 s (HTTP Grid) or 0.1 s (simulation) before its second pull
    assert clock[0] == FIRST_POLL_S <= 0.01
    assert clock == sorted(clock) and max(clock) == MAX_POLL_S


def test_timeout_returns_what_arrived(clock: list[float]) -> None:
    grid = FakeGrid([2, None])
    replies = GridTransport(grid, timeout=3.0).send_and_receive([object()] * 2)  # type: ignore[arg-type]
    assert [r.metadata.reply_to_message_id for r in replies] == ["m0"]
    assert sum(clock) == pytest.approx(3.0)  # waited out the timeout, not a poll interval beyond it


def test_simulation_polls_at_a_short_fixed_interval(clock: list[float]) -> None:
    """In simulation a pull is an in-memory lookup: no growing sleep, so a reply is seen within
    SIMULATION_POLL_S of its arrival, however late it comes (issue 53)."""

    class FakeInMemoryGrid(InMemoryGrid):
        def __init__(self, ready_after: list[int | None]) -> None:  # no LinkState: FakeGrid's pulls
            self.fake = FakeGrid(ready_after)

        def push_messages(self, messages: object) -> list[str]:
            return self.fake.push_messages(messages)  # type: ignore[arg-type]

        def pull_messages(self, ids: object) -> list[SimpleNamespace]:
            return self.fake.pull_messages(ids)  # type: ignore[arg-type]

    grid = FakeInMemoryGrid([1, 4, 60])
    replies = GridTransport(grid).send_and_receive([object()] * 3)  # type: ignore[arg-type]
    assert len(replies) == 3 and grid.fake.pulls == 60
    assert clock == [SIMULATION_POLL_S] * 59 and SIMULATION_POLL_S <= 0.01


def test_a_deployment_grid_backs_off_to_a_cap_fit_for_a_superlink() -> None:
    # HttpGrid (a request to the SuperLink per pull) and any grid not in this process
    first, longest, growth = poll_schedule(object())
    assert first <= 0.01 and growth > 1 and 0.1 <= longest <= 1.0
    assert poll_schedule(InMemoryGrid.__new__(InMemoryGrid)) == (SIMULATION_POLL_S, SIMULATION_POLL_S, 1.0)
