"""The profile probe: MindSpore's profiler (``mindspore.profiler.profile``, imported when a window begins) over the
window's steps, its output in ``profiles/<from>-<to>/rank_N/`` (the profiler's own layout, which MindStudio Insight
and msprof-analyze read) and msmon's summary beside it (msmon.engine.probe.profile_summary).

The profiler runs the way mindformers' ProfileMonitor runs it: a ``schedule`` of the window's length, ``step()`` at
each step end, its own analysis when the last step ends (on the training thread, as mindformers does: about a second
for five steps of the CPU quickstart). A window cut short stops it, which analyses what it recorded.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from msmon import layout
from msmon.engine.probe.profile_summary import StepBounds, summarize
from msmon.engine.probe.window import Window
from msmon.foreign import Profiler
from msmon.util.atomic import atomic_write_json

logger = logging.getLogger("msmon")


class ProbeFailure(Exception):
    """A probe could not measure (the training goes on; the message goes into the rank's mark)."""


class ProfileProbe:
    """One rank's profile of one window."""

    def __init__(self, run_dir: Path, rank: int, window: Window) -> None:
        self.rank = rank
        self.directory = layout.profile_dir(run_dir, window.first_step, window.last_step, rank)
        self.output = str(self.directory.relative_to(run_dir))
        self._steps = window.steps
        self._profiler: Profiler = None
        self._begun: dict[int, int] = {}
        self._bounds: list[StepBounds] = []

    def start(self) -> None:
        """ProbeFailure when MindSpore has no such profiler or it refuses to start."""
        try:
            from mindspore.profiler import profile, schedule, tensorboard_trace_handler
        except ImportError as exc:
            raise ProbeFailure(f"this MindSpore has no mindspore.profiler.profile ({exc})") from exc
        self.directory.mkdir(parents=True, exist_ok=True)
        self._profiler = profile(
            start_profile=False, schedule=schedule(wait=0, warmup=0, active=self._steps, repeat=1, skip_first=0),
            on_trace_ready=tensorboard_trace_handler(dir_name=str(self.directory)))
        self._profiler.start()

    def step_begin(self, step: int) -> None:
        self._begun[step] = time.time_ns()

    def step_end(self, step: int) -> None:
        self._bounds.append(StepBounds(step, self._begun.pop(step, time.time_ns()), time.time_ns()))
        self._profiler.step()  # after the window's last step: the profiler stops and analyses

    def stop(self, complete: bool) -> str:
        """Stop the profiler (analysing what it recorded when the window was cut short) and write the summary; the
        summary's one-line description. ProbeFailure when the profiler wrote nothing."""
        self._profiler.stop()
        self._profiler = None
        summary = summarize(self.directory, self.rank, self._bounds, complete)
        if not summary.profiler_output:
            raise ProbeFailure(f"MindSpore's profiler wrote nothing in {self.directory}")
        atomic_write_json(self.directory / layout.PROFILE_SUMMARY, summary.to_json())
        top = summary.op_types[0] if summary.op_types else None
        busiest = f"; the most time in {top.op_type} ({top.share:.0%})" if top is not None else ""
        return f"{len(summary.steps)} step(s), {len(summary.op_types)} operator type(s){busiest}"
