"""Small file helpers for ops: msmon's home, byte-exact atomic writes, a lock, sizes."""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def msmon_home() -> Path:
    """``$MSMON_HOME`` or ``~/.msmon``: where msmon keeps its own state (boards, board logs)."""
    env = os.environ.get("MSMON_HOME")
    return Path(env).expanduser() if env else Path.home() / ".msmon"


def write_temp(directory: Path, name: str, data: bytes, mode: int | None = None) -> Path:
    """A fsynced temporary file holding ``data`` in ``directory`` (to be renamed or linked into place)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically (temporary file, fsync, rename), keeping its permissions."""
    target = Path(path)
    mode = target.stat().st_mode & 0o7777 if target.exists() else None
    tmp = write_temp(target.parent, target.name, data, mode)
    try:
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``path`` (created when missing) for read-modify-write cycles."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def tree_size(path: Path) -> int:
    """Bytes held by the files under ``path``; symlinks count as links and are never followed."""
    total = 0
    for root, _dirs, files in os.walk(path, followlinks=False):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total
