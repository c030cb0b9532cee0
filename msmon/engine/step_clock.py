"""What each logged step cost this rank, measured on the training thread: the time of its steps split at msmon's
callback, inside (its step begin to its step end) and outside (its step end to the next step begin), summed over a
log interval (two clock reads a step, which the callback takes anyway, and two additions), and the process's
memory, read at the logging step only."""

from __future__ import annotations

from msmon.engine.memory_reads import MemoryReads
from msmon.step_cost import StepCost


class StepClock:
    """``train_begin``, then ``begin``/``end`` at every step (``time.monotonic()`` readings), ``cost`` at a log."""

    def __init__(self) -> None:
        self._last_end: float | None = None
        self._begun: float | None = None
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

    def end(self, now: float, steps: int = 1) -> None:
        """A step end (``steps``: the steps this call ran, several with dataset sinking)."""
        if self._begun is not None:
            self._inside += now - self._begun
            self.last_inside_s = (now - self._begun) / steps
        self._begun = None
        self._last_end = now

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
