"""This host's memory as a process sees it: the limit it will hit (its cgroup's, else the machine's) and what is
left of it, in MiB."""

from __future__ import annotations

from pathlib import Path

MIB = 2**20
#: cgroup v2 (memory.max / memory.current), then v1 (memory.limit_in_bytes / memory.usage_in_bytes)
_CGROUP_FILES = (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                 ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"))


def _read_bytes(path: str) -> int | None:
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max": no limit


def host_memory() -> tuple[float, float]:
    """(limit, available) in MiB: the tighter of this process's cgroup limit and the machine's memory."""
    import psutil

    machine = psutil.virtual_memory()
    limit, available = machine.total / MIB, machine.available / MIB
    for limit_file, usage_file in _CGROUP_FILES:
        cap, used = _read_bytes(limit_file), _read_bytes(usage_file)
        if cap is not None and used is not None and cap / MIB < limit:
            limit, available = cap / MIB, min(available, max(0.0, (cap - used) / MIB))
            break
    return limit, available
