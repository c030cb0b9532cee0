"""File-system helpers: msmon's home, an advisory lock, sizes, the tail of a log file, the file system a path is on."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def msmon_home() -> Path:
    """``$MSMON_HOME`` or ``~/.msmon``: where msmon keeps its own state (boards, board logs)."""
    env = os.environ.get("MSMON_HOME")
    return Path(env).expanduser() if env else Path.home() / ".msmon"


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


def tail_lines(path: Path, lines: int, start: int = 0) -> list[str]:
    """The last non-empty lines of ``path`` written after byte ``start``."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(start, os.path.getsize(path) - 16384))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return [ln for ln in text.splitlines() if ln.strip()][-lines:]


def file_size(path: Path) -> int:
    """The size of ``path`` in bytes, 0 when it is missing."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def subdirs(path: Path) -> list[Path]:
    """The directories directly in ``path``, sorted (symlinks not followed; [] when unreadable)."""
    try:
        return sorted(Path(e.path) for e in os.scandir(path) if e.is_dir(follow_symlinks=False))
    except OSError:
        return []


#: Kernel file systems that look like directories but hold no files of a program's (Linux's pseudo file systems).
PSEUDO_FILESYSTEMS = frozenset({
    "proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs", "pstore", "bpf",
    "configfs", "fusectl", "mqueue", "binfmt_misc", "efivarfs", "autofs", "rpc_pipefs", "nsfs", "selinuxfs",
})
MOUNTINFO = Path("/proc/self/mountinfo")


def filesystem_type(path: Path) -> str | None:
    """The type of the file system mounted where ``path`` (an existing path) lies, as the kernel names it
    (``ext4``, ``tmpfs``, ``proc``, ...); None where that cannot be read (no ``/proc/self/mountinfo``)."""
    try:
        lines = MOUNTINFO.read_text(encoding="utf-8", errors="replace").splitlines()
        real = os.path.realpath(path)
    except OSError:
        return None
    best, found = "", None
    for line in lines:
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        mount = fields[4].replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
        inside = real == mount or real.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):
            best, found = mount, line.split(" - ", 1)[1].split()[0]
    return found


class LineFile:
    """A file msmon appends whole lines to: a write that fails part-way (a full disk) is cut back, so the file
    always ends with a complete line; a file deleted under it (its directory removed) is noticed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    @property
    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def append(self, data: bytes) -> None:
        """Write ``data`` completely or not at all (OSError then)."""
        start = self.size
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view):]
        except OSError:
            with contextlib.suppress(OSError):  # a regular file is cut back (needs no space); a device cannot be
                os.ftruncate(self._fd, start)
            raise

    def sync(self) -> None:
        os.fsync(self._fd)

    def deleted(self) -> bool:
        """Whether the file was removed from its directory since it was opened (writes then go nowhere)."""
        return os.fstat(self._fd).st_nlink == 0

    def close(self) -> None:
        os.close(self._fd)


class SpaceReserve:
    """Disk space held from the start of a run (a small file) and released for its final accounting (run.json,
    the result files), so a disk that fills up during the run cannot stop them."""

    def __init__(self, path: Path, size: int = 64 * 1024) -> None:
        self.path: Path | None = path
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.posix_fallocate(fd, 0, size)
            finally:
                os.close(fd)
        except OSError:  # no space even now: nothing is held, the accounting tries its luck
            with contextlib.suppress(OSError):
                path.unlink()
            self.path = None

    def release(self) -> None:
        if self.path is not None:
            self.path.unlink(missing_ok=True)
            self.path = None
