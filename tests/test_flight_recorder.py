"""The flight recorder without training: every step's values kept at full resolution, read only at logging steps,
bounded; an alert writes the window before it and names the file."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import pytest
from engine_support import settings
from test_engine_unit import CountingTensor, Params, Stop

from msmon.config.health import HealthSettings
from msmon.config.schema import FlightRecorderOptions
from msmon.engine.callback import StepObserver
from msmon.engine.flight import FlightRecorder
from msmon.engine.record import StepProgress
from msmon.health.monitor import HealthMonitor
from msmon.health.sinks import AlertFile


def outputs(step: int, loss: float | None = None) -> tuple[Any, ...]:
    return (CountingTensor(10.0 - step if loss is None else loss), CountingTensor(float(step == 7)),
            CountingTensor(1024.0), CountingTensor(0.01), CountingTensor(step / 10))


def observe(tmp_path: Path, steps: int, interval: int = 5, ring: int = 200, **kwargs: Any) -> FlightRecorder:
    recorder = FlightRecorder(tmp_path, FlightRecorderOptions(steps=ring))
    records: list[dict[str, Any]] = []
    s = settings(tmp_path, log_interval=interval, **kwargs)
    observer = StepObserver(s, StepProgress(), records.append, Stop(), flight=recorder)
    CountingTensor.reads = 0
    for step in range(1, steps + 1):
        before = CountingTensor.reads
        observer.step_end(Params(cur_step_num=step, net_outputs=outputs(step)))
        if step % interval:
            assert CountingTensor.reads == before, f"a device read on non-logging step {step}"
    return recorder


def test_every_step_is_kept_with_its_own_values_read_at_the_logging_step(tmp_path):
    recorder = observe(tmp_path, 12, track_metrics=["loss", "step_time_ms"])
    assert CountingTensor.reads == 2 * 5 * 4  # two logs: 5 steps x (loss, grad norm, loss scale, overflow)
    window = recorder.window(10)
    assert [e["step"] for e in window] == list(range(1, 11))
    for entry in window:
        step = entry["step"]
        assert entry["loss"] == 10.0 - step and entry["grad_norm"] == pytest.approx(step / 10)
        assert entry["loss_scale"] == 1024.0 and entry["overflow"] == int(step == 7)
        assert entry["step_time_ms"] >= 0 and entry["time"] > 1.7e9
    assert [e["step"] for e in recorder.window(100)] == list(range(1, 13))  # 11 and 12: held, not read
    assert set(recorder.window(12)[-1]) == {"step", "time", "step_time_ms"}


def test_the_ring_is_bounded_and_holds_no_tensor(tmp_path):
    recorder = observe(tmp_path, 40, ring=8, track_metrics=["loss"])
    assert [e["step"] for e in recorder.window(40)] == list(range(33, 41))
    assert all(isinstance(v, int | float) for e in recorder._ring for v in e.values())
    assert len(recorder._ring) == 8


def test_log_interval_one_records_the_logged_values(tmp_path):
    recorder = observe(tmp_path, 3, interval=1, track_metrics=["loss"])
    assert [(e["step"], e["loss"]) for e in recorder.window(3)] == [(1, 9.0), (2, 8.0), (3, 7.0)]


def test_an_alert_names_the_window_before_it(tmp_path):
    recorder = observe(tmp_path, 20, track_metrics=["loss", "grad_norm"])
    sinks = [AlertFile(tmp_path / "alerts.jsonl")]
    monitor = HealthMonitor(HealthSettings(), sinks=sinks, context=recorder.dump)
    (alert,) = monitor.observe({"step": 15, "time": 1.0, "loss": math.nan, "grad_norm": 1.0})
    assert alert.context_file == "context/step_15_nonfinite.jsonl"
    line = json.loads((tmp_path / "alerts.jsonl").read_text())
    assert line["context_file"] == alert.context_file
    steps = [json.loads(text)["step"] for text in (tmp_path / alert.context_file).read_text().splitlines()]
    assert steps == list(range(1, 16))
    stall = monitor.check_stall(100.0, 20, 1.0, [0.01] * 10, 2.0)
    assert stall is not None and stall.context_file == "context/step_20_stall.jsonl"
    assert "context_file" not in HealthMonitor(HealthSettings()).observe(
        {"step": 3, "time": 1.0, "loss": math.nan})[0].to_dict()  # replay: no recorder, no field


def test_file_limit_and_write_failures_warn_once(tmp_path, caplog):
    recorder = FlightRecorder(tmp_path, FlightRecorderOptions(steps=5, max_files=2))
    recorder.extend({"step": s, "loss": 1.0} for s in range(1, 4))
    with caplog.at_level(logging.WARNING, logger="msmon"):
        assert [recorder.dump(3, d) for d in ("a", "b", "c", "d")] == [
            "context/step_3_a.jsonl", "context/step_3_b.jsonl", None, None]
    assert caplog.text.count("context files written") == 1
    assert recorder.dump(0, "stall") is None  # nothing recorded before it
    blocked = tmp_path / "file"
    blocked.write_text("")
    broken = FlightRecorder(blocked, FlightRecorderOptions(steps=5))
    broken.extend([{"step": 1}])
    with caplog.at_level(logging.WARNING, logger="msmon"):
        assert broken.dump(1, "x") is None and broken.dump(1, "y") is None
    assert caplog.text.count("cannot write") == 1


def test_the_recorder_is_off_with_zero_steps_and_reads_nothing_more(tmp_path):
    from msmon.engine.session import MonitorSession

    s = settings(tmp_path, flight_recorder=FlightRecorderOptions(steps=0), track_metrics=["loss"], log_interval=5)
    session = MonitorSession(s, tmp_path / "run")
    assert session.flight_recorder is None
    records: list[dict[str, Any]] = []
    observer = StepObserver(s, StepProgress(), records.append, Stop(), flight=session.flight_recorder)
    CountingTensor.reads = 0
    for step in range(1, 11):
        observer.step_end(Params(cur_step_num=step, net_outputs=outputs(step)))
    assert CountingTensor.reads == 2 * 5  # the interval's losses only, as without a recorder


def test_an_alert_while_the_training_thread_is_blocked_names_the_unread_steps(tmp_path):
    """The real step observer and flight recorder: a "training thread" that steps every 10 ms blocks in step 22's end,
    two steps after the log at step 20; an alert raised on another thread meanwhile (as the writer thread raises one)
    writes a context file holding every step, the two not yet read with their step times only, and the training
    thread never waits for it."""
    import threading
    import time

    recorder = FlightRecorder(tmp_path, FlightRecorderOptions(steps=200))
    records: list[dict[str, Any]] = []
    s = settings(tmp_path, log_interval=5, track_metrics=["loss", "grad_norm", "step_time_ms"])
    progress = StepProgress()
    observer = StepObserver(s, progress, records.append, Stop(), flight=recorder)
    blocked, dumped = threading.Event(), threading.Event()

    def train() -> None:
        for step in range(1, 31):
            observer.step_begin(Params(cur_step_num=step))
            time.sleep(0.01)
            observer.step_end(Params(cur_step_num=step, net_outputs=outputs(step)))
            if step == 22:
                blocked.set()
                dumped.wait(120)

    thread = threading.Thread(target=train)
    thread.start()
    assert blocked.wait(120)
    context_file = recorder.dump(progress.last_step, "nonfinite")
    dumped.set()
    thread.join(300)
    assert progress.last_step == 30 and context_file is not None  # the training went on afterwards
    lines = [json.loads(line) for line in (tmp_path / context_file).read_text().splitlines()]
    assert [line["step"] for line in lines] == list(range(1, 23))
    read, unread = lines[:20], lines[20:]  # steps 21 and 22 were held since the log at step 20
    assert all({"loss", "grad_norm", "step_time_ms"} <= set(line) for line in read)
    assert all(set(line) == {"step", "time", "step_time_ms"} for line in unread)
