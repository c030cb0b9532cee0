"""What each logged step cost this rank, measured on the training thread: the time of its steps split into inside
(the train step itself: from msmon's step begin, the last step-begin callback, to the end of the first step-end
callback, MindSpore's own) and outside (the rest: the step-end callbacks, a checkpoint save, the next batch, the
step-begin callbacks), summed over a log interval (two clock reads a step and two additions), and the process's
memory, read at the logging step only."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from msmon.engine.memory_reads import MemoryReads
from msmon.step_cost import StepCost

WATCHED = "_msmon_step_end_watched"  # set on the callback whose step end marks the end of the train step


class StepClock:
    """``train_begin``, then ``begin``/``end`` at every step (``time.monotonic()`` readings), ``cost`` at a log."""

    def __init__(self) -> None:
        self._last_end: float | None = None
        self._begun: float | None = None
        self._step_done: float | None = None  # when the first step-end callback of this step finished
        self._inside = 0.0
        self._outside = 0.0
        self.last_inside_s = 0.0  # the last step's own time inside it, per step (mindformers' per_step_time)
        self._logged_step: int | None = None
        self._memory = MemoryReads()

    def train_begin(self, now: float) -> None:
        self._last_end = now

    def first_step(self, steps_before: int) -> None:
        """The steps trained before this process (a resumed run): the first interval starts there."""
        self._logged_step = steps_before

    def begin(self, now: float) -> None:
        if self._last_end is not None:
            self._outside += now - self._last_end
        self._begun = now

    def step_done(self, now: float) -> None:
        """The train step returned and the first step-end callback ran (``watch_step_end``)."""
        if self._begun is not None:
            self._step_done = now

    def end(self, now: float, steps: int = 1) -> None:
        """msmon's step end (``steps``: the steps this call ran, several with dataset sinking); the step itself ended
        at ``step_done`` when that was seen."""
        done = self._step_done if self._step_done is not None else now
        if self._begun is not None:
            self._inside += done - self._begun
            self.last_inside_s = (done - self._begun) / steps
        self._begun = self._step_done = None
        self._last_end = done

    def take(self, steps: int) -> tuple[float, float]:
        """(inside, outside) in milliseconds per step over the ``steps`` steps since the last take; then zero."""
        per_step = 1000.0 / max(1, steps)
        split = self._inside * per_step, self._outside * per_step
        self._inside = self._outside = 0.0
        return split

    def cost(self, step: int, when: float) -> StepCost:
        """The logging step ``step``'s cost (``when``: its wall-clock time): the interval's split, memory now."""
        steps, self._logged_step = step - (self._logged_step or 0), step
        inside, outside = self.take(steps)
        return StepCost(step, when, steps, inside, outside, *self._memory.read())


def watch_step_end(callbacks: Sequence[Any] | None, clock: StepClock, own: Any) -> bool:
    """Mark the end of each train step at the end of the first step-end callback of the training (MindSpore's own
    first: its framework profiler's, or in PyNative mode the device sync), so that the step-end work of the
    callbacks after it (mindformers' print, a checkpoint save) counts outside the step, as their step-begin work
    does. Its behaviour is unchanged: the wrapper calls it, then reads the clock. False when there is none to watch
    (msmon's callback is the first) or it cannot be wrapped; then msmon's own step end marks the step's end."""
    first = next(iter(callbacks or ()), None)
    if first is None or first is own or getattr(first, WATCHED, False):
        return False
    original = first.on_train_step_end

    def on_train_step_end(run_context: Any) -> Any:
        result = original(run_context)
        clock.step_done(time.monotonic())
        return result

    try:
        first.on_train_step_end = on_train_step_end
        setattr(first, WATCHED, True)
    except AttributeError:  # a callback without an instance dict (__slots__): msmon's own step end marks it
        return False
    return True
