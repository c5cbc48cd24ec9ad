"""A stop signal that lands where Python cannot raise (a finaliser, a weakref or module-lock
callback) is kept for the run's safe points and printed nowhere: seen once in CI, a Ctrl-C during an
import printed "Exception ignored in: <function _get_module_lock.<locals>.cb>" and a traceback,
although the run then stopped as it should (a CLI error is one line, never a traceback)."""

from __future__ import annotations

import gc
import sys
from typing import Any

import pytest

from secure_fed.protocol import stops


class _SignalLandsInFinaliser:
    """Stands in for a finaliser running when the signal arrives: its handler raises there."""

    def __del__(self) -> None:
        stops.raise_remembered(KeyboardInterrupt())


def test_a_stop_raised_where_python_cannot_raise_is_kept_and_printed_nowhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    heard: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", heard.append)
    try:
        victim = _SignalLandsInFinaliser()
        del victim
        gc.collect()
        assert heard == [], f"the stop reached the unraisable hook: {[h.exc_value for h in heard]}"
        with pytest.raises(KeyboardInterrupt):  # the next safe point raises it
            stops.raise_pending_stop()
    finally:
        stops.forget_stop()


def test_any_other_unraisable_error_still_reaches_the_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    heard: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", heard.append)

    class Broken:
        def __del__(self) -> None:
            raise ValueError("a finaliser's own error")

    try:
        with pytest.raises(KeyboardInterrupt):
            stops.raise_remembered(KeyboardInterrupt())  # a stop pending meanwhile changes nothing
        broken = Broken()
        del broken
        gc.collect()
        assert [type(h.exc_value) for h in heard] == [ValueError]
    finally:
        stops.forget_stop()
