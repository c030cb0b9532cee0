"""``action: profile`` (docs/probe.md): an alert of a slowness detector leaves a profile request for the affected
rank(s) in the run directory (the probe mechanism, msmon.probe), within the run's budget of profiles and disk; early
in the run a baseline profile of every rank is requested the same way; once an alert's profile is summarised, its
operator types are compared with the baseline's and the comparison goes out as an alert.

One object per HealthMonitor: the writing rank's (its own detectors, and the baseline) and the ``msmon run``
parent's (slow_rank). Each request msmon makes itself has a ``probes/<id>/purpose.json`` (msmon.probe.purpose), so
the budget and the baseline hold over restarts and resumes.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from msmon import layout, probe
from msmon.config.health import PROFILE_DETECTORS, HealthSettings
from msmon.errors import describe
from msmon.health.probed_steps import ProbedSteps
from msmon.probe.against_baseline import compare
from msmon.probe.purpose import ProbePurpose, Purpose, read_purposes, write_purpose
from msmon.probe.summary import read_summary
from msmon.util.files import tree_size
from msmon.util.jsonfiles import JsonObject

logger = logging.getLogger("msmon")

@dataclass(frozen=True)
class ProfileReport:
    """An alert's profile compared with the baseline: what the follow-up alert says."""

    detector: str
    message: str
    values: JsonObject


def profile_action_on(settings: HealthSettings) -> bool:
    """Whether a detector that is on has ``action: profile``."""
    return any(getattr(settings, name).enabled and getattr(settings, name).action == "profile"
               for name in PROFILE_DETECTORS)


class ProfileAction:
    """The profiles one HealthMonitor asks for. ``detectors``: the detectors whose profiles it reports;
    ``baseline``: it requests the baseline (the writing rank); ``min_free_mb``: the disk guard's free-space floor."""

    def __init__(self, run_dir: Path, settings: HealthSettings, detectors: frozenset[str], *, baseline: bool,
                 min_free_mb: float | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.settings = settings.profile
        self.detectors = detectors
        self.min_free_mb = min_free_mb
        purposes = read_purposes(self.run_dir)
        found = next((p.request for p in purposes if p.purpose is Purpose.BASELINE), None)
        self._baseline: str | None = found
        self._takes_baseline = baseline
        self._unreported = [p for p in purposes if p.purpose is Purpose.ANOMALY and not p.reported
                            and p.detector in detectors]
        self.steps = ProbedSteps(self.run_dir, live=True)  # its request while not finished: no second one

    # -- requests -------------------------------------------------------------------------------------
    def at_record(self, step: int) -> list[ProfileReport]:
        """A logged step: the baseline requested once its step has come; the alerts' profiles that every rank has
        finished, compared with the baseline."""
        self.steps.look()
        if self._takes_baseline and self._baseline is None and step >= self.settings.baseline_step \
                and self.steps.request is None:
            try:
                self._baseline = self._ask(None, ProbePurpose("", Purpose.BASELINE)).id
            except OSError as exc:
                logger.warning("msmon: the baseline profile cannot be requested: %s", describe(exc))
                self._takes_baseline = False
        return [report for purpose in list(self._unreported) if (report := self._report(purpose)) is not None]

    def on_alert(self, detector: str, step: int, ranks: tuple[int, ...] | None) -> str:
        """An alert whose action is profile: the request for the next steps of ``ranks`` (None: every rank), or why
        there is none; what the alert adds to its message."""
        limit = self.settings
        self.steps.look()
        if self.steps.request is not None:
            return f"no profile: probe {self.steps.request.id} is still running"
        taken = sum(1 for p in read_purposes(self.run_dir) if p.purpose is Purpose.ANOMALY)
        if taken >= limit.max_profiles:
            return f"no profile: the run's {taken} profile(s) are taken (health.profile.max_profiles)"
        held_mb = tree_size(self.run_dir / layout.PROFILES) / 2**20
        if held_mb >= limit.max_disk_mb:
            return f"no profile: profiles/ holds {held_mb:.0f} MB (health.profile.max_disk_mb {limit.max_disk_mb:g})"
        free_mb = shutil.disk_usage(self.run_dir).free / 2**20 if self.min_free_mb is not None else 0.0
        if self.min_free_mb is not None and free_mb < self.min_free_mb:
            return f"no profile: {free_mb:.0f} MB free, below monitor_config.disk.min_free_mb {self.min_free_mb}"
        purpose = ProbePurpose("", Purpose.ANOMALY, detector, step)
        try:
            request = self._ask(ranks, purpose)
        except OSError as exc:
            return f"no profile: the request cannot be written ({describe(exc)})"
        self._unreported.append(replace(purpose, request=request.id))
        whose = "every rank" if ranks is None else f"rank(s) {', '.join(map(str, ranks))}"
        return f"profiling the next {request.steps} steps of {whose} (probe {request.id})"

    def _ask(self, ranks: tuple[int, ...] | None, purpose: ProbePurpose) -> probe.ProbeRequest:
        request = probe.new_request(probe.ProbeKind.PROFILE, self.settings.steps, ranks)
        write_purpose(self.run_dir, replace(purpose, request=request.id))  # before the ranks can see the request
        probe.write_request(self.run_dir, request)
        self.steps.request = request
        return request

    # -- the comparison -------------------------------------------------------------------------------
    def _report(self, purpose: ProbePurpose) -> ProfileReport | None:
        """The comparison once every rank of ``purpose``'s request has marked it, else None."""
        if self.steps.request is not None and self.steps.request.id == purpose.request:
            return None
        marks = probe.read_marks(self.run_dir, purpose.request)
        if not marks:
            return None  # not taken yet (or the run ended before): reported by a later attempt
        self._unreported.remove(purpose)
        try:
            write_purpose(self.run_dir, replace(purpose, reported=True))
        except OSError as exc:  # a later attempt may report it again
            logger.warning("msmon: cannot mark probe %s reported: %s", purpose.request, describe(exc))
        if self._baseline is None:  # requested by another monitor (the writing rank's) since this one started
            self._baseline = next((p.request for p in read_purposes(self.run_dir) if p.purpose is Purpose.BASELINE),
                                  None)
        baseline = probe.read_marks(self.run_dir, self._baseline) if self._baseline is not None else {}
        texts, ranks = [], {}
        for rank, mark in sorted(marks.items()):
            text, ranks[str(rank)] = self._compare(mark, baseline.get(rank))
            texts.append(text)
        detector = purpose.detector or "profile"
        message = f"{detector} at step {purpose.alert_step}, profiled: {'; '.join(texts)}"
        return ProfileReport(detector, message, {"alert_step": purpose.alert_step, "request": purpose.request,
                                                 "ranks": ranks})

    def _compare(self, mark: probe.ProbeMark, baseline: probe.ProbeMark | None) -> tuple[str, JsonObject]:
        """One rank's sentence and values: its profile against its baseline."""
        found: JsonObject = {"profile": mark.output, "state": mark.state.value}
        if mark.output is None:
            return f"rank {mark.rank}: no profile ({mark.state.value}: {mark.message})", found
        try:
            summary = read_summary(self.run_dir / mark.output)
        except (OSError, ValueError) as exc:
            return f"rank {mark.rank}: its profile summary is unreadable ({exc})", found
        if baseline is None or baseline.output is None:
            top = ", ".join(f"{t.op_type} {t.share:.0%}" for t in summary.op_types[:3]) or "no operator times"
            return (f"rank {mark.rank}, steps {summary.first_step}-{summary.last_step}: no baseline profile to compare "
                    f"with; the most time in {top} ({mark.output})"), found
        try:
            before = read_summary(self.run_dir / baseline.output)
        except (OSError, ValueError) as exc:
            return f"rank {mark.rank}: the baseline profile summary is unreadable ({exc})", found
        comparison = compare(before, summary, self.settings.slower_ratio)
        found.update(baseline=baseline.output, slower=[
            {"op_type": c.op_type, "baseline_ms": c.baseline_ms, "ms": c.ms, "ratio": c.ratio}
            for c in comparison.slower])
        return f"{comparison.text()} ({mark.output})", found
