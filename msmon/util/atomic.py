"""Atomic file writes: a reader sees the old content or the new one, never half of it."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def write_temp(directory: Path, name: str, data: bytes, mode: int | None = None, fsync: bool = True) -> Path:
    """A temporary file holding ``data`` in ``directory`` (to be renamed or linked into place)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if fsync:
                os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, fsync: bool = True) -> None:
    """Replace ``path`` with ``data`` (temporary file, fsync, rename), keeping its permissions."""
    target = Path(path)
    mode = target.stat().st_mode & 0o7777 if target.exists() else None
    tmp = write_temp(target.parent, target.name, data, mode, fsync)
    try:
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str, fsync: bool = True) -> None:
    """Replace ``path`` with UTF-8 ``text`` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"), fsync)


def atomic_write_json(path: str | os.PathLike[str], data: object, fsync: bool = True) -> None:
    """Write ``data`` as indented JSON atomically (NaN and Infinity kept as Python's json tokens)."""
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n", fsync=fsync)


def rewrite_json(path: Path, data: object) -> None:
    """Replace ``path`` with compact JSON, for a file that one thread alone rewrites often (a heartbeat): a fixed
    temporary name beside it, no fsync, C-encoded JSON (an indent would take the pure-Python encoder)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(json.dumps(data, default=str).encode("utf-8"))
    os.replace(tmp, path)
