"""A site's private DP files: its noise key and what it has already released.

Writes are atomic (temporary file in the same folder, fsync, rename, fsync of the folder): a crash
leaves either the old file or the new one, never a torn one that a restarted site would misread as
"nothing released yet" and then release again with new noise.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from secure_fed.dp.keystream import NOISE_KEY_BYTES


class NoiseKeyError(RuntimeError):
    """The site's noise key file exists but cannot be used; the message names the file and the fix."""


def _fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace `path` with `data` atomically; the file is created with permissions `mode`."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), mode)
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_folder(path.parent)  # the rename itself must survive a power cut


def load_or_create_secret(path: Path, what: str, if_lost: str) -> bytes:
    """A site secret of 32 random bytes, created on first use (mode 0600, atomically). A file that
    exists but is not a 32-byte key is refused, not silently replaced: it may be a restore gone
    wrong, or someone else's file. `what` names the key in errors, `if_lost` says what replacing
    it costs."""
    path = Path(path)
    try:
        key = path.read_bytes()
    except FileNotFoundError:
        key = os.urandom(NOISE_KEY_BYTES)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, key, 0o600)
        return key
    except OSError as error:
        raise NoiseKeyError(
            f"cannot read the {what} {path}: {error.strerror or error}. It must be a regular "
            "file owned and readable by the site's user (chmod 600); fix that, or move it away to "
            f"have the site create a new key at its next start ({if_lost})."
        ) from None
    if len(key) != NOISE_KEY_BYTES:
        found = "it is empty" if not key else f"it holds {len(key)} bytes"
        raise NoiseKeyError(
            f"the {what} {path} must be exactly {NOISE_KEY_BYTES} bytes but {found}. "
            "Restore it from the site's backup, or delete it to have the site create a new one at "
            f"its next start ({if_lost})."
        )
    return key


def load_or_create_noise_key(path: Path) -> bytes:
    """The site's secret DP noise key. It is one input of every release key (with fresh OS
    randomness), so it is needed only for new releases."""
    return load_or_create_secret(path, "DP noise key", "past releases do not depend on it")
