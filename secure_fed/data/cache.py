"""Generated data sets in the cache: made once per setting, safe when several processes race."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def made_once(folder: Path, make: Callable[[Path], object], marker: str = "manifest.jsonl") -> Path:
    """`folder / marker`, after `make(tmp)` wrote the folder's content into a private temporary
    folder renamed into place: a reader never sees a half-written data set, and a process that
    loses the race keeps the winner's (identical) one."""
    target = folder / marker
    if not target.exists():
        tmp = folder.with_name(f"{folder.name}.tmp{os.getpid()}-{os.urandom(4).hex()}")
        make(tmp)
        try:
            tmp.rename(folder)
        except OSError:  # another process made it first
            pass
    return target
