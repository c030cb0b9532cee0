"""Every rank's Python stacks on request: ``stacks/rank_N.txt`` in the run directory.

Each rank registers Python's ``faulthandler`` on ``STACK_SIGNAL`` (SIGUSR1) with that file at its start: the
handler is C code that writes every thread's stack even while the training thread is blocked inside MindSpore
(a collective, the device) or holds the GIL. When the run stalls, the ``msmon run`` parent appends a header and
sends the signal to each rank it started on this machine, then reads what the rank wrote. A stopped process
(SIGSTOP) cannot run its handler: its stack is missing and the alert says it is stopped.
"""

from __future__ import annotations

import faulthandler
import logging
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import psutil

import msmon
from msmon import layout
from msmon.errors import describe

logger = logging.getLogger("msmon")

STACK_SIGNAL = signal.SIGUSR1
CAPTURE_S = 3.0  # the ranks get this long to write their stacks
_HEADER = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-fA-F]+) \(most recent call first\):")
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')
_MSMON = str(Path(msmon.__file__).resolve().parent)

_registered: IO[str] | None = None  # the open stacks file of this rank (kept open for the process's life)


def register(run_dir: Path, rank: int) -> None:
    """Rank side: dump every thread's stack into ``stacks/rank_N.txt`` on ``STACK_SIGNAL`` (a warning when the
    file cannot be opened: the rank trains without it)."""
    global _registered
    path = layout.rank_stacks(run_dir, rank)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a", encoding="utf-8")  # noqa: SIM115 - faulthandler writes to its fd until exit
    except OSError as exc:
        logger.warning("msmon: cannot open %s: %s (no stacks for this rank when the run stalls)", path, describe(exc))
        return
    faulthandler.register(STACK_SIGNAL, file=handle, all_threads=True, chain=False)
    _registered = handle


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line} in {self.function}"


def parse(text: str) -> dict[int, list[Frame]]:
    """Thread ident -> its frames, innermost first, of faulthandler's output (the last dump of each thread)."""
    threads: dict[int, list[Frame]] = {}
    current: list[Frame] | None = None
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header:
            current = threads[int(header.group(1), 16)] = []
            continue
        frame = _FRAME.match(line)
        if frame and current is not None:
            current.append(Frame(frame.group(1), int(frame.group(2)), frame.group(3)))
        elif not line.strip():
            current = None
    return threads


def innermost_frame(text: str, thread: int | None) -> Frame | None:
    """The innermost frame outside msmon of the training thread (``thread``; the longest stack when unknown)."""
    threads = parse(text)
    frames = threads.get(thread) if thread is not None else None
    if frames is None and threads:
        frames = max(threads.values(), key=len)
    return next((f for f in frames or [] if not f.file.startswith(_MSMON)), None)


def signal_ranks(run_dir: Path, ranks: dict[int, psutil.Process], header: str) -> dict[int, int]:
    """Parent side: append ``header`` to each live, not stopped rank's stacks file on this machine and signal the
    rank; rank -> the file's size before the rank writes (what ``collect`` reads from)."""
    offsets: dict[int, int] = {}
    for rank, proc in ranks.items():
        path = layout.rank_stacks(run_dir, rank)
        try:
            if proc.status() == psutil.STATUS_STOPPED or not path.exists():
                continue
            with open(path, "a", encoding="utf-8") as handle:
                handle.write(f"\n--- {header} ---\n")
            offsets[rank] = path.stat().st_size
            proc.send_signal(STACK_SIGNAL)
        except (OSError, psutil.Error) as exc:
            logger.debug("msmon: no stack of rank %d: %s", rank, describe(exc))
    return offsets


def collect(run_dir: Path, offsets: dict[int, int]) -> dict[int, str]:
    """Rank -> what was written to its stacks file after ``offsets[rank]``, once the file grew and stopped growing
    (within ``CAPTURE_S``; a rank that wrote nothing is left out). The writer may be on another machine."""
    texts: dict[int, str] = {}
    deadline, sizes = time.monotonic() + CAPTURE_S, dict(offsets)
    while offsets and time.monotonic() < deadline:
        time.sleep(0.2)
        for rank in list(offsets):
            path = layout.rank_stacks(run_dir, rank)
            try:
                size = path.stat().st_size
            except OSError:
                continue
            if size > offsets[rank] and size == sizes[rank]:  # grew, then stopped growing: the dump is complete
                with open(path, "rb") as handle:
                    handle.seek(offsets.pop(rank))
                    texts[rank] = handle.read().decode("utf-8", errors="replace")
            sizes[rank] = size
    return texts


def capture(run_dir: Path, ranks: dict[int, psutil.Process], header: str) -> dict[int, str]:
    """``signal_ranks`` then ``collect``: the stack text each rank of this machine wrote."""
    return collect(run_dir, signal_ranks(run_dir, ranks, header))


def remove_unused(run_dir: Path, ended: list[int]) -> None:
    """At the end of the run: the empty stacks files of the ranks that ``ended`` and an empty ``stacks/``."""
    folder = Path(run_dir) / layout.STACKS
    for rank in ended:
        path = layout.rank_stacks(run_dir, rank)
        try:
            if path.stat().st_size == 0:
                path.unlink()
        except OSError:
            continue
    try:
        folder.rmdir()
    except OSError:
        pass
