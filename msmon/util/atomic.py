"""Atomic file writes: a reader sees the old content or the new one, never half of it."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def atomic_write_text(path: str | os.PathLike[str], text: str, fsync: bool = True) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory and a rename."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            if fsync:
                os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: str | os.PathLike[str], data: Any, fsync: bool = True) -> None:
    """Write ``data`` as indented JSON atomically (NaN and Infinity kept as Python's json tokens)."""
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n", fsync=fsync)
