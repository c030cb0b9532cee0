"""The probe mechanism without a training: the request file, the window's state machine, one rank's runner with a
stand-in probe, the callback's one ``os.stat`` per logging step, the profile summary parsed from a real profile of
the CPU quickstart (tests/data/profile_cpu: MindSpore 2.9's tables, trimmed to twelve operators), and what
``msmon probe`` refuses. The real Trainer: tests/test_probe_real.py."""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from engine_support import settings

from msmon import layout
from msmon.anomaly import StopRequest
from msmon.engine.callback import StepObserver
from msmon.engine.probe import runner as probe_runner
from msmon.engine.probe.profile_summary import summarize
from msmon.engine.probe.runner import ProbeHost, ProbeRunner, RequestWatch
from msmon.engine.probe.window import Phase, ProbeWindow, Window
from msmon.engine.record import StepProgress
from msmon.errors import MsmonError
from msmon.probe import (
    ProbeKind,
    ProbeRequest,
    ProbeState,
    new_request,
    parse_ranks,
    read_marks,
    read_request,
    write_request,
)
from msmon.probe.summary import ProfileSummary, StepBounds

DATA = Path(__file__).resolve().parent / "data" / "profile_cpu"


def request(steps: int = 5, ranks: tuple[int, ...] | None = None) -> ProbeRequest:
    return new_request(ProbeKind.PROFILE, steps, ranks)


# -- the request file ------------------------------------------------------------------------------------------------
def test_a_request_round_trips_through_its_file(tmp_path: Path) -> None:
    sent = request(7, (2, 0))
    write_request(tmp_path, sent)
    assert read_request(tmp_path) == sent and sent.ranks == (0, 2)
    assert json.loads((tmp_path / layout.PROBE_REQUEST).read_text())["ranks"] == [0, 2]
    assert sent.names(2) and not sent.names(1) and request().names(5)
    assert read_request(tmp_path / "elsewhere") is None


@pytest.mark.parametrize(("data", "why"), [
    ({"id": "a", "kind": "histogram", "steps": 5}, "kind 'histogram'"),
    ({"id": "a", "kind": "profile", "steps": 0}, "steps 0"),
    ({"id": "a", "kind": "profile", "steps": True}, "steps True"),
    ({"id": "a", "kind": "profile", "steps": 1001}, "steps 1001"),
    ({"id": "../x", "kind": "profile", "steps": 5}, "id '../x'"),
    ({"kind": "profile", "steps": 5}, "id None"),
    ({"id": "a", "kind": "profile", "steps": 5, "ranks": "some"}, "rank 'some'"),
])
def test_a_malformed_request_is_refused_naming_the_field(data: dict[str, Any], why: str) -> None:
    with pytest.raises(ValueError, match=why.replace("(", r"\(")):
        ProbeRequest.from_json(data)


def test_ranks_parse_from_the_command_line_and_the_file() -> None:
    assert parse_ranks("all") is None
    assert parse_ranks("3, 0,3") == (0, 3) and parse_ranks([1]) == (1,)
    for bad in ("", "-1", "1.5", [], [True], "a,b"):
        with pytest.raises(ValueError):
            parse_ranks(bad)


# -- the window ------------------------------------------------------------------------------------------------------
def test_the_window_is_the_requested_steps_after_the_logging_step() -> None:
    window = ProbeWindow()
    assert window.arm(request(5), 20) == Window(window.window.request, 21, 25)  # type: ignore[union-attr]
    assert window.begins(20) is None and window.phase is Phase.ARMED
    assert window.begins(21) is not None and window.phase is Phase.ACTIVE
    assert [window.ends(step) for step in (21, 22, 23, 24)] == [None] * 4
    done = window.ends(25)
    assert done is not None and (done.first_step, done.last_step, done.steps) == (21, 25, 5)
    assert window.phase is Phase.IDLE and window.ends(26) is None


def test_a_window_begun_late_keeps_its_length_and_one_taken_refuses_another() -> None:
    window = ProbeWindow()
    window.arm(request(3), 10)
    with pytest.raises(RuntimeError, match="armed"):
        window.arm(request(3), 10)
    started = window.begins(14)  # several steps per call (dataset sinking): the window moves, its length kept
    assert started is not None and (started.first_step, started.last_step) == (14, 16)


def test_a_window_cut_short_keeps_the_steps_it_measured() -> None:
    window = ProbeWindow()
    window.arm(request(5), 20)
    window.begins(21)
    window.ends(21)
    window.ends(22)
    cut = window.abort()
    assert cut is not None and (cut.first_step, cut.last_step) == (21, 22) and window.phase is Phase.IDLE
    window.arm(request(5), 30)
    window.begins(31)
    nothing = window.abort()
    assert nothing is not None and nothing.steps == 0
    window.arm(request(5), 40)
    assert window.abort() is None and window.phase is Phase.IDLE  # armed, not begun: dropped, not measured


# -- one rank's runner -----------------------------------------------------------------------------------------------
class FakeProbe:
    """Records what the runner asks of a probe; fails where told."""

    calls: list[str] = []
    fail_at: str | None = None

    def __init__(self, host: ProbeHost, window: Window) -> None:
        self.output = f"fake/{window.first_step}-{window.last_step}/rank_{host.rank}"

    def _call(self, what: str) -> None:
        FakeProbe.calls.append(what)
        if FakeProbe.fail_at == what.split(" ")[0]:
            raise RuntimeError(f"{what} broke")

    def start(self) -> None:
        self._call("start")

    def step_begin(self, step: int) -> None:
        self._call(f"begin {step}")

    def step_end(self, step: int) -> None:
        self._call(f"end {step}")

    def stop(self, complete: bool) -> str:
        self._call(f"stop {complete}")
        return "measured"


@pytest.fixture
def fake_probe(monkeypatch: pytest.MonkeyPatch) -> type[FakeProbe]:
    FakeProbe.calls, FakeProbe.fail_at = [], None
    monkeypatch.setitem(probe_runner.PROBES, ProbeKind.PROFILE, FakeProbe)
    return FakeProbe


def drive(runner: ProbeRunner, steps: range, interval: int = 10, train: Callable[[int], None] | None = None) -> None:
    """The callback's calls: step hooks only while busy, the request check at logging steps; ``train(step)`` between
    a step's begin and end (the train step)."""
    for step in steps:
        if runner.busy:
            runner.step_begin(step)
        if train is not None:
            train(step)
        if runner.busy:
            runner.step_end(step)
        if step % interval == 0:
            runner.at_logging_step(step)


def test_a_rank_runs_a_request_once_and_marks_it_done(tmp_path: Path, fake_probe: type[FakeProbe]) -> None:
    sent = request(3)
    runner = ProbeRunner(tmp_path, 0)
    drive(runner, range(1, 16))  # nothing requested: nothing happens
    write_request(tmp_path, sent)
    drive(runner, range(16, 41))
    assert fake_probe.calls == ["start", "begin 21", "end 21", "begin 22", "end 22", "begin 23", "end 23", "stop True"]
    mark = read_marks(tmp_path, sent.id)[0]
    assert (mark.state, mark.first_step, mark.last_step, mark.output) == (ProbeState.DONE, 21, 23, "fake/21-23/rank_0")
    restarted = ProbeRunner(tmp_path, 0)  # a restart or resume finds the mark: the request is not run again
    drive(restarted, range(40, 61))
    assert fake_probe.calls[-1] == "stop True" and len(fake_probe.calls) == 8


def test_only_the_named_ranks_take_a_request(tmp_path: Path, fake_probe: type[FakeProbe]) -> None:
    write_request(tmp_path, request(2, (1,)))
    drive(ProbeRunner(tmp_path, 0), range(1, 31))
    assert fake_probe.calls == []
    drive(ProbeRunner(tmp_path, 1), range(1, 31))
    assert fake_probe.calls[0] == "start"


def test_a_new_request_after_a_finished_one_is_taken(tmp_path: Path, fake_probe: type[FakeProbe]) -> None:
    runner = ProbeRunner(tmp_path, 0)
    first, second = request(2), request(2)
    write_request(tmp_path, first)
    drive(runner, range(1, 21))
    write_request(tmp_path, second)
    drive(runner, range(21, 41))
    assert fake_probe.calls.count("start") == 2
    assert read_marks(tmp_path, second.id)[0].first_step == 31


@pytest.mark.parametrize("where", ["start", "begin", "end", "stop"])
def test_a_failing_probe_is_a_warning_and_an_error_mark(tmp_path: Path, fake_probe: type[FakeProbe], where: str,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    fake_probe.fail_at = where
    sent = request(3)
    write_request(tmp_path, sent)
    runner = ProbeRunner(tmp_path, 0)
    with caplog.at_level(logging.WARNING, logger="msmon"):
        drive(runner, range(1, 41))
    mark = read_marks(tmp_path, sent.id)[0]
    assert mark.state is ProbeState.ERROR and "broke" in mark.message and not runner.busy
    assert any("probe failed (training continues)" in r.getMessage() for r in caplog.records)


def test_a_window_cut_short_by_the_end_of_the_training_is_marked_incomplete(
        tmp_path: Path, fake_probe: type[FakeProbe]) -> None:
    sent = request(5)
    write_request(tmp_path, sent)
    runner = ProbeRunner(tmp_path, 0)
    drive(runner, range(1, 13))  # taken at step 10, cut short after step 12
    runner.close()
    mark = read_marks(tmp_path, sent.id)[0]
    assert (mark.state, mark.first_step, mark.last_step) == (ProbeState.INCOMPLETE, 11, 12)
    assert fake_probe.calls[-1] == "stop False" and not runner.busy


def test_a_request_armed_but_not_begun_waits_for_the_next_attempt(tmp_path: Path,
                                                                    fake_probe: type[FakeProbe]) -> None:
    sent = request(5)
    write_request(tmp_path, sent)
    runner = ProbeRunner(tmp_path, 0)
    drive(runner, range(1, 11))
    runner.close()  # the training ended at the logging step that took it
    assert read_marks(tmp_path, sent.id) == {} and fake_probe.calls == []
    drive(ProbeRunner(tmp_path, 0), range(11, 31))  # the resumed attempt runs it
    assert read_marks(tmp_path, sent.id)[0].first_step == 21


@pytest.mark.parametrize(("training", "environ"), [
    ({"profile": True, "profile_start_step": 3, "profile_stop_step": 8}, {}),
    ({}, {"MS_PROFILER_OPTIONS": '{"start": true, "output_path": "/tmp/x"}'}),
])
def test_a_rank_with_another_profiler_refuses_the_profile(tmp_path: Path, fake_probe: type[FakeProbe],
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          training: dict[str, Any], environ: dict[str, str]) -> None:
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    sent = request(3)
    write_request(tmp_path, sent)
    drive(ProbeRunner(tmp_path, 0, training), range(1, 41))
    mark = read_marks(tmp_path, sent.id)[0]
    assert mark.state is ProbeState.REFUSED and "one at a time" in mark.message and fake_probe.calls == []
    assert mark.first_step is None


def test_the_request_file_is_read_once_per_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    reads: list[Path] = []
    real = probe_runner.read_request
    monkeypatch.setattr(probe_runner, "read_request", lambda run_dir: reads.append(run_dir) or real(run_dir))
    watch = RequestWatch(tmp_path, 0)
    assert watch.poll() is None and reads == []  # no file: an os.stat, nothing read
    (tmp_path / layout.PROBES).mkdir()
    (tmp_path / layout.PROBE_REQUEST).write_text("{half")
    with caplog.at_level(logging.WARNING, logger="msmon"):
        assert watch.poll() is None and watch.poll() is None
    assert len(reads) == 1 and "is not used" in caplog.text
    sent = request(2)
    write_request(tmp_path, sent)
    assert watch.poll() == sent and watch.poll() is None and len(reads) == 2


class Params(dict):
    __getattr__ = dict.__getitem__


class NoStop:
    stop: StopRequest | None = None


def test_the_callback_stats_the_request_path_at_logging_steps_only(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / layout.PROBE_REQUEST)
    stats: list[int] = []
    real_stat = os.stat

    def counting(target: Any, *args: Any, **kwargs: Any) -> Any:
        if str(target) == path:
            stats.append(1)
        return real_stat(target, *args, **kwargs)

    monkeypatch.setattr(os, "stat", counting)
    records: list[dict[str, Any]] = []
    observer = StepObserver(settings(tmp_path, log_interval=10, track_metrics=["loss"]), StepProgress(),
                            records.append, NoStop(), probes=ProbeRunner(tmp_path, 0))
    for step in range(1, 51):
        params = Params(cur_step_num=step, net_outputs=1.0)
        observer.step_begin(params)
        observer.step_end(params)
    assert len(records) == 5 and len(stats) == 5


# -- the profile summary ---------------------------------------------------------------------------------------------
def _bounds() -> list[StepBounds]:
    return [StepBounds(**b) for b in json.loads((DATA / "bounds.json").read_text())]


def test_the_summary_of_a_real_cpu_profile(tmp_path: Path) -> None:
    summary = summarize(DATA / "rank_0", 0, _bounds(), complete=True)
    assert summary.profiler_output == ["vm_1_20261204223638976_ascend_ms"] and summary.note == ""
    assert (summary.first_step, summary.last_step, summary.complete) == (21, 25, True)
    types = summary.op_types
    assert len(types) == 50 and types[0].op_type == "IsFinite" and types[0].count == 105
    assert [t.total_ms for t in types] == sorted((t.total_ms for t in types), reverse=True)
    assert summary.op_total_ms == pytest.approx(sum(t.total_ms for t in types))
    assert sum(t.share for t in types) == pytest.approx(1.0, abs=0.01)
    top = summary.top_operators
    assert len(top) == 12 and top[0].name == "Default/optimizer-AdamW/Mul-op3" and top[0].count == 5
    # each of the twelve operators runs once per step: the timestamps split into the five steps
    assert [(s.step, s.ops) for s in summary.steps] == [(step, 12) for step in range(21, 26)]
    assert sum(s.op_ms or 0.0 for s in summary.steps) == pytest.approx(sum(o.total_ms for o in top), rel=1e-3)
    assert all(s.wall_ms > (s.op_ms or 0.0) for s in summary.steps)
    assert ProfileSummary.from_json(json.loads(json.dumps(summary.to_json()))) == summary


def test_a_profile_without_the_cpu_tables_says_so(tmp_path: Path) -> None:
    shutil.copytree(DATA / "rank_0", tmp_path / "rank_0")
    for table in (tmp_path / "rank_0").glob("*/FRAMEWORK/cpu_op_type_info_*"):
        table.unlink()
    summary = summarize(tmp_path / "rank_0", 0, _bounds(), complete=False)
    assert summary.op_types == [] and "MindStudio Insight" in summary.note
    assert [s.op_ms for s in summary.steps] == [None] * 5 and summary.steps[0].wall_ms > 0
    assert "wrote nothing" in summarize(tmp_path / "empty", 0, [], complete=False).note


# -- msmon probe -----------------------------------------------------------------------------------------------------
def _run_dir(tmp_path: Path, status: str = "running", devices: int = 2, **training: Any) -> Path:
    run = tmp_path / "monitor_logs" / "p" / "r"
    run.mkdir(parents=True)
    (run / layout.RUN_JSON).write_text(json.dumps({
        "status": status, "pid": os.getpid(), "host": os.uname().nodename, "device_count": devices,
        "start_time": datetime.now().astimezone().isoformat(), "project_name": "p", "run_name": "r"}))
    (run / layout.MINDFORMERS_YAML).write_text(json.dumps({"run_mode": "train", **training}))
    return run


def test_msmon_probe_writes_a_request_for_a_running_run(tmp_path: Path) -> None:
    from msmon.ops.probes import probes_of, request_probe

    run = _run_dir(tmp_path)
    sent = request_probe(run, ProbeKind.PROFILE, 4, (1,))
    assert read_request(run) == sent and (sent.steps, sent.ranks) == (4, (1,))
    listing = probes_of(run, running=True)
    assert listing.request == sent and listing.pending == [1] and listing.profiles == []
    with pytest.raises(MsmonError, match="not taken yet by rank"):
        request_probe(run, ProbeKind.PROFILE, 4, None)


@pytest.mark.parametrize(("run_json", "ranks", "training", "why"), [
    ({"status": "completed"}, None, {}, "not running"),
    ({}, (2,), {}, "no rank 2"),
    ({}, None, {"profile": True}, "profiles itself: profile: True"),
])
def test_msmon_probe_refuses_what_cannot_be_probed(tmp_path: Path, run_json: dict[str, Any],
                                                   ranks: tuple[int, ...] | None, training: dict[str, Any],
                                                   why: str) -> None:
    from msmon.ops.probes import request_probe

    run = _run_dir(tmp_path, **run_json, **training)
    with pytest.raises(MsmonError, match=why):
        request_probe(run, ProbeKind.PROFILE, 5, ranks)
    assert read_request(run) is None


def test_msmon_status_lists_the_profiles_and_each_ranks_outcome(tmp_path: Path) -> None:
    from msmon.ops.probes import probes_of
    from msmon.probe import ProbeMark, write_mark

    run = _run_dir(tmp_path, devices=3)
    sent = request(5)
    write_request(run, sent)
    write_mark(run, ProbeMark(sent.id, sent.kind, 0, ProbeState.DONE, 101, 105, "profiles/101-105/rank_0", "5 steps"))
    write_mark(run, ProbeMark(sent.id, sent.kind, 2, ProbeState.ERROR, message="the profiler wrote nothing"))
    for window in ("101-105", "11-15"):
        (run / layout.PROFILES / window / "rank_0").mkdir(parents=True)
    listing = probes_of(run, running=True)
    assert listing.pending == [1] and listing.profiles == ["profiles/11-15/rank_0", "profiles/101-105/rank_0"]
    assert listing.lines() == [
        "profiles: profiles/11-15/rank_0, profiles/101-105/rank_0",
        f"probe {sent.id}: profile, 5 step(s), every rank",
        "  rank 0: done steps 101-105: 5 steps",
        "  rank 2: error: the profiler wrote nothing",
        "  not taken yet by rank(s) 1 (at their next logging step)"]
    assert probes_of(run, running=False).pending == []  # a run that ended takes nothing any more
    assert json.loads(json.dumps(listing.to_json()))["marks"][1]["state"] == "error"
