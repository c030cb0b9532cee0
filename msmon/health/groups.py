"""Where it breaks: which gradient-norm group (``grad_norm/<group>`` of ``layer_grad_norm``) moved, against its own
baseline, appended to the alerts of the grad-norm growth, loss-spike and non-finite detectors.

- growth (``grad_explosion`` with its baseline step ``low_step`` and window ``window_steps``): each group's level
  (median of its last 3 logs) over its baseline (its median over the same window that set the detector's low); the
  groups that moved most lead, and the group whose level first doubled is named when it is not the leader;
- a spike, the absolute cap, a non-finite value: the groups that are non-finite at this step, else each group's value
  over the median of its previous 10 logs.

Kept per group: the last ``HISTORY_LOGS`` logged values (floats; at log_interval 10 that reaches 10,240 steps back).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Iterable

from msmon.config.metrics import norm_group
from msmon.health.alert import Signal
from msmon.util.jsonfiles import JsonObject
from msmon.util.numbers import as_number, fmt_number

EXPLAINED = frozenset({"grad_explosion", "loss_spike", "nonfinite"})
HISTORY_LOGS = 1024
BASELINE_LOGS = 10
LEVEL_LOGS = 3
LEAD_SHARE = 0.5  # a group leads when it moved at least half as much (in log terms) as the one that moved most
MIN_LEAD = 1.5  # ... and by at least x1.5
FIRST_FACTOR = 2.0  # "moved first": its rolling median (3 logs) reached x2 its baseline before the others'
NAMED = 3


def times(ratio: float) -> str:
    """``x14.0``, ``x0.52``, ``x130``."""
    if ratio >= 100:
        return f"x{ratio:.0f}"
    return f"x{ratio:.1f}" if ratio >= 1 else f"x{fmt_number(ratio, 2)}"


def _median(values: Iterable[float]) -> float | None:
    usable = [v for v in values if math.isfinite(v) and v > 0]
    return statistics.median(usable) if usable else None


def lead_text(ratios: dict[str, float]) -> tuple[str, list[str]]:
    """``led by layers.1 (x14.0); other groups <= x1.4`` and the leading groups."""
    ranked = sorted(ratios, key=lambda g: ratios[g], reverse=True)
    top = math.log(ratios[ranked[0]])
    leaders = [g for g in ranked if ratios[g] >= MIN_LEAD and math.log(ratios[g]) >= LEAD_SHARE * top]
    if not leaders:
        return f"no group moved more than {times(ratios[ranked[0]])} against its own baseline", []
    named = ", ".join(f"{g} ({times(ratios[g])})" for g in leaders[:NAMED])
    more = f" and {len(leaders) - NAMED} more" if len(leaders) > NAMED else ""
    rest = [ratios[g] for g in ranked if g not in leaders]
    tail = f"; other groups <= {times(max(rest))}" if rest else ""
    return f"led by {named}{more}{tail}", leaders


class GroupNorms:
    """The per-group norms seen so far (one entry per record that has any)."""

    def __init__(self) -> None:
        self._steps: deque[int] = deque(maxlen=HISTORY_LOGS)
        self._values: dict[str, deque[float]] = {}
        self._keys: frozenset[str] = frozenset()  # the last record's keys ...
        self._groups: tuple[tuple[str, str], ...] = ()  # ... and (key, group) of its per-group norms

    def observe(self, record: JsonObject) -> None:
        if record.keys() != self._keys:  # records of a run mostly have the same keys: look for groups once
            self._keys = frozenset(record)
            self._groups = tuple((key, group) for key in record if (group := norm_group(key)) is not None)
        found: dict[str, float] = {}
        for key, group in self._groups:
            number = as_number(record[key])
            if number is not None:
                found[group] = number
        step = record.get("step")
        if not found or not isinstance(step, int):
            return
        self._steps.append(step)
        for group in found.keys() - self._values.keys():
            self._values[group] = deque([math.nan] * (len(self._steps) - 1), maxlen=HISTORY_LOGS)
        for group, series in self._values.items():
            series.append(found.get(group, math.nan))

    def explain(self, detector: str, signal: Signal, record: JsonObject) -> Signal:
        """``signal`` with the groups that moved added to its message and to ``values["groups"]``; unchanged when
        the record has no group norms or the detector is not one that a group can explain."""
        if detector not in EXPLAINED or not self._steps or self._steps[-1] != record.get("step"):
            return signal
        since, window = signal.values.get("low_step"), signal.values.get("window_steps")
        if detector == "grad_explosion" and isinstance(since, int) and isinstance(window, int):
            found = self._growth(since, window, as_number(signal.values.get("ratio")))
        else:
            found = self._at_step()
        if found is None:
            return signal
        text, values = found
        return Signal(signal.severity, f"{signal.message}; {text}", {**signal.values, "groups": values},
                      signal.onset_step)

    def _growth(self, since: int, window: int, ratio: float | None) -> tuple[str, JsonObject] | None:
        steps = list(self._steps)
        upto = sum(1 for s in steps if s <= since)
        start = min((i for i, s in enumerate(steps) if s > since - window), default=upto)
        ratios: dict[str, float] = {}
        bases: dict[str, float] = {}
        for group, series in self._values.items():
            values = list(series)
            base = _median(values[min(start, max(0, upto - 1)):upto]) if upto else None
            level = _median(values[-LEVEL_LOGS:])
            if base is not None and level is not None:
                ratios[group], bases[group] = level / base, base
        if not ratios:
            return None
        text, leaders = lead_text(ratios)
        first = self._first_to_double(steps, upto, bases)
        whole = f"grad norm {times(ratio)} since step {since}, " if ratio is not None and math.isfinite(ratio) else ""
        note = ""
        if first is not None and leaders and first[0] not in leaders[:1]:
            note = f"; {first[0]} doubled first (step {first[1]})"
        found: JsonObject = {"since_step": since, "ratios": ratios, "led_by": leaders,
                                 "first": {"group": first[0], "step": first[1]} if first else None}
        return f"{whole}{text}{note}", found

    def _first_to_double(self, steps: list[int], upto: int, bases: dict[str, float]) -> tuple[str, int] | None:
        """The group whose rolling median of 3 logs after the baseline step first reached ``FIRST_FACTOR`` x its
        baseline, and that step (ties: the larger move)."""
        best: tuple[int, float, str] | None = None
        for group, base in bases.items():
            values = list(self._values[group])
            for end in range(upto + 3, len(values) + 1):
                level = _median(values[end - 3:end])
                if level is not None and level >= FIRST_FACTOR * base:
                    key = (steps[end - 1], -level / base, group)
                    best = key if best is None or key < best else best
                    break
        return (best[2], best[0]) if best else None

    def _at_step(self) -> tuple[str, JsonObject] | None:
        now = {group: series[-1] for group, series in self._values.items()}
        broken = {group: value for group, value in now.items() if not math.isfinite(value)}
        if broken:
            where = ", ".join(f"{g} ({fmt_number(v)})" for g, v in broken.items())
            finite = [g for g, v in now.items() if math.isfinite(v)]
            rest = "; the other groups are finite" if finite else " (every group)"
            return f"non-finite gradient norm in {where}{rest}", {"nonfinite": list(broken), "finite": finite}
        ratios = {}
        for group, series in self._values.items():
            base = _median(list(series)[-BASELINE_LOGS - 1:-1])
            if base is not None and now[group] > 0:
                ratios[group] = now[group] / base
        if not ratios:
            return None
        text, leaders = lead_text(ratios)
        return f"grad norms at this step against their previous {BASELINE_LOGS} logs: {text}", {
            "ratios": ratios, "led_by": leaders}
