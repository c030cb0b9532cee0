"""The window of a probe, the same for every kind: taken at a logging step, it begins at the next step, lasts the
request's number of steps, and ends (or is cut short when the training ends inside it). Pure: no files, no
MindSpore; msmon.engine.probe.runner drives it from the callback."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

from msmon.probe import ProbeRequest


class Phase(Enum):
    IDLE = "idle"  # no request taken: the next logging step looks for one
    ARMED = "armed"  # a request taken, its first step not begun yet
    ACTIVE = "active"  # measuring


@dataclass(frozen=True)
class Window:
    """The steps a request measures: ``first_step`` to ``last_step`` (planned, or measured once it ended)."""

    request: ProbeRequest
    first_step: int
    last_step: int

    @property
    def steps(self) -> int:
        return self.last_step - self.first_step + 1


class ProbeWindow:
    """IDLE -> ``arm`` -> ARMED -> ``begins`` -> ACTIVE -> ``ends`` (or ``abort``) -> IDLE."""

    def __init__(self) -> None:
        self.phase = Phase.IDLE
        self.window: Window | None = None
        self._ended: int | None = None  # the last step of the window that ended

    def arm(self, request: ProbeRequest, logging_step: int, steps: int | None = None) -> Window:
        """Take ``request`` at ``logging_step``: its window is the next ``steps`` steps (default ``request.steps``)."""
        if self.phase is not Phase.IDLE:
            raise RuntimeError(f"a probe window is {self.phase.value}: it cannot take another request")
        self.phase = Phase.ARMED
        self.window = Window(request, logging_step + 1, logging_step + (steps or request.steps))
        return self.window

    def begins(self, step: int) -> Window | None:
        """The window when the probe starts now, as ``step`` begins (a window planned for an earlier step moves to
        ``step``: its length is kept), else None."""
        if self.phase is not Phase.ARMED or self.window is None or step < self.window.first_step:
            return None
        self.window = replace(self.window, first_step=step, last_step=step + self.window.steps - 1)
        self.phase = Phase.ACTIVE
        return self.window

    def ends(self, step: int) -> Window | None:
        """At the end of ``step``: the window when this was its last step (then IDLE again), else None."""
        if self.phase is not Phase.ACTIVE or self.window is None:
            return None
        self._ended = step
        if step < self.window.last_step:
            return None
        return self._close(self.window, step)

    def abort(self) -> Window | None:
        """The training ends: an active window, cut short at its last ended step (``last_step`` < ``first_step``
        when none of its steps ended); an armed one is dropped, None (its request stays untaken); IDLE again."""
        if self.phase is Phase.ACTIVE and self.window is not None:
            ended = self._ended if self._ended is not None else self.window.first_step - 1
            return self._close(self.window, ended)
        self.phase, self.window = Phase.IDLE, None
        return None

    def _close(self, window: Window, last_step: int) -> Window:
        done = replace(window, last_step=last_step)
        self.phase, self.window, self._ended = Phase.IDLE, None, None
        return done
