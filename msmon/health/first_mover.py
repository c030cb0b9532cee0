"""The layer that moved first: at a ``grad_explosion``, ``loss_spike`` or ``nonfinite`` alert, the layer group whose
summary (``update_ratio/<group>``, ``grad_norm/<group>``, ``weight_norm/<group>``) left its own baseline first, the
signal that found it, and how many steps before the loss or the global grad norm showed anything.

The rule, one series at a time (each logged value against the logs before it, in log terms):

- a series' baseline at log ``s`` is the median and MAD of its previous ``BASELINE_LOGS`` finite positive values (at
  least ``MIN_BASELINE``); a value *departs* when ``|log(value / median)|`` exceeds ``MADS`` scaled MADs and
  ``log(MIN_FACTOR)`` (the loss and the global grad norm: upwards only); a non-finite value always departs;
- a series' *departure* is the earliest log ``s`` from which every value up to the alert departs from the baseline
  of ``s`` (a move that came back before the alert is none; a level change that stays is one);
- the update ratio is judged over the learning rate when the records have it (an update scales with the rate: a
  warm-up or decay is no departure);
- the first mover is the group series that departed earliest (ties: the one further beyond its band); the loss and
  the global grad norm "showed" it at their own departure, else at the alert.

Kept: the last ``KEPT_LOGS`` logged values of each series (floats); judged at alerts only (no work per record but
the appends).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from msmon.config.metrics import GROUP_PREFIXES, UPDATE_RATIO_PREFIX, norm_group
from msmon.health.alert import Signal
from msmon.health.groups import EXPLAINED
from msmon.util.jsonfiles import JsonObject
from msmon.util.numbers import MAD_TO_SIGMA, as_number

BASELINE_LOGS = 20
MIN_BASELINE = 5
MADS = 3.0  # scaled MADs (x MAD_TO_SIGMA: about standard deviations of a normal series)
MIN_FACTOR = 1.2  # and at least x1.2 (or /1.2) away from the median: a near-constant series' tiny wobble is none
LOOKBACK_LOGS = 256  # a departure starts at most this many logs before the alert
KEPT_LOGS = LOOKBACK_LOGS + BASELINE_LOGS
WHOLE = ("loss", "grad_norm")  # the run's own series, upwards only


@dataclass(frozen=True)
class Departure:
    """Where one series left its baseline: the step, and how far beyond its band (1: on the edge)."""

    step: int
    strength: float


@dataclass(frozen=True)
class FirstMover:
    """The group that moved first and by which signal; ``shown_step``: when ``shown_by`` (the loss, the global grad
    norm, or the alert itself) first showed anything; ``lead_steps``: ``shown_step - step``."""

    group: str
    signal: str
    step: int
    shown_by: str
    shown_step: int

    @property
    def lead_steps(self) -> int:
        return self.shown_step - self.step

    def values(self) -> JsonObject:
        return {"group": self.group, "signal": self.signal, "step": self.step, "lead_steps": self.lead_steps,
                "shown_by": self.shown_by, "shown_step": self.shown_step}

    def text(self) -> str:
        where = f"{self.group}'s {self.signal} left its baseline first (step {self.step}"
        if self.lead_steps > 0:
            return f"{where}, {self.lead_steps} steps before {self.shown_by} showed anything)"
        return f"{where}; {self.shown_by} showed it at step {self.shown_step})"


def _band(logs: Sequence[float]) -> tuple[float, float]:
    """(median, half width) of a baseline's logarithms."""
    middle = statistics.median(logs)
    spread = MAD_TO_SIGMA * statistics.median([abs(v - middle) for v in logs])
    return middle, max(MADS * spread, math.log(MIN_FACTOR))


def _log(value: float | None) -> float | None:
    """log(value) of a finite positive value, else None."""
    return math.log(value) if value is not None and math.isfinite(value) and value > 0 else None


def _beyond(value: float | None, log: float | None, band: tuple[float, float], upward: bool) -> float | None:
    """How far ``value`` (``log``: its logarithm) is beyond ``band`` (> 1: it departs; inf: non-finite or zero);
    None: no value."""
    if log is not None:
        deviation = log - band[0]
        return (deviation if upward else abs(deviation)) / band[1]
    if value is None:
        return None
    if not math.isfinite(value):
        return math.inf
    return 0.0 if upward else math.inf  # zero or below


def departure(steps: Sequence[int], values: Sequence[float | None], upward: bool = False) -> Departure | None:
    """The departure of one series (``values[i]`` logged at ``steps[i]``, None: not logged), judged at its last
    log; None when it is within its band there (or has too short a history)."""
    logs = [_log(v) for v in values]
    found: Departure | None = None
    for start in range(len(values) - 1, max(-1, len(values) - 1 - LOOKBACK_LOGS), -1):
        if values[start] is None:
            continue
        base = [v for v in logs[max(0, start - BASELINE_LOGS):start] if v is not None]
        if len(base) < MIN_BASELINE:
            break
        band = _band(base)
        at_start = _beyond(values[start], logs[start], band, upward)
        if at_start is not None and at_start > 1 and _stays(values, logs, start + 1, band, upward):
            found = Departure(steps[start], min(at_start, 1e9))
    return found


def _stays(values: Sequence[float | None], logs: Sequence[float | None], since: int, band: tuple[float, float],
           upward: bool) -> bool:
    """Every logged value from index ``since`` on beyond ``band``."""
    for index in range(since, len(values)):
        beyond = _beyond(values[index], logs[index], band, upward)
        if beyond is not None and beyond <= 1:
            return False
    return True


class FirstMovers:
    """The group summaries, the loss and the global grad norm seen so far (one entry per record with a step)."""

    def __init__(self) -> None:
        self._steps: deque[int] = deque(maxlen=KEPT_LOGS)
        self._values: dict[str, deque[float | None]] = {}
        self._keys: frozenset[str] = frozenset()  # the last record's keys (its series found once per set of keys) ...
        self._ratios: frozenset[str] = frozenset()  # ... and those of its update ratios

    def observe(self, record: JsonObject) -> None:
        step = record.get("step")
        if not isinstance(step, int):
            return
        if record.keys() != self._keys:
            self._keys = frozenset(record)
            watched = [key for key in record if key in WHOLE or key.startswith(GROUP_PREFIXES)]
            self._ratios = frozenset(key for key in watched if key.startswith(UPDATE_RATIO_PREFIX))
            for key in watched:
                if key not in self._values:
                    self._values[key] = deque([None] * len(self._steps), maxlen=KEPT_LOGS)
        rate = as_number(record.get("learning_rate")) if self._ratios else None
        if rate is not None and not (math.isfinite(rate) and rate > 0):
            rate = None  # an update scales with the rate: judged over it (its schedule is no departure) when usable
        self._steps.append(step)
        for key, series in self._values.items():  # None: not in this record
            number = as_number(record.get(key))
            series.append(number / rate if rate is not None and number is not None and key in self._ratios else number)

    def first(self) -> FirstMover | None:
        """The first mover as of the last record (None: no group series departed)."""
        if not self._steps:
            return None
        steps = list(self._steps)
        movers: list[tuple[int, float, str, str]] = []
        for key, series in self._values.items():
            if key in WHOLE:
                continue
            found = departure(steps, list(series))
            if found is not None:
                prefix = next(p for p in GROUP_PREFIXES if key.startswith(p))
                movers.append((found.step, -found.strength, str(norm_group(key, prefix)), prefix.rstrip("/")))
        if not movers:
            return None
        step, _, group, signal = min(movers)
        shown = [(found.step, key) for key in WHOLE if key in self._values
                 and (found := departure(steps, list(self._values[key]), upward=True)) is not None]
        shown_step, shown_key = min(shown) if shown else (steps[-1], "")
        by = {"loss": "the loss", "grad_norm": "the global grad norm"}.get(shown_key, "the alert")
        return FirstMover(group, signal, step, by, shown_step)

    def explain(self, detector: str, signal: Signal, record: JsonObject) -> Signal:
        """``signal`` with the first mover added to its message and to ``values["first_mover"]``; unchanged for
        other detectors, when this record is not the last seen, or when no group series departed."""
        if detector not in EXPLAINED or not self._steps or self._steps[-1] != record.get("step"):
            return signal
        mover = self.first()
        if mover is None:
            return signal
        return Signal(signal.severity, f"{signal.message}; {mover.text()}", {**signal.values,
                      "first_mover": mover.values()}, signal.onset_step)
