"""Engine logic without training: queue, observer, warnings, writer isolation, disk guard, file backend."""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from engine_support import (
    FAKES,
    BlockingBackend,
    FailingBackend,
    FlakyNetworkBackend,
    MemoryBackend,
    read_jsonl,
    settings,
    summary_scalars,
)

from msmon.anomaly import StopRequest
from msmon.engine.backends import backend_class, backend_names, register_backend, unregister_backend
from msmon.engine.callback import StepObserver
from msmon.engine.drop_queue import DropQueue
from msmon.engine.record import StepProgress, console_line
from msmon.engine.session import MonitorSession
from msmon.engine.step_outputs import split_outputs
from msmon.status import RunStatus


@pytest.fixture(autouse=True)
def fakes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.chdir(tmp_path)
    for cls in FAKES:
        register_backend(cls)
    MemoryBackend.store.clear()
    BlockingBackend.store.clear()
    yield
    for cls in FAKES:
        unregister_backend(cls.name)


class Params(dict):
    """A stand-in for MindSpore's InternalCallbackParam (a dict with attribute access)."""

    __getattr__ = dict.__getitem__


class Stop:
    stop: StopRequest | None = None


def msmon_warnings(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "msmon" and r.levelno == logging.WARNING
            and text in r.getMessage()]


def test_drop_queue_drops_the_oldest_and_counts():
    queue = DropQueue(3)
    for item in range(5):
        queue.put(item)
    assert queue.drain() == [2, 3, 4]
    assert queue.dropped == 2
    queue.put(9)
    queue.put_front([7, 8])
    queue.put_front([1, 2])  # full: 1 and 2 are dropped, not the queued ones
    assert queue.drain() == [7, 8, 9]
    assert queue.dropped == 4


def test_split_outputs_names_every_mindformers_layout():
    assert split_outputs(1.5) == {"loss": 1.5}
    assert split_outputs((1, 0, 2)) == {"loss": 1, "overflow": 0, "loss_scale": 2}
    five = split_outputs((1, 0, 2, 0.1, 3.0))
    assert five == {"loss": 1, "overflow": 0, "loss_scale": 2, "learning_rate": 0.1, "grad_norm": 3.0}
    seven = split_outputs((1, 0, 2, 0.1, 3.0, [4.0, 5.0], 2))
    assert seven["local_norm"] == [4.0, 5.0] and seven["grad_norm"] == 3.0
    assert split_outputs((1.0, 2.0)) == {"loss": 1.0}


def _observer(s, records: list[dict[str, Any]], stop: Stop | None = None, **kwargs: Any) -> StepObserver:
    return StepObserver(s, StepProgress(), records.append, stop or Stop(), **kwargs)


def test_observer_logs_every_interval_with_mindformers_outputs(tmp_path: Path):
    import numpy as np

    records: list[dict[str, Any]] = []
    s = settings(tmp_path, log_interval=3, track_metrics=[
        "loss", "global_norm", "lr", "throughput", "global_step", "step_time_ms", "loss_scale", "overflow", "epoch"])
    observer = _observer(s, records, world_size=2, config={"model": {"model_config": {"seq_length": 64}}})
    batch = [np.zeros((2, 65), np.int32)]
    observer.begin(Params(epoch_num=1, batch_num=9))
    for step in range(1, 10):
        outputs = (np.float32(7.0 - step), np.bool_(step == 6), np.float32(1024.0), np.float32(0.01), np.float32(step))
        time.sleep(0.002)
        observer.step_end(Params(cur_step_num=step, cur_epoch_num=1, net_outputs=outputs,
                                 train_dataset_element=batch))
    assert [r["step"] for r in records] == [3, 6, 9]
    third = records[1]
    assert third["loss"] == 1.0 and third["grad_norm"] == 6.0 and third["overflow"] == 1
    assert third["learning_rate"] == pytest.approx(0.01) and third["loss_scale"] == 1024.0
    assert third["global_step"] == 6 and third["epoch"] == 1 and third["rank"] == 0
    seconds = third["step_time_ms"] / 1000
    assert third["throughput_per_device"] == pytest.approx(2 * 64 / seconds)
    assert third["throughput"] == pytest.approx(2 * 2 * 64 / seconds)
    assert third["samples_per_s"] == pytest.approx(2 * 2 / seconds)
    assert abs(third["time"] - time.time()) < 5


@pytest.mark.parametrize(("before", "epoch", "skipped", "total"), [
    (0, 1, 0, 100),  # a fresh two-epoch run: 2 x 50 batches
    (70, 2, 70, 100),  # resumed at step 70 (mindformers starts the epoch loop at epoch 2): was 50, the stall check off
    (40, 2, 70, 70),  # rolled back to step 40 with the data skipped to batch 70 (in epoch 2): 30 batches are left
    (40, 1, 59, 81),  # rolled back inside epoch 1: batches 60-100 are left
])
def test_the_planned_steps_and_the_data_follow_a_resume_and_a_rollback(tmp_path: Path, before: int, epoch: int,
                                                                       skipped: int, total: int) -> None:
    class Optimizer:
        global_step = before + 1

    class Dataset:
        @staticmethod
        def get_init_step() -> int:
            return skipped

    progress = StepProgress()
    observer = StepObserver(settings(tmp_path, log_interval=10), progress, None, Stop())
    observer.begin(Params(epoch_num=3 - epoch, batch_num=50))
    observer.step_end(Params(cur_step_num=1, cur_epoch_num=epoch, epoch_num=3 - epoch, batch_num=50,
                             optimizer=Optimizer(), train_dataset=Dataset()))
    assert (progress.last_step, progress.data_batches, progress.total_steps) == (before + 1, 100, total)


@pytest.mark.parametrize(("initial_step", "global_step", "step"), [
    (40, 40, 41),  # resumed from step 40, its first step's loss NaN: the optimizer skipped its update and its count
    (50, 48, 51),  # resumed from a checkpoint saved after two overflowed steps (global_step 47 restored)
    (None, 41, 41),  # no mindformers loss monitor among the callbacks: the optimizer's count
])
def test_a_resumed_run_counts_its_steps_from_the_step_mindformers_resumed_from(
        tmp_path: Path, initial_step: int | None, global_step: int, step: int) -> None:
    """The first step of a resumed run is numbered as mindformers' step lines number it (its loss monitor's
    ``initial_step``, the checkpoint's step) + 1; the optimizer's ``global_step`` falls short by every step whose
    gradients overflowed (seen: a rollback's second attempt, NaN again at its first step, recorded as step 40, not
    41)."""
    monitor = SimpleNamespace(initial_step=initial_step) if initial_step is not None else SimpleNamespace()
    progress = StepProgress()
    observer = StepObserver(settings(tmp_path, log_interval=10), progress, None, Stop())
    observer.begin(Params(epoch_num=1, batch_num=100))
    observer.step_end(Params(cur_step_num=1, cur_epoch_num=1, epoch_num=1, batch_num=100,
                             optimizer=SimpleNamespace(global_step=global_step), list_callback=[monitor]))
    assert progress.last_step == step


def test_the_read_plan_is_decided_once_from_the_settings(tmp_path: Path) -> None:
    """What a logging step reads and what the steps between logs hold: nothing held at log_interval 1 or on a rank
    that does not write; the flight recorder's values read on held steps even when not tracked; a reduced rank reads
    only the non-finite check's inputs."""
    from msmon.engine.callback import REDUCED_METRICS, ReadPlan

    tracked = settings(tmp_path, track_metrics=["loss", "learning_rate", "layer_grad_norm"], log_interval=5)
    plan = ReadPlan.of(tracked, writes=True, reduced=False, flight=False)
    assert plan.hold and plan.stats and plan.layer_norms
    assert plan.reads == {"loss", "learning_rate"} and plan.held_reads == {"loss"}
    flight = ReadPlan.of(tracked, writes=True, reduced=False, flight=True)
    assert {"grad_norm", "loss"} <= flight.held_reads and "grad_norm" in flight.reads
    assert not ReadPlan.of(tracked, writes=False, reduced=False, flight=False).hold
    every_step = ReadPlan.of(settings(tmp_path, log_interval=1), writes=True, reduced=False, flight=True)
    assert not every_step.hold and not every_step.stats
    reduced = ReadPlan.of(tracked, writes=True, reduced=True, flight=False)
    assert reduced.metrics <= REDUCED_METRICS and not reduced.layer_norms


def test_non_logging_steps_only_count(tmp_path: Path):
    records: list[dict[str, Any]] = []
    progress = StepProgress()
    observer = StepObserver(settings(tmp_path, log_interval=10), progress, records.append, Stop())
    observer.step_end(Params(cur_step_num=7))  # no net_outputs at all: must not be read
    assert records == [] and progress.last_step == 7 and progress.last_end_wall is not None


def test_absent_metric_warns_once_with_the_fix_and_is_never_a_placeholder(tmp_path, caplog):
    records: list[dict[str, Any]] = []
    config = {"runner_wrapper": {"type": "MFTrainOneStepCell", "use_clip_grad": False}}
    observer = _observer(settings(tmp_path, log_interval=1), records, config=config)
    for step in (1, 2, 3):
        observer.step_end(Params(cur_step_num=step, net_outputs=2.0))
    absent = msmon_warnings(caplog, "'grad_norm' is absent")
    assert len(absent) == 1 and "use_clip_grad: True" in absent[0] and "track_metrics" in absent[0]
    assert len(msmon_warnings(caplog, "'throughput' is absent")) == 1
    assert all("grad_norm" not in r and "throughput" not in r for r in records)
    assert [r["loss"] for r in records] == [2.0, 2.0, 2.0]


def test_stop_request_reaches_the_callback(tmp_path: Path):
    stop = Stop()
    observer = _observer(settings(tmp_path), [], stop)
    assert observer.step_end(Params(cur_step_num=1)) is False
    stop.stop = StopRequest("loss spike", "loss_spike", 2)
    assert observer.step_end(Params(cur_step_num=2)) is True


def test_registry_lists_valid_names_on_unknown():
    assert {"file", "mindinsight", "tensorboard", "mlflow"} <= set(backend_names())
    with pytest.raises(ValueError, match="valid: .*file"):
        backend_class("nosuch")


def _run_records(session: MonitorSession, steps: range, **extra: Any) -> list[dict[str, Any]]:
    records = [{"step": step, "time": time.time(), "rank": 0, "loss": 1.0 / step, **extra} for step in steps]
    for record in records:
        session.writer.put(record)
    return records


def _send_in_chunks(session: MonitorSession, chunks: int, size: int, pause_s: float) -> list[dict[str, Any]]:
    """``chunks`` runs of ``size`` consecutive steps, ``pause_s`` apart (the writer and the backends cycle between
    them: failures, retries and the disk guard happen mid-run)."""
    sent = []
    for chunk in range(chunks):
        sent += _run_records(session, range(chunk * size + 1, chunk * size + size + 1))
        time.sleep(pause_s)
    return sent


def test_failing_backend_warns_once_and_the_others_keep_everything(tmp_path, caplog):
    s = settings(tmp_path, monitor_type=["file", "failing", "memory"])
    session = MonitorSession(s, s.run_dir()).start()
    sent = _send_in_chunks(session, 5, 10, 0.3)
    summary = session.close("completed")
    assert len(msmon_warnings(caplog, "msmon: backend 'failing'")) == 1
    assert summary.backends["failing"]["status"] == "disabled"
    assert read_jsonl(s.run_dir() / "metrics.jsonl") == sent
    assert MemoryBackend.store[str(s.run_dir())] == sent
    assert summary.records_written == 50 and summary.dropped_records == 0


def test_a_backends_ledger_accounts_for_every_record_and_never_counts_an_alert(tmp_path: Path) -> None:
    """A backend that stores the first 3 records of a batch and then fails (a PartialWrite), then refuses everything
    until it is disabled, then keeps being handed records: written + dropped + lost is every record it was handed,
    the alerts between them are not records, and the stored ones are counted written."""
    from msmon.engine.backend_runner import MAX_FAILURES, BackendRunner
    from msmon.engine.backends.base import PartialWrite

    class HalfWritingBackend(MemoryBackend):
        name = "halfwriting"
        calls = 0

        def write(self, records: list[dict[str, Any]]) -> None:
            type(self).calls += 1
            if type(self).calls == 1:
                super().write(records[:3])
                raise PartialWrite(3, OSError(28, "No space left on device"))
            raise OSError(5, "Input/output error")

    s = settings(tmp_path, monitor_type=["file"])
    runner = BackendRunner(HalfWritingBackend(s.run_dir(), s, None), queue_size=4, ready=threading.Event())
    handed = 0
    for batch in range(MAX_FAILURES + 2):
        items = [("record", {"step": batch * 10 + i}) for i in range(6)]
        items.insert(2, ("alert", {"detector": "loss_spike", "step": batch}))
        handed += 6
        runner.put_many(items)
        runner._retry_at = runner._next_write = 0.0  # the worker's next pass is due at once
        runner.step()
    runner.close(RunStatus.COMPLETED)
    assert runner.step() and runner.join(1.0)
    stats = runner.stats.summary()
    assert stats["status"] == "disabled" and stats["written"] == 3
    assert stats["dropped"] > 0  # a queue of 4 handed 7 items a batch
    assert stats["written"] + stats["dropped"] + stats["lost"] == handed


def test_the_run_dir_backends_share_one_thread_where_one_failing_costs_the_others_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """file, mindinsight and a failing backend that writes in the run directory: one worker thread; the memory
    backend (not in the run directory): its own."""
    monkeypatch.setattr(FailingBackend, "in_run_dir", True)
    s = settings(tmp_path, monitor_type=["failing", "file", "mindinsight", "memory"])
    session = MonitorSession(s, s.run_dir()).start()
    threads = {thread.name for thread in threading.enumerate()}
    assert {"msmon-backends", "msmon-memory"} <= threads
    assert not threads & {"msmon-file", "msmon-mindinsight", "msmon-failing"}
    sent = _send_in_chunks(session, 5, 10, 0.3)
    summary = session.close("completed")
    assert not {"msmon-backends", "msmon-memory"} & {thread.name for thread in threading.enumerate()}
    assert summary.backends["failing"]["status"] == "disabled"
    assert read_jsonl(s.run_dir() / "metrics.jsonl") == sent and MemoryBackend.store[str(s.run_dir())] == sent
    assert summary.backends["mindinsight"]["written"] == len(sent) == 50
    assert sorted(summary_scalars(s.run_dir())) == [record["step"] for record in sent]  # MindInsight's own proto


def test_msmons_own_failure_in_a_runner_stops_that_backend_alone_and_is_counted(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A failure outside the backend's own calls (here the run facts msmon keeps for it) is msmon's bug: that backend
    stops, named, counted and warned about once; the file backend on the same thread keeps every record."""
    from msmon.util import internal_errors

    class BrokenFacts:
        def add(self, records: list[dict[str, Any]]) -> None:
            raise TypeError("unsupported operand")

    class BrokenFactsBackend(MemoryBackend):
        name = "brokenfacts"
        in_run_dir = True
        keeps_run_facts = True
        facts = BrokenFacts()  # type: ignore[assignment]

    register_backend(BrokenFactsBackend)
    internal_errors.forget()
    caplog.set_level(logging.INFO, logger="msmon")
    s = settings(tmp_path, monitor_type=["brokenfacts", "file"])
    try:
        session = MonitorSession(s, s.run_dir()).start()
        sent = _send_in_chunks(session, 3, 10, 0.3)
        started = time.monotonic()
        summary = session.close("completed")
    finally:
        unregister_backend("brokenfacts")
    assert time.monotonic() - started < 5  # its close budget (10 s) is not waited for
    assert read_jsonl(s.run_dir() / "metrics.jsonl") == sent
    broken = summary.backends["brokenfacts"]
    assert broken["status"] == "disabled" and broken["reason"] == "msmon's own error: TypeError: unsupported operand"
    assert internal_errors.seen().first == "the runner of backend 'brokenfacts': TypeError: unsupported operand"
    assert len(msmon_warnings(caplog, "msmon: internal error in the runner of backend 'brokenfacts'")) == 1


def test_network_backend_is_retried_and_loses_nothing(tmp_path, caplog):
    FlakyNetworkBackend.failures = 2
    FlakyNetworkBackend.store.clear()
    s = settings(tmp_path, monitor_type=["flaky", "file"])
    session = MonitorSession(s, s.run_dir()).start()
    sent = _run_records(session, range(1, 21))
    time.sleep(0.5)
    sent += _run_records(session, range(21, 31))
    time.sleep(3.5)  # backoff 1 s then 2 s
    summary = session.close("completed")
    assert len(msmon_warnings(caplog, "msmon: backend 'flaky'")) == 1
    assert FlakyNetworkBackend.store[str(s.run_dir())] == sent
    assert summary.backends["flaky"]["status"] == "ok" and summary.backends["flaky"]["failures"] == 2


def test_blocking_backend_neither_blocks_training_nor_other_backends(tmp_path):
    from dataclasses import replace

    BlockingBackend.delay, BlockingBackend.writes = 1.0, 0
    s = settings(tmp_path, monitor_type=["blocking", "file"])
    s = replace(s, writer=replace(s.writer, queue_size=100))
    session = MonitorSession(s, s.run_dir()).start()
    slowest = 0.0
    sent = []
    for step in range(1, 401):
        started = time.perf_counter()
        sent += _run_records(session, range(step, step + 1))
        slowest = max(slowest, time.perf_counter() - started)
        time.sleep(0.005)
    time.sleep(0.3)
    summary = session.close("completed")
    assert slowest < 0.05  # put() never waits for a backend
    assert read_jsonl(s.run_dir() / "metrics.jsonl") == sent
    blocked = summary.backends["blocking"]
    assert blocked["dropped"] > 0 and blocked["written"] + blocked["dropped"] == 400
    assert len(BlockingBackend.store[str(s.run_dir())]) == blocked["written"] <= 100 * BlockingBackend.writes
    assert summary.dropped_records == blocked["dropped"]


def test_close_is_idempotent_flushes_and_writes_the_heartbeat(tmp_path):
    s = settings(tmp_path)
    session = MonitorSession(s, s.run_dir()).start()
    session.progress.last_step, session.progress.last_end_monotonic = 40, time.monotonic()
    sent = _run_records(session, range(5, 45, 5))
    first = session.close("completed")
    assert session.close("failed") is first
    assert read_jsonl(s.run_dir() / "metrics.jsonl") == sent
    assert not (s.run_dir() / "heartbeat.json").exists()  # one heartbeat per rank, written by its own thread
    beat = json.loads((s.run_dir() / "heartbeats" / "rank_0.json").read_text())
    assert beat["ended"] == 40 and beat["pid"] == os.getpid() and beat["rank"] == 0 and beat["state"] == "completed"
    assert abs(beat["ended_time"] - time.time()) < 5 and abs(beat["alive"] - time.time()) < 5
    assert first.last_step == 40 and first.last_record == sent[-1]


def test_nan_and_inf_stay_what_they_are_in_jsonl_and_csv(tmp_path):
    from dataclasses import replace

    s = settings(tmp_path, track_metrics=["loss", "grad_norm"])
    s = replace(s, file=replace(s.file, csv=True))
    session = MonitorSession(s, s.run_dir()).start()
    values = [math.nan, math.inf, -math.inf, 0.5]
    for step, value in enumerate(values, 1):
        session.writer.put({"step": step, "time": 1.0, "rank": 0, "loss": value})
    session.close("completed")
    text = (s.run_dir() / "metrics.jsonl").read_text()
    assert "NaN" in text and "Infinity" in text and "-Infinity" in text
    loaded = [r["loss"] for r in read_jsonl(s.run_dir() / "metrics.jsonl")]
    assert math.isnan(loaded[0]) and loaded[1:] == values[1:]
    import csv

    rows = list(csv.DictReader((s.run_dir() / "metrics.csv").open()))
    assert [row["loss"] for row in rows] == ["nan", "inf", "-inf", "0.5"] and rows[0]["grad_norm"] == ""


@pytest.mark.parametrize("enabled", [True, False])
def test_dead_series_is_found_once_by_the_health_detector_and_obeys_its_switch(tmp_path, enabled):
    """One dead-series check (the health detector): it used to run twice, once ignoring `enabled`."""
    from dataclasses import replace

    from msmon.health import attach

    s = settings(tmp_path, track_metrics=["loss", "grad_norm", "learning_rate"])
    health = replace(s.health, dead_series=replace(s.health.dead_series, enabled=enabled))
    s = replace(s, health=replace(health, stall=replace(health.stall, enabled=False)))
    session = MonitorSession(s, s.run_dir()).start()
    handle = attach(session, s, s.run_dir())
    for step in range(1, 41):
        session.writer.put({"step": step, "time": float(step), "rank": 0, "loss": 6.907755, "grad_norm": 0.0,
                            "learning_rate": 0.01})
    session.close("completed")
    alerts = [a for a in handle.monitor.alerts if a.detector == "dead_series"]
    if enabled:
        assert len(alerts) == 1 and "grad_norm is exactly 0" in alerts[0].message  # then rate-limited
    else:
        assert alerts == []


def test_disk_guard_stops_heavy_outputs_and_keeps_the_jsonl(tmp_path, caplog):
    from dataclasses import replace

    s = settings(tmp_path, monitor_type=["file", "tensorboard"])
    s = replace(s, disk=replace(s.disk, max_run_mb=0))
    session = MonitorSession(s, s.run_dir())
    session.disk_guard.interval_s = 0.2
    session.start()
    sent = _send_in_chunks(session, 3, 10, 0.3)
    summary = session.close("completed")
    assert len(msmon_warnings(caplog, "disk guard")) == 1
    assert summary.backends["tensorboard"]["status"] == "suspended"
    assert "max_run_mb" in summary.disk_guard
    assert read_jsonl(s.run_dir() / "metrics.jsonl") == sent


def test_enospc_from_the_kernel_warns_once_and_trips_the_disk_guard(tmp_path, caplog):
    s = settings(tmp_path, monitor_type=["devfull", "file", "tensorboard"])
    session = MonitorSession(s, s.run_dir()).start()
    sent = _send_in_chunks(session, 4, 5, 0.7)
    summary = session.close("completed")
    warned = msmon_warnings(caplog, "msmon: backend 'devfull'")
    assert len(warned) == 1 and "No space left on device" in warned[0]
    assert summary.backends["devfull"]["status"] == "disabled"
    assert "ENOSPC" in (summary.disk_guard or "")
    assert summary.backends["tensorboard"]["status"] == "suspended"
    assert read_jsonl(s.run_dir() / "metrics.jsonl") == sent


def test_only_rank_zero_writes_unless_per_rank(tmp_path):
    from dataclasses import replace

    s = settings(tmp_path)
    quiet = MonitorSession(s, s.run_dir(), rank=1, world_size=2)
    assert not quiet.writes and quiet.writer.runners == []
    per_rank = replace(s, writer=replace(s.writer, per_rank=True))
    loud = MonitorSession(per_rank, per_rank.run_dir(), rank=1, world_size=2).start()
    loud.writer.put({"step": 1, "time": 1.0, "rank": 1, "loss": 1.0})
    loud.close("completed")
    assert read_jsonl(s.run_dir() / "rank_1" / "metrics.jsonl")[0]["rank"] == 1


def test_console_line_is_compact():
    line = console_line({"step": 20, "loss": 2.3456789, "learning_rate": 5e-3, "throughput": 4210.55, "rank": 0})
    assert line == "msmon: step 20 | loss 2.3457 | lr 0.005 | tokens/s 4210.6"


def test_importing_the_engine_imports_no_heavy_package():
    code = ("import sys, msmon.engine.session, msmon.engine.backends; "
            "print([m for m in ('mindspore', 'mlflow', 'tensorboardX', 'mindinsight') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_mlflow_down_at_start_never_blocks_and_warns_once(tmp_path, caplog):
    from dataclasses import replace

    from engine_support import free_port

    s = settings(tmp_path, monitor_type=["mlflow", "file"])
    s = replace(s, mlflow=replace(s.mlflow, tracking_uri=f"http://127.0.0.1:{free_port()}", timeout_s=2.0))
    session = MonitorSession(s, s.run_dir()).start()
    started = time.perf_counter()
    sent = _run_records(session, range(1, 51))
    assert time.perf_counter() - started < 0.5
    time.sleep(2.0)
    summary = session.close("completed")
    assert len(msmon_warnings(caplog, "msmon: backend 'mlflow'")) == 1
    assert summary.backends["mlflow"]["status"] == "retrying" and summary.backends["mlflow"]["lost"] == 50
    assert read_jsonl(s.run_dir() / "metrics.jsonl") == sent


def test_mlflow_params_are_flat_valid_and_never_hold_secrets():
    from msmon.engine.backends.mlflow import param_key, param_values

    flat = param_values({"model": {"model_config": {"seq_length": 64}}, "alerts": {"webhook_url": "https://x/T0k3n"},
                    "api_key": "sk-1", "layers": [1, 2], "note": "x" * 7000})
    assert flat["model.model_config.seq_length"] == "64" and flat["layers"] == "[1, 2]"
    assert flat["alerts.webhook_url"] == "***" and flat["api_key"] == "***"
    assert len(flat["note"]) == 6000
    assert param_key("a:b[0].c d/e-f") == "a_b_0_.c d/e-f"


def test_sinking_several_steps_per_call_still_logs_each_interval(tmp_path: Path):
    records: list[dict[str, Any]] = []
    observer = _observer(settings(tmp_path, log_interval=10, track_metrics=["loss", "step_time_ms"]), records)
    observer.begin(Params())
    for step in range(7, 50, 7):  # dataset sink: 7 steps per callback call
        time.sleep(0.014)
        observer.step_end(Params(cur_step_num=step, net_outputs=1.0))
    assert [r["step"] for r in records] == [14, 21, 35, 42]
    assert all(1.5 < r["step_time_ms"] < 30 for r in records)  # >= 14 ms per call / 7 steps


class CountingTensor:
    """A device value whose reads are counted (on Ascend every read is a host-device sync)."""

    reads = 0

    def __init__(self, value: float) -> None:
        self.value = value

    def asnumpy(self) -> Any:
        import numpy as np

        CountingTensor.reads += 1
        return np.float32(self.value)


def _outputs(loss: float, norm: float) -> tuple[Any, ...]:
    return (CountingTensor(loss), CountingTensor(0.0), CountingTensor(1024.0), CountingTensor(0.01),
            CountingTensor(norm))


def test_interval_statistics_read_only_at_logging_steps(tmp_path: Path):
    records: list[dict[str, Any]] = []
    observer = _observer(settings(tmp_path, log_interval=5, track_metrics=["loss", "grad_norm"]), records)
    norms = {s: float(s % 7 + 1) for s in range(1, 21)}
    norms[7], norms[13], norms[14] = math.nan, math.inf, math.nan  # one NaN; then Inf and NaN in one interval
    CountingTensor.reads = 0
    for step in range(1, 21):
        before = CountingTensor.reads
        observer.step_end(Params(cur_step_num=step, net_outputs=_outputs(10.0 - step / 4, norms[step])))
        if step % 5:
            assert CountingTensor.reads == before, f"a device read on non-logging step {step}"
    assert CountingTensor.reads == 4 * 2 * 5  # each logging step reads 5 losses and 5 norms, once each
    assert [r["step"] for r in records] == [5, 10, 15, 20]
    for record in records:
        steps = range(record["step"] - 4, record["step"] + 1)
        finite = [norms[s] for s in steps if math.isfinite(norms[s])]
        assert record["grad_norm"] == norms[record["step"]] and record["loss"] == 10.0 - record["step"] / 4
        assert record["grad_norm_mean"] == pytest.approx(sum(finite) / len(finite))
        assert record["loss_mean"] == pytest.approx(sum(10.0 - s / 4 for s in steps) / 5)
    assert records[0]["grad_norm_max"] == max(norms[s] for s in range(1, 6))
    assert math.isnan(records[1]["grad_norm_max"]) and math.isnan(records[2]["grad_norm_max"])  # NaN beats Inf
    assert records[3]["grad_norm_max"] == max(norms[s] for s in range(16, 21))  # the slots were emptied
    assert records[0]["grad_norm_initial"] == norms[1]  # the initialised model's, at the first log only
    assert all("grad_norm_initial" not in r for r in records[1:])


def test_interval_statistics_only_for_tracked_metrics_and_intervals_above_one(tmp_path: Path):
    records: list[dict[str, Any]] = []
    observer = _observer(settings(tmp_path, log_interval=4, track_metrics=["loss"]), records)
    for step in range(1, 9):
        observer.step_end(Params(cur_step_num=step, net_outputs=_outputs(float(step), 1.0)))
    assert [r["loss_mean"] for r in records] == [2.5, 6.5] and "grad_norm_mean" not in records[0]
    each: list[dict[str, Any]] = []
    observer = _observer(settings(tmp_path, log_interval=1, track_metrics=["loss", "grad_norm"]), each)
    observer.step_end(Params(cur_step_num=1, net_outputs=_outputs(1.0, 2.0)))
    assert set(each[0]) == {"step", "time", "rank", "loss", "grad_norm"}


def test_interval_statistics_when_sinking_several_steps_per_call(tmp_path: Path):
    records: list[dict[str, Any]] = []
    observer = _observer(settings(tmp_path, log_interval=10, track_metrics=["grad_norm"]), records)
    for step in range(4, 41, 4):  # dataset sink: a call every 4 steps carries the last step's outputs
        observer.step_end(Params(cur_step_num=step, net_outputs=_outputs(1.0, float(step))))
    assert [r["step"] for r in records] == [12, 20, 32, 40]
    assert [r["grad_norm_mean"] for r in records] == [8.0, 18.0, 28.0, 38.0]  # (4+8+12)/3, (16+20)/2, ...
    assert [r["grad_norm_max"] for r in records] == [12.0, 20.0, 32.0, 40.0]


def test_csv_header_holds_the_interval_statistics():
    from msmon.engine.record import record_columns

    assert record_columns(["loss", "grad_norm"]) == ["step", "time", "rank", "loss", "loss_mean", "grad_norm",
                                                     "grad_norm_mean", "grad_norm_max", "grad_norm_initial"]


def test_loss_mean_keeps_a_nan_loss_between_two_logs(tmp_path: Path):
    records: list[dict[str, Any]] = []
    observer = _observer(settings(tmp_path, log_interval=3, track_metrics=["loss", "grad_norm"]), records)
    for step, loss in enumerate([1.0, math.nan, 2.0, 1.0, 2.0, 3.0], start=1):
        observer.step_end(Params(cur_step_num=step, net_outputs=_outputs(loss, math.inf if step == 2 else 1.0)))
    assert records[0]["loss"] == 2.0 and math.isnan(records[0]["loss_mean"])  # never averaged away
    assert records[0]["grad_norm_mean"] == 1.0 and records[0]["grad_norm_max"] == math.inf  # overflow Inf skipped
    assert records[1]["loss_mean"] == 2.0 and records[1]["grad_norm_max"] == 1.0


@pytest.mark.parametrize("batch_fails", [False, True])
def test_mlflow_close_sends_results_and_status_in_one_batch_then_ends_the_run(batch_fails: bool) -> None:
    """Closing costs two requests: the results with the status tag, then the end state, which is sent even when a
    slow tracking server timed out the batch (the close still fails: the writer reports it)."""
    from msmon.engine.backends.mlflow import MlflowBackend

    calls: list[tuple[Any, ...]] = []

    class Client:
        def log_batch(self, run_id: str, metrics: list, tags: list) -> None:
            if batch_fails:
                raise TimeoutError("read timed out")
            calls.append(("batch", {m.key: m.value for m in metrics}, {t.key: t.value for t in tags}))

        def set_terminated(self, run_id: str, status: str) -> None:
            calls.append(("terminated", status))

    class Facts:
        def results(self, status: str) -> dict:
            return {"final_loss": 0.5, "steps": 20, "status": status}

    backend = object.__new__(MlflowBackend)
    backend._client, backend._run_id, backend._facts = Client(), "run-1", Facts()
    if batch_fails:
        with pytest.raises(TimeoutError):
            backend.close(RunStatus.COMPLETED)
        assert calls == [("terminated", "FINISHED")]
    else:
        backend.close(RunStatus.FAILED)
        assert calls == [("batch", {"final_loss": 0.5, "steps": 20.0}, {"msmon.status": "failed"}),
                         ("terminated", "FAILED")]


def test_mlflow_close_costs_two_requests_to_the_server(tmp_path: Path) -> None:
    """The real MlflowClient against a server that records each request: closing is the results batch and the end
    state, nothing else (MLflow's own set_terminated fetched the run first to print its URL: a third request that a
    loaded CI server timed out, leaving the run RUNNING after msmon's run completed)."""
    import threading
    from dataclasses import replace
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from msmon.engine.backends.mlflow import MlflowBackend

    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            seen.append(f"{self.command} {self.path.split('?')[0].rsplit('/mlflow/', 1)[-1]}")
            if self.headers.get("Content-Length"):
                self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b"{}")

        do_GET = do_POST = _answer  # noqa: N815

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        s = settings(tmp_path)
        s = replace(s, mlflow=replace(s.mlflow, tracking_uri=f"http://127.0.0.1:{server.server_address[1]}"))
        backend = MlflowBackend(tmp_path, s, None)
        backend.prepare()
        from mlflow import MlflowClient

        backend._client, backend._run_id = MlflowClient(tracking_uri=s.mlflow.tracking_uri), "run-1"
        backend.close(RunStatus.COMPLETED)
    finally:
        server.shutdown()
        server.server_close()
    assert seen == ["POST runs/log-batch", "POST runs/update"]


def test_a_failing_learning_rate_read_is_counted_once_and_the_records_go_on(tmp_path: Path):
    """msmon's read of the optimizer's schedule raising (a schedule msmon does not know) is an internal error,
    counted and logged once, not a silent gap; the records go on without the learning rate."""
    from msmon.util import internal_errors

    def broken_schedule(step: Any) -> float:
        raise RuntimeError("a schedule msmon cannot call")

    optimizer = SimpleNamespace(learning_rate=broken_schedule, dynamic_lr=True, global_step=1)
    records: list[dict[str, Any]] = []
    internal_errors.forget()
    observer = _observer(settings(tmp_path, log_interval=1, track_metrics=["loss", "lr"]), records)
    for step in (1, 2, 3):
        optimizer.global_step = step
        observer.step_end(Params(cur_step_num=step, net_outputs=1.0, optimizer=optimizer))
    assert [r["step"] for r in records] == [1, 2, 3] and all("learning_rate" not in r for r in records)
    seen = internal_errors.seen()
    assert seen.count == 1 and seen.first is not None and "learning-rate read" in seen.first
    internal_errors.forget()
