"""The end of `msmon run`: what happened, and the next commands with this run's paths filled in."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from msmon import layout
from msmon.anomaly import in_effect, rollbacks_of
from msmon.status import RunStatus
from msmon.step_cost import read_costs, time_split
from msmon.util.durations import format_duration
from msmon.util.numbers import fmt_number
from msmon.view.report import loss_summary
from msmon.view.series import RunData
from msmon.view.sketch import median


@dataclass
class NextCommands:
    """What `msmon run` knows about the run's surroundings, to fill in the next commands."""

    board_dir: Path | None = None  # what the board serves; None: no board backend
    board_backend: str = "mindinsight"
    previous: Path | None = None  # the project's run before this one
    report: Path | None = None  # the report already written at the end (--report): no report command


def shown_path(path: Path, cwd: Path) -> str:
    """``path`` relative to ``cwd`` when it lies below it (shorter to type), else absolute; shell-quoted."""
    try:
        text = str(path.resolve().relative_to(cwd.resolve()))
    except ValueError:
        text = str(path)
    return shlex.quote(text)


def _duration_s(info: dict) -> float | None:
    try:
        return (datetime.fromisoformat(info["end_time"]) - datetime.fromisoformat(info["start_time"])).total_seconds()
    except (KeyError, TypeError, ValueError):
        return None


def summary_lines(run: RunData) -> list[str]:
    """Steps and duration, first / final / best loss, alerts with the first one's message, the records, the
    framework's warnings and errors and where its output is."""
    info = run.info
    steps, total = info.get("last_step"), info.get("total_steps")
    done = f"{steps if steps is not None else 0}" + (f" of {total}" if total else "")
    skipped = sum(made.skipped_steps for made in in_effect(rollbacks_of(info)))
    done += " steps" + (f" ({skipped} skipped by rollbacks)" if skipped else "")
    lines = [f"  {done} in {format_duration(_duration_s(info), fine=True)}"]
    loss = run.sketch("loss")
    if loss.first is not None and loss.last is not None:
        final, best, best_step = loss_summary(run)
        first = f"{fmt_number(loss.first[1])} (step {loss.first[0]})"
        lines[0] += f"; loss {first} -> {fmt_number(final)} (step {loss.last[0]})"
        if best is not None:
            lines[0] += f", best {fmt_number(best)} at step {best_step}"
    if run.alerts:
        alert = run.alerts[0]
        lines.append(f"  alerts: {len(run.alerts)}; the first at step {alert.get('step')}, {alert.get('detector')}: "
                     f"{alert.get('message')}")
    else:
        lines.append("  alerts: none")
    dropped, lost = info.get("dropped_records") or 0, info.get("records_lost") or 0
    lines.append(f"  records: {run.records.logged} logged, {dropped} dropped, {lost} lost")
    if (run.path / layout.CONSOLE_LOG).is_file():
        warnings, errors = info.get("framework_warnings") or 0, info.get("framework_errors") or 0
        lines.append(f"  framework output: {warnings} warnings, {errors} errors, in {run.path / layout.CONSOLE_LOG}")
    internal = info.get("internal_errors") or 0
    if internal:
        lines.append(f"  msmon internal errors: {internal} (a bug of msmon; training went on); the first: "
                     f"{info.get('first_internal_error')} (traceback in {layout.MSMON_LOG} or the rank's log)")
    return lines + attempt_line(run) + rollback_lines(run) + speed_lines(run) + time_lines(run.path)


def speed_lines(run: RunData) -> list[str]:
    """``  speed: 112 TFLOPS per device, MFU 36% on 8 x Ascend (median of the logged steps)``, when recorded."""
    tflops = median(run.sketch("tflops_per_device"))
    if tflops is None:
        return []
    mfu = median(run.sketch("mfu"))
    devices = run.info.get("device_count") or 1
    target = run.info.get("device_target") or "device"
    line = f"  speed: {fmt_number(tflops)} TFLOPS per device"
    if mfu is not None:
        line += f", MFU {mfu:.0%} on {devices} x {target}"
    return [line + " (median of the logged steps)"]


MAX_SPLIT_RANKS = 4  # ranks listed one by one in the time line; beyond, the median rank and the slowest


def time_lines(run_dir: Path) -> list[str]:
    """``  step time: rank 0 30.1 ms in the step + 2.3 ms outside, host 812 MiB; rank 1 ...`` (from each rank's
    step costs; many ranks: the one with the most time outside and the median of the others)."""
    splits = [split for rank, costs in read_costs(run_dir).items() if (split := time_split(rank, costs))]
    if not splits:
        return []
    if len(splits) <= MAX_SPLIT_RANKS:
        return ["  step time: " + "; ".join(split.text() for split in splits)]
    ordered = sorted(splits, key=lambda split: split.outside_ms)
    median, slowest = ordered[len(ordered) // 2], ordered[-1]
    return [f"  step time ({len(splits)} ranks): median {median.text()}; most outside the step: {slowest.text()}"]


def next_lines(run: RunData, commands: NextCommands, cwd: Path | None = None) -> list[str]:
    """The commands a user types next, with this run's paths filled in."""
    cwd = cwd or Path(os.getcwd())
    here = shown_path(run.path, cwd)
    lines = ["next:"]
    if commands.report is None:
        lines.append(f"  msmon report {here}   # an HTML report of this run")
    if commands.board_dir is not None:
        backend = "" if commands.board_backend == "mindinsight" else f" --backend {commands.board_backend}"
        lines.append(f"  msmon board start {shown_path(commands.board_dir, cwd)}{backend}   # the curves in a board")
    if commands.previous is not None:
        lines.append(f"  msmon compare {shown_path(commands.previous, cwd)} {here}   # against the previous run")
    if run.info.get("status") == RunStatus.INTERRUPTED:
        lines.append(f"  msmon resume {here}   # continue this run from its latest checkpoint")
    if run.info.get("status") != RunStatus.COMPLETED and ranks_worth_a_look(run.path):
        lines.append(f"  msmon status {here}   # each rank's last step, and why no step ended")
    return lines


def ranks_worth_a_look(run_dir: Path) -> bool:
    """True when the run captured stacks (it stalled) or had more than one rank."""
    beats = list((run_dir / layout.HEARTBEATS).glob("rank_*.json"))
    return (run_dir / layout.STACKS).is_dir() or len(beats) > 1


def rollback_lines(run: RunData) -> list[str]:
    """``rollbacks: 1`` and one line per rollback: what set it off, where it went, what it skipped and cost."""
    made = rollbacks_of(run.info)
    if not made:
        return []
    lines = [f"  rollbacks: {len(made)}"]
    for one in made:
        samples = f", {one.skipped_samples} samples" if one.skipped_samples is not None else ""
        lost = f", {format_duration(one.time_lost_s, fine=True)} lost" if one.time_lost_s is not None else ""
        lines.append(f"    {one.describe()}{samples}{lost}")
    return lines


def attempt_line(run: RunData) -> list[str]:
    """``attempts: 2 (restarted once from step 80)`` when the run had more than one."""
    entries = [entry for entry in run.info.get("attempts") or [] if isinstance(entry, dict)]
    if len(entries) < 2:
        return []
    later = [f"{entry.get('reason', 'resume')} from step {entry.get('resumed_from_step') or 0}"
             for entry in entries[1:]]
    return [f"  attempts: {len(entries)} ({'; '.join(later)})"]
