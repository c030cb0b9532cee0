"""One rank's probes: looks for a request at logging steps (one ``os.stat`` when there is none), runs the window
(msmon.engine.probe.window) with the probe of the request's kind, and marks the request when the window ends.

The callback calls ``at_logging_step`` at its logging steps only; ``step_begin``/``step_end`` only while ``busy``
(a window is armed or active), and ``close`` when the training ends. A probe that fails is a warning and a
``error`` mark; the training goes on.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from msmon import layout
from msmon.config.profiler import env_profiler, own_profiler
from msmon.engine.probe.distributions import DistributionsProbe
from msmon.engine.probe.profile import ProbeFailure, ProfileProbe
from msmon.engine.probe.window import Phase, ProbeWindow, Window
from msmon.errors import describe
from msmon.foreign import Cell, ConfigValue
from msmon.probe import ProbeKind, ProbeMark, ProbeRequest, ProbeState, read_request, write_mark

logger = logging.getLogger("msmon")


class Probe(Protocol):
    """What every kind of probe does over its window."""

    output: str  # where its result is, relative to the run directory

    def start(self) -> None: ...

    def step_begin(self, step: int) -> None: ...

    def step_end(self, step: int) -> None: ...

    def stop(self, complete: bool) -> str:
        """Stop measuring, write the result; one line saying what it holds."""
        ...


class ProbeHost(Protocol):
    """What a probe is built from besides its window (the rank's ProbeRunner)."""

    run_dir: Path
    rank: int
    interval: int  # the run's log_interval
    network: Cell  # the training's train-step wrapper (None before the first step end)


#: Each kind's probe: (the rank's runner, window) -> Probe.
PROBES: dict[ProbeKind, Callable[[ProbeHost, Window], Probe]] = {
    ProbeKind.PROFILE: lambda runner, window: ProfileProbe(runner.run_dir, runner.rank, window),
    ProbeKind.DISTRIBUTIONS: lambda runner, window: DistributionsProbe(runner.run_dir, runner.rank, window,
                                                                       runner.interval, runner.network),
}


def refusal(kind: ProbeKind, training: Mapping[str, ConfigValue] | None, environ: Mapping[str, str]) -> str | None:
    """Why this rank does not run a probe of ``kind`` (another profiler is on), or None."""
    if kind is ProbeKind.PROFILE:
        other = own_profiler(training) or env_profiler(environ)
        return f"another profiler is on ({other}); MindSpore runs one at a time" if other else None
    return None


class RequestWatch:
    """The request file as one rank sees it: read only when it changed since the last look."""

    def __init__(self, run_dir: Path, rank: int) -> None:
        self._run_dir, self._rank = run_dir, rank
        self._path = run_dir / layout.PROBE_REQUEST
        self._seen: tuple[int, int, int] | None = None

    def poll(self) -> ProbeRequest | None:
        """A request this rank has not taken yet, or None (one ``os.stat`` when the file is missing or unchanged)."""
        try:
            stat = os.stat(self._path)
        except OSError:
            return None
        key = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        if key == self._seen:
            return None
        self._seen = key
        try:
            request = read_request(self._run_dir)
        except (OSError, ValueError) as exc:
            logger.warning("msmon: probe request %s is not used: %s", self._path, describe(exc))
            return None
        if request is None or not request.names(self._rank):
            return None
        if layout.probe_mark(self._run_dir, request.id, self._rank).exists():  # taken before a restart
            return None
        return request


class ProbeRunner:
    """The probes of one rank of one run."""

    def __init__(self, run_dir: Path, rank: int, training: Mapping[str, ConfigValue] | None = None,
                 interval: int = 1) -> None:
        self.run_dir, self.rank = run_dir, rank
        self.interval = max(1, interval)  # log_interval: a distributions window of N logs is N x this many steps
        self.network: Cell = None  # the training's train-step wrapper (set by the callback at the first step end)
        self._training = training
        self._watch = RequestWatch(run_dir, rank)
        self._window = ProbeWindow()
        self._probe: Probe | None = None
        self._disk_full: str | None = None  # the disk guard tripped: no new window (docs/probe.md)

    def disk_guard_tripped(self, reason: str) -> None:
        """No request is taken from now on (each is marked refused with ``reason``); a window open now runs to its
        end."""
        self._disk_full = f"the disk guard stopped heavy outputs: {reason}"

    @property
    def busy(self) -> bool:
        return self._window.phase is not Phase.IDLE

    def at_logging_step(self, step: int) -> None:
        """Take a new request (its window begins at the next step)."""
        if self.busy:
            return
        request = self._watch.poll()
        if request is None:
            return
        refused = self._disk_full or refusal(request.kind, self._training, os.environ)
        if refused is not None:
            logger.warning("msmon: rank %d does not run the %s probe: %s", self.rank, request.kind.value, refused)
            self._mark(request, ProbeState.REFUSED, message=refused)
            return
        logs = request.kind is ProbeKind.DISTRIBUTIONS  # its request counts logging steps
        window = self._window.arm(request, step, request.steps * self.interval if logs else request.steps)
        logger.info("msmon: rank %d runs the %s probe over steps %d-%d (request %s)", self.rank, request.kind.value,
                    window.first_step, window.last_step, request.id)

    def step_begin(self, step: int) -> None:
        window = self._window.begins(step)
        if window is None:
            if self._probe is not None:
                self._guarded(lambda probe: probe.step_begin(step))
            return
        self._probe = PROBES[window.request.kind](self, window)
        if self._guarded(lambda probe: probe.start()):
            self._guarded(lambda probe: probe.step_begin(step))

    def step_end(self, step: int) -> None:
        if self._probe is not None:
            self._guarded(lambda probe: probe.step_end(step))
        finished = self._window.ends(step)
        if finished is not None:
            self._finish(finished, complete=True)

    def close(self) -> None:
        """The training ends: a window still open is cut short (its probe stopped, the request marked
        incomplete); one not begun is left for a later attempt."""
        cut = self._window.abort()
        if cut is not None:
            self._finish(cut, complete=False)

    def _guarded(self, call: Callable[[Probe], None]) -> bool:
        """``call(probe)``; on a failure: a warning, the window ended, the request marked ``error``; False."""
        probe, window = self._probe, self._window.window
        if probe is None or window is None:
            return False
        try:
            call(probe)
            return True
        except Exception as exc:  # noqa: BLE001 - the framework's profiler failing never stops the training
            self._probe = None
            cut = self._window.abort()
            self._fail(window.request, cut or window, exc)
            return False

    def _finish(self, window: Window, complete: bool) -> None:
        probe, self._probe = self._probe, None
        if probe is None:  # it failed earlier (already marked)
            return
        try:
            said = probe.stop(complete)
        except Exception as exc:  # noqa: BLE001 - the framework's profiler failing never stops the training
            self._fail(window.request, window, exc)
            return
        state = ProbeState.DONE if complete else ProbeState.INCOMPLETE
        logger.info("msmon: rank %d: %s probe of steps %d-%d %s: %s in %s", self.rank, window.request.kind.value,
                    window.first_step, window.last_step, state.value, said, probe.output)
        self._mark(window.request, state, window, probe.output, said)

    def _fail(self, request: ProbeRequest, window: Window, exc: BaseException) -> None:
        why = str(exc) if isinstance(exc, ProbeFailure) else describe(exc)
        logger.warning("msmon: rank %d: the %s probe failed (training continues): %s", self.rank, request.kind.value,
                       why)
        self._mark(request, ProbeState.ERROR, window, None, why)

    def _mark(self, request: ProbeRequest, state: ProbeState, window: Window | None = None, output: str | None = None,
              message: str = "") -> None:
        measured = window is not None and window.steps > 0
        mark = ProbeMark(request.id, request.kind, self.rank, state, window.first_step if measured and window else None,
                         window.last_step if measured and window else None, output, message)
        try:
            write_mark(self.run_dir, mark)
        except OSError as exc:
            logger.warning("msmon: cannot mark probe request %s done: %s", request.id, describe(exc))
