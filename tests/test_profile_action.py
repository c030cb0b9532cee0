"""``action: profile`` without a training: the slow-step detector, the comparison with the baseline, the requests,
budgets and follow-up alerts of msmon.health.profile_action, and the monitor that wires them (the real Trainer:
tests/test_profile_action_real.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from msmon import layout
from msmon.config.coerce import build
from msmon.config.health import HealthSettings, SlowStepSettings
from msmon.health.alert import Alert
from msmon.health.detectors import build_detectors
from msmon.health.detectors.slow_step import SlowStepDetector
from msmon.health.monitor import HealthMonitor
from msmon.health.probed_steps import TIMING_DETECTORS, ProbedSteps
from msmon.health.profile_action import ProfileAction, profile_action_on
from msmon.probe import ProbeKind, ProbeMark, ProbeState, read_request, write_mark
from msmon.probe.against_baseline import compare
from msmon.probe.purpose import Purpose, read_purposes
from msmon.probe.summary import OpTypeTime, ProfileSummary, StepTime
from msmon.util.atomic import atomic_write_json


def summary(first: int, ops: dict[str, float], step_ms: float = 40.0, steps: int = 5, rank: int = 0
            ) -> ProfileSummary:
    """A summary of ``steps`` steps from ``first`` with ``ops`` (type -> ms a step)."""
    total = sum(ops.values()) * steps
    types = [OpTypeTime(name, steps, ms * steps, ms, ms * steps / total) for name, ms in ops.items()]
    return ProfileSummary(rank, first, first + steps - 1, True, ["host_1_ascend_ms"], total, types, [],
                          [StepTime(first + i, step_ms, sum(ops.values()), len(ops)) for i in range(steps)])


BASE = {"MatMul": 4.0, "Add": 1.0, "Softmax": 0.5}


# -- the comparison ----------------------------------------------------------------------------------------------
def test_the_comparison_names_the_operator_types_slower_than_the_baseline_by_their_growth() -> None:
    baseline = summary(21, BASE, 30.0)
    slow = summary(61, {"MatMul": 9.0, "Add": 1.1, "Softmax": 1.5, "Gather": 0.2}, 70.0)
    found = compare(baseline, slow, slower_ratio=1.2)
    assert [(c.op_type, round(c.ratio, 2)) for c in found.slower] == [("MatMul", 2.25), ("Softmax", 3.0),
                                                                        ("Gather", float("inf"))]
    assert [c.op_type for c in found.changes] == ["MatMul", "Softmax", "Add", "Gather"]  # the most time first
    text = found.text()
    assert text.startswith("rank 0, steps 61-65 against the baseline (steps 21-25): 70 ms a step against 30 ms")
    assert "MatMul 2.2x (4 -> 9 ms a step), Softmax 3.0x (0.5 -> 1.5 ms a step), Gather new" in text
    assert "Add" not in text  # 1.1x: below the ratio


def test_a_window_slow_outside_the_operators_says_so() -> None:
    text = compare(summary(21, BASE, 30.0), summary(61, BASE, 90.0), 1.2).text()
    assert "no operator type is 1.2x slower than in the baseline: the time went outside the operators" in text


# -- the slow-step detector ----------------------------------------------------------------------------------------
def records(times: list[float], first: int = 1) -> list[dict[str, Any]]:
    return [{"step": first + i, "step_time_ms": ms} for i, ms in enumerate(times)]


def test_a_slow_step_fires_once_a_step_and_never_enters_the_median() -> None:
    detector = SlowStepDetector(SlowStepSettings(enabled=True, warmup=3))
    times = [5000.0, 30, 31, 29, 200, 30, 250, 32, 60]  # the first log compiles; 60 ms is 2x: not slow
    fired = [(r["step"], s) for r in records(times) if (s := detector.observe(r)) is not None]
    assert [step for step, _ in fired] == [5, 7]
    assert "step 5 took 200 ms, 6.7x the median 30 ms of the last 3 logged steps" in fired[0][1].message
    assert "median 30 ms of the last 4 logged steps" in fired[1][1].message  # 200 never entered it


def test_a_slow_step_needs_the_excess_in_ms_and_skips_the_steps_that_save_a_checkpoint() -> None:
    tiny = SlowStepDetector(SlowStepSettings(enabled=True, warmup=3))
    assert [tiny.observe(r) for r in records([100, 1, 1, 1, 8])] == [None] * 5  # 8x, but 7 ms more
    saving = SlowStepDetector(SlowStepSettings(enabled=True, warmup=3), slow_by_design=(5,))
    assert [saving.observe(r) for r in records([100, 30, 30, 30, 900, 30])] == [None] * 6


def test_slow_step_is_off_by_default_and_built_when_on() -> None:
    assert not any(d.name == "slow_step" for d in build_detectors(HealthSettings()))
    settings, problems = build(HealthSettings, {"slow_step": {"enabled": True, "action": "profile"}}, "health")
    assert not problems and any(d.name == "slow_step" for d in build_detectors(settings))
    assert profile_action_on(settings) and not profile_action_on(HealthSettings())


def test_only_the_slowness_detectors_take_the_profile_action() -> None:
    _, problems = build(HealthSettings, {"throughput_drop": {"action": "profile"}, "slow_rank": {"action": "profile"},
                                         "profile": {"steps": 3, "max_profiles": 2}}, "health")
    assert problems == []
    _, problems = build(HealthSettings, {"loss_spike": {"action": "profile"}}, "health")
    assert [p.path for p in problems] == ["health.loss_spike.action"], problems
    from test_health_checks import findings

    assert findings({"profile": {"steps": 0, "max_disk_mb": 0}}) == [
        ("MS801", "monitor_config.health.profile.steps", "error"),
        ("MS801", "monitor_config.health.profile.max_disk_mb", "error")]


# -- requests, budgets, the follow-up -------------------------------------------------------------------------------
def settings_with(**profile: Any) -> HealthSettings:
    built, problems = build(HealthSettings, {"throughput_drop": {"action": "profile"}, "profile": profile}, "health")
    assert not problems
    return built


def finish(run_dir: Path, request_id: str, rank: int, made: ProfileSummary) -> None:
    """What a rank leaves when its window ends: the summary and the mark."""
    output = layout.profile_dir(run_dir, made.first_step, made.last_step, rank)
    output.mkdir(parents=True)
    atomic_write_json(output / layout.PROFILE_SUMMARY, made.to_json())
    write_mark(run_dir, ProbeMark(request_id, ProbeKind.PROFILE, rank, ProbeState.DONE, made.first_step,
                                  made.last_step, str(output.relative_to(run_dir)), "5 step(s)"))


def test_the_baseline_is_requested_once_at_its_step_and_its_steps_are_the_probes(tmp_path: Path) -> None:
    action = ProfileAction(tmp_path, settings_with(baseline_step=20, steps=5), TIMING_DETECTORS, baseline=True)
    assert action.at_record(10) == [] and read_request(tmp_path) is None and not action.steps.probed(10)
    action.at_record(20)
    request = read_request(tmp_path)
    assert request is not None and request.ranks is None and request.steps == 5
    assert [(p.request, p.purpose) for p in read_purposes(tmp_path)] == [(request.id, Purpose.BASELINE)]
    assert action.steps.probed(21) and action.steps.probed(500)  # not marked yet: any step may be the window's
    action.at_record(30)
    assert read_request(tmp_path) == request  # once
    finish(tmp_path, request.id, 0, summary(21, BASE))
    assert action.steps.probed(25) and action.steps.probed(26)  # the window, and the step that carries the analysis
    assert not action.steps.probed(20) and not action.steps.probed(27)
    again = ProfileAction(tmp_path, settings_with(baseline_step=20), TIMING_DETECTORS, baseline=True)
    again.at_record(100)  # a resumed run keeps its baseline
    assert read_request(tmp_path) == request


def test_an_alert_profiles_its_ranks_within_the_budget_and_reports_against_the_baseline(tmp_path: Path) -> None:
    action = ProfileAction(tmp_path, settings_with(max_profiles=1, steps=4), TIMING_DETECTORS, baseline=True)
    action.at_record(20)
    baseline = read_request(tmp_path)
    assert baseline is not None
    assert action.on_alert("throughput_drop", 22, None).startswith("no profile: probe ")  # the baseline runs
    finish(tmp_path, baseline.id, 0, summary(21, BASE, 30.0))
    said = action.on_alert("throughput_drop", 60, (0,))
    request = read_request(tmp_path)
    assert request is not None and request.ranks == (0,) and request.steps == 4 and request.id != baseline.id
    assert said == f"profiling the next 4 steps of rank(s) 0 (probe {request.id})"
    assert action.at_record(61) == []  # not finished yet
    finish(tmp_path, request.id, 0, summary(61, {**BASE, "MatMul": 8.0}, 60.0, steps=4))
    (report,) = action.at_record(66)
    assert report.detector == "throughput_drop" and report.message.startswith(
        "throughput_drop at step 60, profiled: rank 0, steps 61-64 against the baseline (steps 21-25): 60 ms a step "
        "against 30 ms; slower than in the baseline: MatMul 2.0x (4 -> 8 ms a step) (profiles/61-64/rank_0)")
    assert report.values["ranks"]["0"]["slower"][0]["op_type"] == "MatMul"
    assert action.at_record(67) == []  # reported once
    assert [p.reported for p in read_purposes(tmp_path) if p.purpose is Purpose.ANOMALY] == [True]
    assert action.on_alert("throughput_drop", 90, None) == \
        "no profile: the run's 1 profile(s) are taken (health.profile.max_profiles)"


def test_the_parents_profiles_are_compared_with_the_baseline_the_writing_rank_asked_for(tmp_path: Path) -> None:
    """msmon run's parent (slow_rank) starts before the writing rank requests the baseline: it finds it when its
    profile is done."""
    parent = ProfileAction(tmp_path, settings_with(), frozenset({"slow_rank"}), baseline=False)
    rank = ProfileAction(tmp_path, settings_with(baseline_step=20), TIMING_DETECTORS, baseline=True)
    rank.at_record(20)
    baseline = read_request(tmp_path)
    assert baseline is not None
    for rank_number in (0, 1):
        finish(tmp_path, baseline.id, rank_number, summary(21, BASE, rank=rank_number))
    assert parent.on_alert("slow_rank", 60, (1,)).startswith("profiling the next 5 steps of rank(s) 1")
    request = read_request(tmp_path)
    assert request is not None and request.ranks == (1,)
    finish(tmp_path, request.id, 1, summary(61, {**BASE, "Add": 2.0}, rank=1))
    assert rank.at_record(70) == []  # not its detector's
    (report,) = parent.at_record(0)
    assert "rank 1, steps 61-65 against the baseline (steps 21-25)" in report.message and "Add 2.0x" in report.message


def test_no_profile_beyond_the_disk_budget_or_below_the_free_space(tmp_path: Path) -> None:
    (tmp_path / layout.PROFILES).mkdir()
    (tmp_path / layout.PROFILES / "big").write_bytes(b"x" * 2**20)
    action = ProfileAction(tmp_path, settings_with(max_disk_mb=1.0), TIMING_DETECTORS, baseline=False)
    assert action.on_alert("throughput_drop", 60, None) == \
        "no profile: profiles/ holds 1 MB (health.profile.max_disk_mb 1)"
    full = ProfileAction(tmp_path, settings_with(), TIMING_DETECTORS, baseline=False, min_free_mb=1e12)
    assert full.on_alert("throughput_drop", 60, None).startswith("no profile: ")
    assert "below monitor_config.disk.min_free_mb" in full.on_alert("throughput_drop", 60, None)
    assert read_request(tmp_path) is None


class Collect:
    quiet = False

    def __init__(self) -> None:
        self.alerts: list[Alert] = []

    def handle(self, alert: Alert) -> None:
        self.alerts.append(alert)

    def close(self, deadline: float | None = None) -> None:
        pass


@pytest.mark.parametrize("profiled", [True, False])
def test_the_monitor_profiles_on_the_alert_and_sends_the_comparison_down_the_alert_path(tmp_path: Path,
                                                                                        profiled: bool) -> None:
    """A throughput drop with action profile: the alert says what it profiles, the steps of the baseline window
    raise no drop (they are the profiler's), and the comparison is a second alert of the same detector that every
    sink gets, past the rate limit."""
    built, _ = build(HealthSettings, {"throughput_drop": {"action": "profile" if profiled else "alert", "warmup": 3,
                                                          "patience": 2, "min_steps": 2},
                                      "profile": {"baseline_step": 5, "steps": 3}}, "health")
    sink = Collect()
    action = ProfileAction(tmp_path, built, TIMING_DETECTORS, baseline=True) if profiled else None
    monitor = HealthMonitor(built, sinks=[sink], profiles=action)
    speeds = dict.fromkeys(range(1, 40), 100.0) | dict.fromkeys(range(6, 10), 30.0) | dict.fromkeys(
        range(25, 40), 30.0)  # the baseline window (6-8, and 9 with the analysis) is slow, then the drop from 25
    for step in range(1, 30):
        if profiled and step == 9:
            baseline = read_request(tmp_path)
            assert baseline is not None
            finish(tmp_path, baseline.id, 0, summary(6, BASE, steps=3))
        monitor.observe({"step": step, "time": float(step), "throughput": speeds[step]})
    drops = [a for a in sink.alerts if a.detector == "throughput_drop"]
    assert [a.step for a in drops] == ([27] if profiled else [8])  # unprofiled, 6-9 drop (27: rate-limited)
    if not profiled:
        return
    request = read_request(tmp_path)
    assert request is not None and drops[0].message.endswith(f"profiling the next 3 steps of every rank (probe "
                                                             f"{request.id})")
    finish(tmp_path, request.id, 0, summary(29, {**BASE, "Add": 3.0}, steps=3))
    monitor.observe({"step": 30, "time": 30.0, "throughput": 30.0})
    follow = sink.alerts[-1]
    assert (follow.detector, follow.step, follow.action) == ("throughput_drop", 30, "profile")
    assert "slower than in the baseline: Add 3.0x (1 -> 3 ms a step)" in follow.message


# -- the report -----------------------------------------------------------------------------------------------------
def test_the_report_marks_the_profiled_windows_and_tables_the_operators_against_the_baseline(tmp_path: Path) -> None:
    """A run with a baseline, an alert's profile and a profile by hand: the step-time and throughput plots shade
    each window (named by why it was taken), and each profile has its operator table against the baseline, the
    slower types marked; the page renders in Chromium without a console error."""
    from conftest import run_msmon
    from test_view_unit import chromium_open, make_run, page_data

    from msmon.probe import new_request
    from msmon.probe.purpose import ProbePurpose, write_purpose
    from msmon.view.report import build_report
    from msmon.view.series import load_run

    run_dir = make_run(tmp_path, "profiled", steps=100, every=10, alerts=False)
    made = [(Purpose.BASELINE, None, summary(21, BASE, 30.0)),
            (Purpose.ANOMALY, 580, summary(601, {**BASE, "MatMul": 8.0}, 60.0)),
            (None, None, summary(801, BASE, 31.0))]
    for purpose, step, profile in made:
        request = new_request(ProbeKind.PROFILE, 5, None)
        if purpose is not None:
            write_purpose(run_dir, ProbePurpose(request.id, purpose, "throughput_drop" if step else None, step))
        finish(run_dir, request.id, 0, profile)
    html = build_report(load_run(run_dir))
    marks = page_data(html)["profiles"]
    assert [(m["step"], m["until"], m["label"]) for m in marks] == [
        (21, 25, "profile 21-25: baseline (rank 0)"), (601, 605, "profile 601-605: throughput_drop at step 580 "
                                                       "(rank 0)"), (801, 805, "profile 801-805: msmon probe (rank 0)")]
    assert all(m["metrics"] == ["step_time_ms", "throughput"] for m in marks)
    assert "<h2>Profiles (3)</h2>" in html and "Steps 601-605, rank 0: throughput_drop at step 580" in html
    assert "slower than in the baseline: MatMul 2.0x (4 -&gt; 8 ms a step)" in html
    assert '<tr class="slower"><td>MatMul</td><td class="num">8.000</td><td class="num">4.000</td><td>2.0x</td>' in html
    assert "<td>Add</td><td class=\"num\">1.000</td><td class=\"num\">1.000</td><td>1.0x</td>" in html
    report = tmp_path / "report.html"
    assert run_msmon("report", str(run_dir), "--out", str(report)).code == 0
    _, dom = chromium_open(report, tmp_path)
    assert 'data-msmon-ready="' in dom


@pytest.mark.parametrize("marked", [True, False])
def test_replay_leaves_the_profiled_steps_unjudged_as_the_live_run_did(tmp_path: Path, marked: bool) -> None:
    """A recorded run whose steps 6-8 were profiled (slow, and 9 carried the analysis): replay raises no drop
    there, as the live monitor did not; without the mark the same records are a drop."""
    import json

    from msmon.health.replay import replay

    built, _ = build(HealthSettings, {"throughput_drop": {"warmup": 3, "patience": 2, "min_steps": 2}}, "health")
    speeds = dict.fromkeys(range(1, 20), 100.0) | dict.fromkeys(range(6, 10), 30.0)
    (tmp_path / layout.METRICS).write_text("".join(json.dumps({"step": step, "time": float(step), "throughput": v})
                                                   + "\n" for step, v in speeds.items()))
    if marked:
        write_mark(tmp_path, ProbeMark("r1", ProbeKind.PROFILE, 0, ProbeState.DONE, 6, 8, "profiles/6-8/rank_0"))
    assert ProbedSteps(tmp_path, live=False).probed(9) is marked
    found = [a.step for a in replay(tmp_path, settings=built).alerts if a.detector == "throughput_drop"]
    assert found == ([] if marked else [8])
