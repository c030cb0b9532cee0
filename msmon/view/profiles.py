"""The report's profiles (docs/probe.md): each rank's profiled window, why it was taken, its operator types against
the run's baseline profile (a table), and the windows the step-time plot marks."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from msmon import layout
from msmon.probe import read_marks, window_dirs
from msmon.probe.against_baseline import compare, per_step
from msmon.probe.purpose import Purpose, read_purposes
from msmon.probe.summary import ProfileSummary, read_summary
from msmon.util.jsonfiles import JsonObject

#: Operator types a profile's table shows (the most time a step first).
TABLE_ROWS = 15
#: An operator type slower than this x its baseline time is marked (health.profile.slower_ratio's default: the
#: report reads the run's files, not its config).
SLOWER_RATIO = 1.2
#: The plots the profiled windows are marked on.
MARKED_METRICS = ("step_time_ms", "throughput")


@dataclass(frozen=True)
class OpRow:
    op_type: str
    ms: float  # a profiled step
    baseline_ms: float | None  # None without a baseline to compare with
    ratio: str
    slower: bool


@dataclass(frozen=True)
class ProfileView:
    """One rank's profile as the report shows it."""

    path: str  # profiles/<from>-<to>/rank_N, relative to the run directory
    rank: int
    first_step: int
    last_step: int
    why: str  # "baseline", "throughput_drop at step 58", "msmon probe"
    text: str
    rows: list[OpRow] = field(default_factory=list)


def _whys(run_dir: Path) -> tuple[dict[str, str], dict[int, str]]:
    """(profile path -> why it was taken, rank -> the baseline's profile path)."""
    whys: dict[str, str] = {}
    baselines: dict[int, str] = {}
    for purpose in read_purposes(run_dir):
        for rank, mark in read_marks(run_dir, purpose.request).items():
            if mark.output is None:
                continue
            if purpose.purpose is Purpose.BASELINE:
                whys[mark.output] = "baseline"
                baselines.setdefault(rank, mark.output)
            else:
                whys[mark.output] = f"{purpose.detector} at step {purpose.alert_step}"
    return whys, baselines


def profile_views(run_dir: Path) -> list[ProfileView]:
    """Every readable profile of the run, in step order."""
    whys, baselines = _whys(run_dir)
    summaries: dict[str, ProfileSummary] = {}
    for path in window_dirs(run_dir, layout.PROFILES):
        try:
            summaries[path] = read_summary(run_dir / path)
        except (OSError, ValueError):
            continue  # still being written, or cleaned: the profiler's own output may be there
    views = []
    for path, summary in summaries.items():
        baseline = summaries.get(baselines.get(summary.rank, ""))
        why = whys.get(path, "msmon probe")
        views.append(_view(path, summary, why, baseline if baseline is not summary else None))
    return views


def _view(path: str, summary: ProfileSummary, why: str, baseline: ProfileSummary | None) -> ProfileView:
    if baseline is None:
        per = per_step(summary)
        rows = [OpRow(t.op_type, per[t.op_type], None, f"{t.share:.0%} of the time", False)
                for t in summary.op_types[:TABLE_ROWS]]
        text = summary.note or f"{len(summary.steps)} step(s), {len(summary.op_types)} operator type(s)"
    else:
        comparison = compare(baseline, summary, SLOWER_RATIO)
        slower = {c.op_type for c in comparison.slower}
        rows = [OpRow(c.op_type, c.ms, c.baseline_ms, c.ratio_text, c.op_type in slower)
                for c in comparison.changes[:TABLE_ROWS]]
        text = comparison.text()
    return ProfileView(path, summary.rank, summary.first_step, summary.last_step, why, text, rows)


def window_marks(views: list[ProfileView]) -> list[JsonObject]:
    """The profiled windows as the plotting script marks them (one per window, its ranks named)."""
    windows: dict[tuple[int, int], list[ProfileView]] = {}
    for view in views:
        windows.setdefault((view.first_step, view.last_step), []).append(view)
    return [{"step": first, "until": last, "metrics": list(MARKED_METRICS),
             "label": f"profile {first}-{last}: {found[0].why} (rank {', '.join(str(v.rank) for v in found)})"}
            for (first, last), found in sorted(windows.items())]
