"""The steps a probe measured (docs/probe.md): their times are the profiler's, not the run's, so the detectors of
step times (throughput_drop, slow_step) do not judge them, live and in replay alike."""

from __future__ import annotations

import os
from pathlib import Path

from msmon import layout, probe
from msmon.util.jsonfiles import read_objects

#: Detectors that judge step times: a profiled step's time (and the next step's, which carries the profiler's
#: analysis) is the probe's, not the run's.
TIMING_DETECTORS = frozenset({"throughput_drop", "slow_step"})


class ProbedSteps:
    """The windows the ranks' marks name (read at the start: an earlier attempt's too), and, ``live``, the current
    request while a rank has not marked it (any step may be in its window then). One ``os.stat`` a look when the
    request file has not changed."""

    def __init__(self, run_dir: Path, *, live: bool) -> None:
        self.run_dir = Path(run_dir)
        self.live = live
        self.request: probe.ProbeRequest | None = None  # live: the current request while some rank has not marked it
        self._seen: tuple[int, int, int] | None = None
        marks = read_objects(sorted((self.run_dir / layout.PROBES).glob("*/rank_*.json")), probe.ProbeMark.from_json)
        self._windows = [(m.first_step, m.last_step) for m in marks
                         if m.first_step is not None and m.last_step is not None]

    def probed(self, step: int) -> bool:
        """Whether ``step``'s time belongs to a probe: inside a window or right after one, or (live) any step while a
        request is not marked by all its ranks."""
        self.look()
        if self.request is not None:
            return True
        return bool(self._windows) and any(first <= step <= last + 1 for first, last in self._windows)

    def look(self) -> None:
        """Live: read the request when its file changed, and its marks while a rank has not marked it."""
        if not self.live:
            return
        try:
            stat = os.stat(self.run_dir / layout.PROBE_REQUEST)
        except OSError:
            return
        key = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        if key != self._seen:
            self._seen = key
            try:
                self.request = probe.read_request(self.run_dir)
            except (OSError, ValueError):
                self.request = None
        if self.request is None:
            return
        marks = probe.read_marks(self.run_dir, self.request.id)
        if probe.pending_ranks(self.request, marks, probe.world_size(self.run_dir)):
            return
        self._windows.extend((m.first_step, m.last_step) for m in marks.values()
                             if m.first_step is not None and m.last_step is not None)
        self.request = None
