"""A stop signal becomes a signed closing record, written only once the code it cut has unwound.

Both a deployed ServerApp (flwr-serverapp) and a deployed site's runner are stopped by SIGTERM /
SIGINT only. Signing inside the signal handler could land between a record's write and its chain
moving on (the log is written in the same thread), so the handler only raises `Stopped`; the record
is signed after the frames are gone, and then the handler that was there before (Flower's: it
reports the task's end and exits) runs as it would have.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

# The stop a signal handler raised, kept until its command has dealt with it: C code that clears
# every error (PyDict_GetItem, PyObject_HasAttr) can lose the exception if the signal lands while a
# Python `__hash__` or `__getattr__` it called is running (seen: a SIGTERM'd run finished its
# rounds and exited 0). `raise_pending_stop` at a run's safe points raises it again.
_pending: BaseException | None = None


def raise_remembered(stop: BaseException) -> NoReturn:
    """From a signal handler: raise `stop` where the process is, and keep it for the safe points."""
    global _pending
    _pending = stop
    if not getattr(sys.unraisablehook, "keeps_stops", False):
        sys.unraisablehook = _quiet_about_the_pending_stop(sys.unraisablehook)
    raise stop


def _quiet_about_the_pending_stop(previous: Callable[[Any], object]) -> Callable[[Any], None]:
    """Where Python cannot raise (a finaliser, a weakref or module-lock callback) it hands the stop
    to the unraisable hook, which prints "Exception ignored" and a traceback (seen in CI: a Ctrl-C
    during an import). That stop is pending and a safe point raises it, so it is printed nowhere;
    every other unraisable error goes to the hook that was there."""

    def hook(unraisable: Any) -> None:
        if _pending is None or unraisable.exc_value is not _pending:
            previous(unraisable)

    hook.keeps_stops = True  # type: ignore[attr-defined]
    return hook


def raise_pending_stop() -> None:
    """At a safe point (a round's start, before its checkpoint): a stop raised by a signal handler
    that has not reached the command that installed the handler is raised again here."""
    global _pending
    if _pending is not None:
        stop, _pending = _pending, None
        raise stop


def forget_stop() -> None:
    """The command that installed the handler has dealt with its stop: nothing is pending."""
    global _pending
    _pending = None


class Stopped(BaseException):
    """A stop signal, raised where the process was (not an Exception: nothing may swallow it)."""

    def __init__(self, signum: int, frame: Any) -> None:
        super().__init__(signum)
        self.signum, self.frame = signum, frame


@contextlib.contextmanager
def signed_on_stop(
    sign: Callable[[str], None], on_signal: Callable[[], None] | None = None
) -> Iterator[None]:
    """Within the block, SIGINT/SIGTERM raise `Stopped`; once unwound, `sign(signal name)` runs with
    further stop signals ignored (a second Ctrl-C must not cut the signing short), then the previous
    handler, else the signal's default action. `on_signal` runs inside the handler (keep it tiny)."""
    previous: dict[int, Any] = {}

    def handler(signum: int, frame: Any) -> None:
        if on_signal is not None:
            on_signal()
        raise_remembered(Stopped(signum, frame))

    if threading.current_thread() is threading.main_thread():  # signal.signal works there only
        for sig in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(sig) != signal.SIG_IGN:  # an ignored signal stays ignored
                previous[sig] = signal.signal(sig, handler)

    def restore() -> None:
        for sig, old in previous.items():
            if signal.getsignal(sig) in (handler, signal.SIG_IGN):
                signal.signal(sig, old)

    try:
        yield
    except Stopped as stop:
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)
        try:
            sign(signal.Signals(stop.signum).name)
        finally:
            restore()
        before = previous.get(stop.signum)
        if callable(before):
            before(stop.signum, stop.frame)
        else:  # the default action: end the process by that signal
            signal.signal(stop.signum, signal.SIG_DFL)
            os.kill(os.getpid(), stop.signum)
        raise SystemExit(128 + stop.signum) from None
    finally:
        forget_stop()
        restore()
