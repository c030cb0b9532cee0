"""The flight recorder: the last N steps at full per-step resolution, written beside an alert.

Training thread: the callback already holds each step's outputs unread until the logging step; there it reads
them (one read per value and step, as for the interval statistics) and ``extend``s a bounded deque of host-side
per-step dicts (``step``, ``time``, ``step_time_ms``, ``loss``, ``grad_norm``, ``loss_scale``, ``overflow`` and the
``grad_norm/<group>`` norms when tracked). No device value is read on a non-logging step and no Tensor outlives
its interval: at most ``log_interval - 1`` steps' outputs are alive unread on the device (a few scalars each, plus
one float per parameter with ``layer_grad_norm``); the ring itself holds Python floats only.

Alert thread (the writer): ``dump`` copies the deque (``deque.copy`` runs in C under the GIL:
no lock, the training thread never waits), adds the steps since the last log that are still unread (their step and
step time only: their values would need a device read, and a stalled device may be why the alert fired), and writes
the steps up to the alert's step as JSON Lines to ``context/`` (msmon.layout ``alert_context``).
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path

from msmon import layout
from msmon.config.schema import FlightRecorderOptions
from msmon.errors import describe
from msmon.util.atomic import atomic_write_text
from msmon.util.jsonfiles import JsonObject

logger = logging.getLogger("msmon")

#: The values the recorder keeps per step (when the train step returns them), besides step, time and step time.
VALUES: tuple[str, ...] = ("loss", "grad_norm", "loss_scale", "overflow")


def _nothing_pending() -> list[JsonObject]:
    return []


class FlightRecorder:
    """A bounded ring of per-step dicts, filled on the training thread, dumped on an alert thread."""

    def __init__(self, run_dir: str | Path, options: FlightRecorderOptions) -> None:
        self.run_dir = Path(run_dir)
        self.steps = options.steps
        self.max_files = options.max_files
        self.files_written = 0
        self._ring: deque[JsonObject] = deque(maxlen=max(1, options.steps))
        self._warned = False
        #: the steps held unread since the last log, without values (the callback sets it)
        self.pending: Callable[[], list[JsonObject]] = _nothing_pending

    def extend(self, entries: Iterable[JsonObject]) -> None:
        """Training thread, at a logging step: the steps just read, in step order."""
        self._ring.extend(entries)

    def window(self, step: int) -> list[JsonObject]:
        """The last ``steps`` recorded steps up to ``step`` (read values win over unread pending steps)."""
        by_step = {entry["step"]: entry for entry in self._ring.copy()}
        for entry in self.pending():
            by_step.setdefault(entry["step"], entry)
        return [by_step[s] for s in sorted(by_step) if s <= step][-self.steps:]

    def dump(self, step: int, detector: str) -> str | None:
        """Write the window before an alert; its path relative to the run directory, or None (nothing recorded,
        the file limit reached, or the write failed: one warning)."""
        if self.files_written >= self.max_files:
            self._warn_once(f"flight recorder: {self.max_files} context files written; no more for this run "
                            "(monitor_config.flight_recorder.max_files)")
            return None
        entries = self.window(step)
        if not entries:
            return None
        relative = layout.alert_context(step, detector)
        target = self.run_dir / relative
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(target, "".join(json.dumps(e) + "\n" for e in entries), fsync=False)
        except OSError as exc:
            self._warn_once(f"flight recorder: cannot write {target}: {describe(exc)}")
            return None
        self.files_written += 1
        return relative

    def _warn_once(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            logger.warning("msmon: %s", message)
