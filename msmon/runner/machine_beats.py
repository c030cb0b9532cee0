"""One machine's ranks' heartbeats gathered into one file of the shared run directory (a run over several machines).

At 1,024 ranks, each rank rewriting ``heartbeats/rank_N.json`` on the shared run directory every second is a
thousand atomic renames a second on the cluster file system, and node 0's watcher reads a thousand files a poll. In
a run over several machines the ranks rewrite their files on their machine's own disk instead
(``layout.local_heartbeats``), and that machine's ``msmon run`` rewrites ``heartbeats/node_K.json`` (its ranks'
heartbeats, as they wrote them) once a second: one rename a second per machine, and one file per machine for node
0's watcher, ``msmon status`` and ``msmon runs`` (``ops.ranks.read_heartbeats`` reads both kinds). A machine that
stops gathering (it died) stops its ranks' ``alive`` with it: they are named as not responding, as a frozen rank is.
"""

from __future__ import annotations

import logging
import shutil
import socket
import time
from pathlib import Path

from msmon import layout
from msmon.errors import describe
from msmon.ops.ranks import read_rank_files
from msmon.util.atomic import rewrite_json

logger = logging.getLogger("msmon")

GATHER_S = 1.0  # how often the machine's file is rewritten (the ranks rewrite theirs as often)


class MachineBeats:
    """``gather()`` on every poll of the supervising loop (it rewrites at most every ``GATHER_S``), ``clear()`` at a
    new attempt, ``close()`` at the end (the ranks' last states gathered, the local files removed)."""

    def __init__(self, run_dir: Path, node: int, local: Path) -> None:
        self.local = Path(local)
        self.path = layout.machine_heartbeat(Path(run_dir), node)
        self._node = node
        self._host = socket.gethostname()
        self._next = 0.0
        self._warned = False

    def gather(self, *, now: bool = False) -> None:
        """Rewrite the machine's file from its ranks' local files when due (``now``: whatever the time)."""
        if not now and time.monotonic() < self._next:
            return
        self._next = time.monotonic() + GATHER_S
        beats = read_rank_files(self.local)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            rewrite_json(self.path, {"node": self._node, "host": self._host, "gathered": time.time(),
                                     "ranks": {str(rank): beat for rank, beat in beats.items()}})
        except OSError as exc:  # a monitor never breaks training
            if not self._warned:
                self._warned = True
                logger.warning("msmon: cannot write %s: %s (training continues)", self.path, describe(exc))

    def clear(self) -> None:
        """A new attempt: the earlier attempt's heartbeats of this machine go (a dead rank's would look hung)."""
        shutil.rmtree(self.local, ignore_errors=True)
        self.path.unlink(missing_ok=True)
        self._next = 0.0

    def close(self) -> None:
        self.gather(now=True)
        shutil.rmtree(self.local, ignore_errors=True)
