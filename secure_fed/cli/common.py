"""What every `secure-fed` command shares: its group class (one-line errors, help as whole
sentences), the console, one-line failures, config loading and the stop signals. The lab's
command line (secure_fed/lab/cli.py) borrows these too."""

from __future__ import annotations

import contextlib
import inspect
import shutil
import signal
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import click
import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text
from typer.core import TyperGroup

from secure_fed.config import ConfigError, RunConfig, load_config
from secure_fed.launch.console import Terminated
from secure_fed.protocol.stops import forget_stop, raise_remembered

_OS_FIXES: tuple[tuple[type[OSError], str], ...] = (
    (PermissionError, "fix its permissions or choose a path you can write to"),
    (FileNotFoundError, "correct the path or create the folder it should be in"),
    (NotADirectoryError, "a part of the path is a file, not a folder: choose another path"),
    (IsADirectoryError, "it is a folder: give a file name"),
    (FileExistsError, "it exists already: choose a new path"),
)


def os_error_line(err: OSError) -> str:
    """One operator-facing line for a file-system error: the path, the reason and the fix."""
    if isinstance(err, shutil.SameFileError):
        return f"{err}; choose a different destination"
    fix = next((hint for kind, hint in _OS_FIXES if isinstance(err, kind)), "check the path and the disk")
    if err.filename is None:
        return f"{err}; {fix}"
    return f"{err.filename}: {err.strerror or err}; {fix}"


def whole_sentences(text: str) -> str:
    """Help as sentences: a docstring's paragraphs without their line breaks (rich keeps them in
    the command list and in later paragraphs, where they cut sentences and example commands in
    two), except before an `Example:` line; and "[" escaped, which rich read as markup ("[deploy]"
    vanished from a help line)."""
    paragraphs = []
    for paragraph in inspect.cleandoc(text).split("\n\n"):
        lines: list[str] = []
        for line in paragraph.splitlines():
            if lines and not line.startswith("Example:"):
                lines[-1] += " " + line.strip()
            else:
                lines.append(line.strip())
        paragraphs.append("\n".join(lines))
    return escape("\n\n".join(paragraphs))


class Commands(TyperGroup):
    """Commands refuse the errors they foresee with their own message; a file-system error none of
    them foresaw (an output folder that cannot be written, a path that is a file) is still the
    operator's to fix, so it gets one line naming the path, never a traceback. Their help is
    printed as whole sentences (`whole_sentences`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for command in self.commands.values():
            if getattr(command, "whole_sentences", False):  # escaped once, never twice
                continue
            command._whole_sentences = True  # type: ignore[attr-defined]
            if command.help:
                command.help = whole_sentences(command.help)
            for param in command.params:
                if getattr(param, "help", None):
                    param.help = escape(param.help)  # type: ignore[attr-defined]

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except OSError as err:
            fail(os_error_line(err))


# soft_wrap: a path is printed whole on one line (a hard wrap at the terminal's width cut run
# folders in two in a captured log, where no one can copy them back)
# emoji off: a `path:100:` in a message is rich's emoji code :100:, and must print as digits
console = Console(stderr=True, soft_wrap=True, emoji=False)


def say(message: str) -> None:
    # plain text: a config table's name ("[dp]") is what the operator must read, not markup
    console.print(message, markup=False, highlight=False, soft_wrap=True)


def fail(message: str, code: int = 2) -> None:
    # Not wrapped (a log line per problem, greppable) and not read as markup (paths, "[data]").
    console.print(Text.assemble(("error:", "red"), " ", message), highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _config_problem(problem: str, path: Path | None, overrides: dict[str, Any]) -> str:
    """`file: key: what is wrong; fix` for one line of a ConfigError."""
    key = problem.split(": ", 1)[0]
    fix = ""
    if ": unknown key" in problem:  # the nearest known key, if any, is already named
        fix = "; remove or respell it (secure_fed/config/ defines every key)"
    elif problem.endswith("no such config file"):
        fix = "; pass an existing TOML file to --config"
    elif path is not None and problem.startswith(f"{path}: ") and "(at line" in problem:
        fix = "; fix the TOML there"
    elif overrides.get(key) is not None:
        fix = " (set on the command line)"
    if path is None or problem.startswith(f"{path}: ") or overrides.get(key) is not None:
        return problem + fix
    return f"{path}: {problem}{fix}"


def read_config(path: Path | None, overrides: dict[str, Any]) -> RunConfig:
    try:
        return load_config(path, overrides)
    except ConfigError as err:
        # one line per problem (greppable), each naming the file and key and, where it helps, the fix
        problems = str(err).replace("<root>: ", "").replace("Value error, ", "").splitlines()
        lines = [_config_problem(problem, path, overrides) for problem in problems]
        for line in lines[:-1]:
            console.print(Text.assemble(("error:", "red"), " ", line), highlight=False, soft_wrap=True)
        fail(lines[-1])
        raise  # unreachable
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        fail(f"{path}: cannot read the configuration ({reason}); pass a readable TOML file to --config")
        raise  # unreachable


def set_options(given: list[str]) -> dict[str, Any]:
    """`--set KEY=VALUE` options as config overrides, each VALUE read as a TOML value (a bare word
    that is not one, e.g. `site`, as the string)."""
    overrides: dict[str, Any] = {}
    for item in given:
        key, sep, raw = item.partition("=")
        key, raw = key.strip(), raw.strip()
        if not sep or not key or not raw:
            fail(f"--set {item}: give KEY=VALUE, e.g. --set dp.sample_rate=0.02")
        try:
            overrides[key] = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            overrides[key] = raw
    return overrides


def raise_terminated(signum: int, frame: object) -> None:
    raise_remembered(Terminated())


def raise_interrupted(signum: int, frame: object) -> None:
    raise_remembered(KeyboardInterrupt())


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """SIGTERM (a service manager's stop) ends a command as Ctrl-C does; both are kept for the
    run's safe points, should code that clears errors swallow them (secure_fed.protocol.stops). A Ctrl-C
    ignored at the start (a background job) stays ignored."""
    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, raise_terminated)}
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, raise_interrupted)
    try:
        yield
    finally:
        forget_stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def stopped(err: KeyboardInterrupt, how_to_go_on: str | None) -> NoReturn:
    """Ctrl-C or SIGTERM: what stopped the command and how to go on (None: said already), then its
    signal's exit code."""
    terminated = isinstance(err, Terminated)
    if how_to_go_on is not None:
        console.print(
            f"{'terminated' if terminated else 'interrupted'}; {how_to_go_on}",
            highlight=False,
            soft_wrap=True,
        )
    raise typer.Exit(128 + (signal.SIGTERM if terminated else signal.SIGINT)) from None


def real_data(cfg: RunConfig) -> bool:
    """Patients' records (a manifest or an annotation file), not a generated benchmark."""
    if cfg.data.kind == "imaging":
        return cfg.data.imaging.path is not None
    return cfg.data.source != "synthetic"
