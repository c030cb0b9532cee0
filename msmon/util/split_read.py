"""One large file read by several processes at once: line-aligned byte ranges, each handed to a function in its own
process (the first in this one), results in file order. For the files msmon reads whole (a long run's
metrics.jsonl): parsing JSON is the cost, and it splits."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
MIN_PART_BYTES = 32 * 1024 * 1024  # below this a part's process costs more than it saves
MAX_PARTS = 4


def line_ranges(path: Path, parts: int) -> list[tuple[int, int]]:
    """``parts`` (or fewer) byte ranges [start, stop) covering the file, each starting at a line's start."""
    size = os.path.getsize(path)
    cuts = [0]
    with open(path, "rb") as handle:
        for part in range(1, parts):
            handle.seek(max(size * part // parts, cuts[-1]))
            handle.readline()  # to the next line's start
            at = handle.tell()
            if cuts[-1] < at < size:
                cuts.append(at)
    return list(zip(cuts, [*cuts[1:], size], strict=True))


def parts_for(path: Path) -> int:
    """How many processes to read ``path`` with: one per core (at most ``MAX_PARTS``), one per MIN_PART_BYTES."""
    return max(1, min(os.cpu_count() or 1, MAX_PARTS, os.path.getsize(path) // MIN_PART_BYTES))


def map_ranges(read: Callable[[Path, int, int], T], path: Path, parts: int) -> list[T]:
    """``read(path, start, stop)`` of each range of ``line_ranges(path, parts)``, the first here, the others in
    fresh processes (spawned: nothing of this process's threads or locks is inherited)."""
    ranges = line_ranges(path, parts)
    if len(ranges) == 1:
        return [read(path, *ranges[0])]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(len(ranges) - 1, mp_context=multiprocessing.get_context("spawn")) as pool:
        later = [pool.submit(read, path, start, stop) for start, stop in ranges[1:]]
        first = read(path, *ranges[0])
        return [first, *(future.result() for future in later)]
