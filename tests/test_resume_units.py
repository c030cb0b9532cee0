"""Unit tests of resuming: checkpoint files and discovery, the fit check, resume keys, attempts and superseded
records, the restart policy, the callback's step count, warm detectors, TensorBoard's purge, `msmon resume`'s
reading of the recorded command. The real training is in tests/test_resume.py."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import yaml
from conftest import tree_snapshot
from helpers_checkpoints import checkpoint_tree, cut, iteration_tree, write_ckpt, write_safetensors
from helpers_training import QUICKSTARTS, quickstart_parts, write_quickstart_config

from msmon import layout
from msmon.anomaly import StopRequest
from msmon.compat.checkpoint_file import Incomplete, read_checkpoint
from msmon.config.health import HealthSettings
from msmon.config.loader import load_config
from msmon.errors import MsmonError
from msmon.health.monitor import HealthMonitor
from msmon.health.replay import replay
from msmon.run_record import AttemptReason, RunRecord
from msmon.runner import rundir, runinfo
from msmon.runner.attempt_entries import begin, carried_over, replace_last
from msmon.runner.attempts import RestartPolicy
from msmon.runner.checkpoints import ITERATION_LAYOUT, ResumePoint, latest_checkpoint, saved_checkpoints
from msmon.runner.lifecycle import restart_cause
from msmon.runner.plan import RunRequest, prepare
from msmon.runner.protocol import ViewOptions
from msmon.runner.results import RankResults, RunResult
from msmon.runner.resume import HYPER_PARAM_FILE, check_fits, resume_overrides, training_layout
from msmon.runner.supervise import Supervisor
from msmon.status import Attempt, RunStatus
from msmon.util.internal_errors import InternalErrors

#: A quickstart that saves the rank layout: no checkpoint: section (as mindformers 1.8 reads it, or a user's own).
RANK_LAYOUT: dict[str, Any] = {"checkpoint": None}


@pytest.mark.parametrize("fmt", ["ckpt", "safetensors"])
def test_a_whole_checkpoint_gives_its_step_and_a_cut_one_is_refused(tmp_path: Path, fmt: str) -> None:
    write = write_ckpt if fmt == "ckpt" else write_safetensors
    path = write(tmp_path / f"a.{fmt}", 300)
    assert read_checkpoint(path).step == 300
    for keep in (-1, -30, 9):
        cut(write(tmp_path / f"c{keep}.{fmt}", 300), keep)
        with pytest.raises(Incomplete):
            read_checkpoint(tmp_path / f"c{keep}.{fmt}")
    assert read_checkpoint(write_ckpt(tmp_path / "crc.ckpt", 7, crc=True)).step == 7  # MindSpore's crc trailer


def test_the_latest_complete_checkpoint_is_found_by_its_content(tmp_path: Path) -> None:
    root = checkpoint_tree(tmp_path, [100, 200], ranks=2)
    # a resumed run names its files by the steps since the resume: "-1_50" holds step 250
    for rank in range(2):
        write_ckpt(root / f"rank_{rank}" / f"llama_rank_{rank}-1_50.ckpt", 250)
    (root / "rank_0" / "llama_rank_0-1_300.tmp").write_bytes(b"half")  # MindSpore writes NAME.tmp, then renames
    point = latest_checkpoint(tmp_path)
    assert point is not None and (point.step, point.name, point.ranks) == (250, "llama_rank_0-1_50.ckpt", 2)
    cut(root / "rank_1" / "llama_rank_1-1_50.ckpt")  # one rank's file of it is cut short: the one before
    point = latest_checkpoint(tmp_path)
    assert point is not None and point.step == 200
    assert latest_checkpoint(tmp_path / "nothing") is None


def test_mindformers_1_9_nested_checkpoint_directory_is_found(tmp_path: Path) -> None:
    nested = tmp_path / "logs" / "output" / "checkpoint" / "checkpoint" / "rank_0"
    write_safetensors(nested / "qwen3_rank_0-1_40.safetensors", 40)
    point = latest_checkpoint(tmp_path)
    assert point is not None and point.root == nested.parent and point.fmt == "safetensors"


def test_a_checkpoint_that_does_not_fit_is_refused_in_one_line(tmp_path: Path) -> None:
    training, _ = quickstart_parts(write_quickstart_config(tmp_path, steps=10, overrides=RANK_LAYOUT))
    checkpoint_tree(tmp_path, [100], ranks=2)
    point = latest_checkpoint(tmp_path)
    assert point is not None
    with pytest.raises(MsmonError, match=r"written by 2 rank\(s\); this run has 1") as caught:
        check_fits(point, training, 1)
    assert "--worker-num 2" in caught.value.hint
    recorded = training_layout(training, 2)
    changed = {**training, "runner_config": {**training["runner_config"], "batch_size": 4}}
    with pytest.raises(MsmonError, match=r"runner_config.batch_size was 2, now 4"):
        check_fits(point, changed, 2, recorded)
    check_fits(point, training, 2, recorded)
    (tmp_path / "q").mkdir()
    mcore, _ = quickstart_parts(write_quickstart_config(tmp_path / "q", steps=10, source=QUICKSTARTS["mcore"],
                                                        overrides=RANK_LAYOUT))
    with pytest.raises(MsmonError, match="resume from safetensors"):
        check_fits(point, mcore, 2)


@pytest.mark.parametrize(("fmt", "parallel"), [("ckpt", False), ("ckpt", True), ("safetensors", False),
                                               ("safetensors", True)])
def test_resume_keys_as_the_installed_mindformers_reads_them(tmp_path: Path, fmt: str, parallel: bool) -> None:
    root = checkpoint_tree(tmp_path, [100], fmt=fmt)
    point = latest_checkpoint(tmp_path)
    assert point is not None
    config = write_quickstart_config(tmp_path, steps=10, overrides=RANK_LAYOUT)
    overrides = resume_overrides(point, tmp_path, {"use_parallel": parallel})
    resolved = load_config(config, overrides).resolved()  # the keys go through the worker's own override parser
    assert resolved["use_legacy_format"] is True and resolved["load_ckpt_format"] == fmt
    if fmt == "safetensors" and not parallel:  # one process: a directory holding only hyper_param.safetensors
        link = tmp_path / layout.RESUME_LINKS / HYPER_PARAM_FILE
        assert resolved["resume_training"] is True and resolved["load_checkpoint"] == str(link.parent)
        assert os.listdir(link.parent) == [HYPER_PARAM_FILE] and link.resolve() == point.path.resolve()
    else:
        assert resolved["resume_training"] == point.name and resolved["load_checkpoint"] == str(root)


def test_the_iteration_layout_is_listed_and_its_latest_whole_directory_is_picked(tmp_path: Path) -> None:
    """mindformers 1.9 with a checkpoint: section saves iteration_<step>/ directories: the latest one whose common.json
    holds a step and whose every rank's model and optimizer files are there and whole is picked (before a rollback's
    step too); a directory cut short, missing a rank's file or its common.json is skipped, and every directory is
    listed for a rollback to set aside."""
    root = iteration_tree(tmp_path, [100, 200, 300, 400], ranks=2)
    (root / "iteration_00000400" / "common.json").unlink()  # rank 0 had not finished
    cut(root / "iteration_00000300" / "llama_tiny-opt-0000001-0000002.safetensors")
    (root / "iteration_00000200" / "metadata.json").unlink()  # several ranks leave metadata.json
    point = latest_checkpoint(tmp_path)
    assert point is not None and (point.layout, point.step, point.ranks) == (ITERATION_LAYOUT, 100, 2)
    assert point.path == root / "iteration_00000100" and point.to_json()["path"] == str(point.path)
    one = tmp_path / "one"
    iteration_tree(one, [100, 200])
    assert latest_checkpoint(one).step == 200 and latest_checkpoint(one, before=200).step == 100
    (one / "logs/output/checkpoint/iteration_00000200/llama_tiny-model-0000000-0000001.safetensors").unlink()
    assert latest_checkpoint(one).step == 100
    assert sorted((step, path.name) for step, path in saved_checkpoints(tmp_path)) == [
        (100, "iteration_00000100"), (200, "iteration_00000200"), (300, "iteration_00000300"),
        (400, "iteration_00000400")]  # the one without common.json: its name's step


def test_resume_keys_of_the_iteration_layout(tmp_path: Path) -> None:
    """A quickstart (checkpoint: section) resumes from an iteration directory through checkpoint.load_path,
    checkpoint.no_load_optim and load_ckpt_format (safetensors: 1.9 refuses the directory as a ckpt), nothing
    else; a rank-layout checkpoint with that section, or an iteration one on a config without it, is refused in one
    line."""
    iteration_tree(tmp_path, [100])
    point = latest_checkpoint(tmp_path)
    config = write_quickstart_config(tmp_path, steps=10)
    training, _ = quickstart_parts(config)
    check_fits(point, training, 1)
    resolved = load_config(config, keys := resume_overrides(point, tmp_path, training)).resolved()
    assert [item.split("=")[0] for item in keys] == ["checkpoint.load_path", "checkpoint.no_load_optim",
                                                      "load_ckpt_format"]
    assert resolved["checkpoint"]["load_path"] == str(point.path) and resolved["checkpoint"]["no_load_optim"] is False
    assert "use_legacy_format" not in resolved and not (tmp_path / layout.RESUME_LINKS).exists()
    (tmp_path / "r").mkdir()
    legacy, _ = quickstart_parts(write_quickstart_config(tmp_path / "r", steps=10, overrides=RANK_LAYOUT))
    with pytest.raises(MsmonError, match="iteration layout"):
        check_fits(point, legacy, 1)
    checkpoint_tree(tmp_path / "r", [100])
    with pytest.raises(MsmonError, match="rank layout"):
        check_fits(latest_checkpoint(tmp_path / "r"), training, 1)


def test_records_after_the_resume_step_are_kept_aside(tmp_path: Path) -> None:
    lines = [json.dumps({"step": s, "loss": 1.0}) + "\n" for s in (10, 20, 30, 40)]
    (tmp_path / "metrics.jsonl").write_text("".join(lines) + '{"step": 50, "lo')  # a kill cut the last line
    (tmp_path / "alerts.jsonl").write_text(json.dumps({"step": 35, "detector": "stall"}) + "\n")
    (tmp_path / "metrics.csv").write_text("step,time,rank,loss\n10,1,0,1.0\n30,2,0,0.5\n")
    (tmp_path / "rank_1").mkdir()
    (tmp_path / "rank_1" / "metrics.jsonl").write_text("".join(lines))
    assert rundir.supersede(tmp_path, 20, 1) == 3 + 1 + 1 + 2
    assert [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [10, 20]
    aside = (tmp_path / "metrics.attempt-1.jsonl").read_text()
    assert aside.splitlines()[:2] == [lines[2].strip(), lines[3].strip()] and aside.endswith("\n")
    assert (tmp_path / "alerts.jsonl").read_text() == ""
    assert (tmp_path / "metrics.csv").read_text() == "step,time,rank,loss\n10,1,0,1.0\n"
    assert (tmp_path / "metrics.attempt-1.csv").read_text() == "step,time,rank,loss\n30,2,0,0.5\n"
    assert len((tmp_path / "rank_1" / "metrics.jsonl").read_text().splitlines()) == 2
    assert rundir.supersede(tmp_path, 20, 2) == 0  # nothing left after step 20


def test_run_json_lists_the_attempts_and_sums_them() -> None:
    record = begin(RunRecord(start_time="t0", status=RunStatus.RUNNING), None, AttemptReason.START)
    # 2 alerts of its ranks and the restart alert that announced its end (the supervisor counts it there)
    first = record.attempts[0].ended(status=RunStatus.FAILED, exit_code=3, last_step=95, error="E",
                                     counts={"alert_count": 3, "dropped_records": 1})
    cancelled = runinfo.finished(replace_last(record, first), RankResults(), status=RunStatus.INTERRUPTED,
                                 exit_code=130, watcher_alerts=0, error=None, internal=InternalErrors(),
                                 attempt_last_step=95)
    assert cancelled.alert_count == 3  # a signal in the back-off: the announced restart never ran, still counted
    point = ResumePoint(Path("/c"), "llama_rank_0-1_80.ckpt", "ckpt", 80, 1)
    record = begin(replace_last(record, first), point, AttemptReason.RESTART)
    assert record.to_json()["attempts"][1] == {
        "attempt": 2, "start_time": record.attempts[1].start_time, "end_time": None, "status": "running",
        "reason": "restart", "resumed_from_step": 80, "checkpoint": "/c/rank_0/llama_rank_0-1_80.ckpt"}
    done = runinfo.finished(record, RankResults(), status=RunStatus.COMPLETED, exit_code=0, watcher_alerts=1,
                            error=None, internal=InternalErrors(), attempt_last_step=None)
    assert [(a["attempt"], a["status"], a["resumed_from_step"]) for a in done.to_json()["attempts"]] == [
        (1, "failed", None), (2, "completed", 80)]
    assert done.alert_count == 3 + 1  # the attempts' alerts (the restart's among the first's), the watcher's
    assert done.dropped_records == 1
    assert RunRecord.from_json(json.loads(json.dumps(done.to_json()))) == done  # as run.json keeps it
    older = carried_over(RunRecord.from_json({"start_time": "t", "status": "running", "last_step": 5}))
    assert older[0].attempt == 1 and older[0].status is RunStatus.FAILED and "msmon itself" in (older[0].error or "")


def test_a_run_json_of_another_msmon_reads_what_it_can() -> None:
    """A value of the wrong type reads as missing; an unreadable rollback is left out; nothing raises."""
    odd = RunRecord.from_json({"status": "paused", "last_step": "ten", "pid": True, "command": "msmon run",
                               "attempts": [{"status": "completed"}, "x"], "rollbacks": [{"attempt": 1}],
                               "start_time": "2026-12-04T22:00:00+00:00", "run_name": 7})
    assert (odd.status, odd.last_step, odd.pid, odd.command, odd.run_name, odd.rollbacks) == (
        None, None, None, (), None, ())
    assert [(a.attempt, a.status) for a in odd.attempts] == [(1, RunStatus.COMPLETED)]
    assert odd.started_at is not None and odd.started_at.hour == 22


def test_resume_keeps_run_json_history_and_refuses_what_cannot_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = write_quickstart_config(tmp_path, steps=10, run_name="again", overrides=RANK_LAYOUT)
    with pytest.raises(MsmonError, match="nothing to resume at .*again: no run directory"):
        prepare(RunRequest(config=str(config), resume=True))
    _, plan = prepare(RunRequest(config=str(config)))
    assert plan is not None
    first = Supervisor(plan, say=lambda line: None, view=ViewOptions())
    first.create()
    first.finish(RunStatus.INTERRUPTED, RankResults(), error=None)
    (plan.run_dir / "metrics.jsonl").write_text('{"step": 10}\n{"step": 20}\n')
    before = sorted(p.name for p in plan.run_dir.rglob("*"))
    with pytest.raises(MsmonError, match="no complete checkpoint"):
        prepare(RunRequest(config=str(config), resume=True))
    assert sorted(p.name for p in plan.run_dir.rglob("*")) == before  # nothing created or changed
    checkpoint_tree(plan.run_dir, [10])
    result, resumed = prepare(RunRequest(config=str(config), resume=True))
    assert resumed is not None and resumed.resume_point is not None, [f.message for f in result.findings]
    assert any(line.startswith("resume from:   step 10") for line in resumed.describe())
    second = Supervisor(resumed, say=lambda line: None, view=ViewOptions())
    second.create()
    spec = second.training.spec
    assert yaml.safe_load(spec.mindformers_yaml.read_text())["resume_training"] == "llama_rank_0-1_10.ckpt"
    assert spec.attempt == Attempt(2, 10)
    second.finish(RunStatus.COMPLETED, RankResults())
    info = json.loads((plan.run_dir / "run.json").read_text())
    assert [(a["status"], a["reason"]) for a in info["attempts"]] == [("interrupted", "start"), ("completed", "resume")]
    assert info["layout"]["world_size"] == 1 and not list(plan.run_dir.glob("run.previous-*"))
    assert [json.loads(x)["step"] for x in (plan.run_dir / "metrics.jsonl").read_text().splitlines()] == [10]
    assert (plan.run_dir / "metrics.attempt-1.jsonl").read_text() == '{"step": 20}\n'


def test_a_completed_run_is_not_resumed_and_more_steps_train_it_further(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`msmon resume` of a completed run started a training that failed at once and turned the run.json of a good
    run into a failed one; now it refuses (exit 1) and changes nothing, and says how to train further."""
    monkeypatch.chdir(tmp_path)
    config = write_quickstart_config(tmp_path, steps=10, run_name="done", overrides=RANK_LAYOUT)
    _, plan = prepare(RunRequest(config=str(config)))
    assert plan is not None
    run = Supervisor(plan, say=lambda line: None, view=ViewOptions())
    run.create()
    run.finish(RunStatus.COMPLETED, RankResults())
    info = json.loads((plan.run_dir / "run.json").read_text())
    (plan.run_dir / "run.json").write_text(json.dumps({**info, "last_step": 10}))
    checkpoint_tree(plan.run_dir, [10])
    before = tree_snapshot(plan.run_dir)
    with pytest.raises(MsmonError, match=r"done completed at step 10; nothing to resume") as refused:
        prepare(RunRequest(config=str(config), resume=True))
    assert refused.value.exit_code == 1
    assert f"msmon run {config} --resume runner_config.epochs=2" in (refused.value.hint or "")
    assert tree_snapshot(plan.run_dir) == before
    _, further = prepare(RunRequest(config=str(config), overrides=["runner_config.epochs=2"], resume=True))
    assert further is not None and further.resume_point is not None and further.resume_point.step == 10


def test_the_restart_policy() -> None:
    policy = RestartPolicy(3, 10.0)
    assert [policy.delay(n) for n in (1, 2, 3, 10)] == [10.0, 20.0, 40.0, 300.0]
    crash = RunResult(RunStatus.FAILED, "the training process exited with code -9 without a result")
    assert restart_cause(crash, progressed=True) and restart_cause(crash, progressed=False) is None
    stall = StopRequest("stall: no training step has ended", "stall", 120)
    hang = RunResult(RunStatus.STOPPED_BY_MONITOR, stall.reason, stop=stall)
    assert restart_cause(hang, progressed=True)
    nan = StopRequest("NaN", "nonfinite", 5)
    nonfinite = RunResult(RunStatus.STOPPED_BY_MONITOR, nan.reason, stop=nan)
    said_stall = RunResult(RunStatus.STOPPED_BY_MONITOR, "stall at step 3: a message that names a detector")
    assert restart_cause(said_stall, progressed=True) is None  # the typed request decides, never the text
    assert restart_cause(nonfinite, progressed=True) is None
    assert restart_cause(RunResult(RunStatus.INTERRUPTED), progressed=True) is None
    assert restart_cause(RunResult(RunStatus.COMPLETED), progressed=True) is None


class _Params(dict):
    __getattr__ = dict.__getitem__


def test_the_callback_continues_the_step_count_of_a_resumed_run(tmp_path: Path) -> None:
    from engine_support import settings

    from msmon.engine.callback import StepObserver
    from msmon.engine.record import StepProgress

    records: list[dict[str, Any]] = []
    optimizer = SimpleNamespace(global_step=np.array([200], np.int32), learning_rate=None)
    network = SimpleNamespace(optimizer=optimizer)
    observer = StepObserver(settings(tmp_path, log_interval=10, track_metrics=["loss", "global_step"]),
                            StepProgress(), records.append, SimpleNamespace(stop=None))
    for step in range(1, 31):  # MindSpore counts from 1 again; mindformers restored global_step 200
        optimizer.global_step = np.array([200 + step], np.int32)
        observer.step_end(_Params(cur_step_num=step, net_outputs=1.0, train_network=network))
    assert [r["step"] for r in records] == [210, 220, 230] and records[0]["global_step"] == 210


def _record(step: int, when: float, loss: float | None = None) -> dict[str, Any]:
    """A healthy record: a loss that wobbles, a steady throughput."""
    wobble = 2.0 + 0.1 * (step // 10 % 3)
    return {"step": step, "time": when, "loss": wobble if loss is None else loss, "throughput": 1000.0 + step % 7}


def test_warm_detectors_raise_nothing_on_history_nor_at_the_restart() -> None:
    history = [_record(s, 1000.0 + s) for s in range(10, 810, 10)]
    cold = HealthMonitor(HealthSettings())
    for record in history:
        cold.observe(record)
    assert [a.detector for a in cold.observe(_record(810, 99999.0))] == ["stall"]  # no restart mark: a time gap
    warm = HealthMonitor(HealthSettings())
    assert warm.warm(history) == len(history) and warm.alerts == []
    assert warm.observe(_record(810, 99999.0)) == []  # restarted: no gap, and the compiling first log is skipped
    assert warm.observe(_record(820, 99999.0 + 10, loss=50.0)) == []  # one high loss is no spike yet...
    assert [a.detector for a in warm.observe(_record(830, 99999.0 + 20, loss=50.0))] == ["loss_spike"]  # ...two are


def test_replay_sees_the_restart_of_a_resumed_run_as_live(tmp_path: Path) -> None:
    rows = [_record(s, 1000.0 + s) for s in range(10, 410, 10)]
    rows += [_record(s, 90000.0 + s) for s in range(410, 500, 10)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    alerts, _, _ = replay(tmp_path)
    assert [a.detector for a in alerts] == ["stall"]
    attempts_json = {"attempts": [{"attempt": 1}, {"attempt": 2, "resumed_from_step": 400}]}
    (tmp_path / "run.json").write_text(json.dumps(attempts_json))
    alerts, count, _ = replay(tmp_path)
    assert alerts == [] and count == len(rows)


def test_tensorboard_hides_what_an_earlier_attempt_wrote_after_the_resume_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine_support import settings
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from msmon.engine.backends.tensorboard import TensorBoardBackend

    resumed: list[Attempt] = []

    def attempt(steps: range, value: float) -> None:
        backend = TensorBoardBackend(tmp_path, settings(tmp_path), None)
        backend.attempt = resumed[-1] if resumed else None  # as the session hands it over
        backend.prepare()
        backend.open()
        records = [{"step": s, "time": 1000.0 + s + value, "loss": value} for s in steps]
        backend.write(records)
        backend.facts.add(records)  # as the writer does after a stored write
        backend.close(RunStatus.COMPLETED)

    attempt(range(10, 100, 10), 1.0)
    time.sleep(1.1)  # event files are named by the second they were opened in
    resumed.append(Attempt(2, 50))
    attempt(range(60, 130, 10), 2.0)
    board = EventAccumulator(str(tmp_path))
    board.Reload()
    points = [(e.step, e.value) for e in board.Scalars("loss")]
    assert points == [(s, 1.0) for s in range(10, 60, 10)] + [(s, 2.0) for s in range(60, 130, 10)]


def test_msmon_resume_reads_the_recorded_command_with_msmon_runs_own_parser() -> None:
    from msmon.cli.resume import recorded_options

    options = recorded_options(["msmon", "run", "c.yaml", "a.b=1", "--worker-num", "2", "--plain",
                                "--max-restarts=3", "x='y z'", "--master-port", "9000"])
    assert options["overrides"] == ["a.b=1", "x='y z'"] and options["worker_num"] == 2
    assert options["max_restarts"] == 3 and options["master_port"] == 9000 and options["config"] == "c.yaml"
    with pytest.raises(MsmonError, match="not an `msmon run` command"):
        recorded_options(["msmon", "validate", "c.yaml"])
    flagged = recorded_options(["msmon", "run", "c.yaml", "--run_mode", "finetune", "--plain", "--seed=3"])
    assert flagged["overrides"] == ["--run_mode", "finetune", "--seed=3"]  # run_mindformer.py's flags, kept


def test_msmon_resume_replays_the_request_run_json_keeps_and_reads_an_older_one_from_its_command() -> None:
    from msmon.cli.resume import record_of_command, resumed_command
    from msmon.launch_layout import LaunchLayout
    from msmon.runner.plan import ResumeRecord

    request = RunRequest(config="c.yaml", overrides=["a.b=1", "run_mode=finetune"], max_restarts=3,
                         launch_layout=LaunchLayout(2, master_port=9000, msrun_args=("--bind_core=True",)),
                         restart_backoff_s=2.0)
    record = request.resume_record()
    assert ResumeRecord.from_json(json.loads(json.dumps(record.to_json()))) == record  # as run.json keeps it
    older = record_of_command(["msmon", "run", "c.yaml", "a.b=1", "--worker-num", "2", "--master-port", "9000",
                               "--msrun-arg=--bind_core=True", "--max-restarts", "3", "--restart-backoff", "2"])
    assert dataclasses.replace(older, overrides=record.overrides) == record and older.overrides[0] == "a.b=1"
    assert resumed_command(Path("/r/config.yaml"), record) == [
        "msmon", "run", "/r/config.yaml", "a.b=1", "run_mode=finetune", "--resume", "--worker-num=2",
        "--master-addr=127.0.0.1", "--master-port=9000", "--msrun-arg=--bind_core=True", "--max-restarts", "3",
        "--restart-backoff", "2"]
    assert list(record.to_json()) == ["overrides", "worker_num", "local_worker_num", "master_addr", "master_port",
                                      "node_rank", "msrun_args", "max_restarts", "restart_backoff_s"]
    with pytest.raises(MsmonError, match="request is unreadable: master_port, max_restarts"):
        ResumeRecord.from_json({**record.to_json(), "master_port": {"x": 1}, "max_restarts": None, "bogus": 1})


def test_every_attempt_continues_the_same_mlflow_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from engine_support import settings
    from mlflow import MlflowClient

    from msmon.config.schema import MlflowOptions
    from msmon.engine.backends.mlflow import MlflowBackend

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    options = settings(tmp_path, monitor_type=["mlflow"], mlflow=MlflowOptions(tracking_uri=uri))

    resumed: list[Attempt] = []

    def attempt(config: dict[str, Any], steps: range) -> str | None:
        backend = MlflowBackend(tmp_path, options, config)
        backend.attempt = resumed[-1] if resumed else None  # as the session hands it over
        backend.prepare()
        backend.open()
        records = [{"step": s, "time": 1000.0 + s, "loss": 1.0} for s in steps]
        backend.write(records)
        backend.facts.add(records)  # as the writer does after a stored write
        backend.close(RunStatus.COMPLETED)
        return backend.run_id

    first = attempt({"seed": 0, "resume_training": False}, range(10, 60, 10))
    kept = [{"step": s, "time": 1000.0 + s, "loss": 0.5} for s in range(10, 40, 10)]  # the run's metrics.jsonl
    (tmp_path / layout.METRICS).write_text("".join(json.dumps(r) + "\n" for r in kept))
    resumed.append(Attempt(2, 30))
    second = attempt({"seed": 0, "resume_training": "llama_rank_0-1_30.ckpt", "load_checkpoint": "/c"},
                     range(40, 90, 10))
    assert first is not None and second == first
    run = MlflowClient(tracking_uri=uri).get_run(first)
    assert run.info.status == "FINISHED" and run.data.tags["msmon.attempt"] == "2"
    assert run.data.tags["msmon.status"] == "completed"
    # the results cover the whole run: the best loss is one the first attempt logged before the resume step
    assert (run.data.metrics["best_loss"], run.data.metrics["final_loss"], run.data.metrics["steps"]) == (0.5, 1.0, 80)
    assert run.data.params["resume_training"] == "False" and run.data.params["load_checkpoint"] == "/c"
    assert json.loads((tmp_path / layout.MLFLOW_RUN).read_text())["run_id"] == first


def test_after_a_rollback_mlflow_shows_the_curve_that_survived(tmp_path: Path) -> None:
    """MLflow cannot drop logged values: the attempt after a rollback writes a new MLflow run holding the records
    kept up to the checkpoint's step and its own, linked both ways to the run it supersedes."""
    from engine_support import settings
    from mlflow import MlflowClient

    from msmon.config.schema import MlflowOptions
    from msmon.engine.backends.mlflow import MlflowBackend

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    options = settings(tmp_path, monitor_type=["mlflow"], mlflow=MlflowOptions(tracking_uri=uri))

    def attempt(number: Attempt | None, steps: range, loss: float) -> str | None:
        backend = MlflowBackend(tmp_path, options, {"seed": 0})
        backend.attempt = number
        backend.prepare()
        backend.open()
        records = [{"step": s, "time": 1000.0 + s, "loss": loss} for s in steps]
        backend.write(records)
        backend.facts.add(records)
        backend.close(RunStatus.COMPLETED if number else RunStatus.STOPPED_BY_MONITOR)
        return backend.run_id

    first = attempt(None, range(10, 60, 10), 1.0)  # the spike: steps 40 and 50 rolled back
    kept = [{"step": s, "time": 1000.0 + s, "loss": 1.0} for s in range(10, 40, 10)]
    (tmp_path / layout.METRICS).write_text("".join(json.dumps(r) + "\n" for r in kept))
    second = attempt(Attempt(2, 30, rolled_back=True), range(40, 70, 10), 0.5)
    assert first is not None and second is not None and second != first
    client = MlflowClient(tracking_uri=uri)
    history = [(m.step, m.value) for m in client.get_metric_history(second, "loss")]
    assert sorted(history) == [(10, 1.0), (20, 1.0), (30, 1.0), (40, 0.5), (50, 0.5), (60, 0.5)]
    assert client.get_run(second).data.tags["msmon.continues"] == first
    assert client.get_run(first).data.tags["msmon.superseded_by"] == second
    assert json.loads((tmp_path / layout.MLFLOW_RUN).read_text())["run_id"] == second
    assert client.get_run(second).data.tags["msmon.attempt"] == "2"


@pytest.mark.training
@pytest.mark.board
def test_mindinsight_shows_a_resumed_run_as_one_curve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MindInsight's own server shows one curve; its own lineage reader the last attempt's status and results over
    the whole run (the first attempt was killed: it never closed)."""
    from engine_support import MindInsightServer, settings, wait_until
    from mindinsight.lineagemgr.model import filter_summary_lineage

    from msmon.engine.backends.mindinsight import MindInsightBackend

    run_dir = tmp_path / "p" / "r"

    resumed: list[Attempt] = []

    def attempt(steps: range, value: float, close: bool) -> None:
        backend = MindInsightBackend(run_dir, settings(tmp_path, monitor_type=["mindinsight"]), {"seed": 0})
        backend.attempt = resumed[-1] if resumed else None  # as the session hands it over
        backend.prepare()
        backend.open()
        records = [{"step": s, "time": 1000.0 + s, "loss": value} for s in steps]
        backend.write(records)
        backend.facts.add(records)  # as the writer does after a stored write
        if close:
            backend.close(RunStatus.COMPLETED)
        else:  # a killed process: what was written is on disk, nothing more
            backend.flush()

    attempt(range(10, 100, 10), 1.0, close=False)
    kept = [{"step": s, "time": 1000.0 + s, "loss": 1.0} for s in range(10, 60, 10)]  # the run's metrics.jsonl
    (run_dir / layout.METRICS).write_text("".join(json.dumps(r) + "\n" for r in kept))
    time.sleep(1.1)  # summary files are named by the second they were opened in
    resumed.append(Attempt(2, 50))
    attempt(range(60, 130, 10), 2.0, close=True)
    assert len([p for p in run_dir.glob("*.summary.*") if not p.name.endswith("_lineage")]) == 2
    server = MindInsightServer(tmp_path / "p")
    expected = [(s, 1.0) for s in range(10, 60, 10)] + [(s, 2.0) for s in range(60, 130, 10)]
    try:
        def points() -> list[tuple[int, float]]:
            return [(m["step"], m["value"]) for m in server.scalars("./r", "loss")]

        assert wait_until(lambda: points() == expected, 90), points()
    finally:
        server.stop()
    (lineage,) = filter_summary_lineage(summary_base_dir=str(tmp_path / "p"))["object"]
    model = lineage["model_lineage"]
    assert model["user_defined"]["status"] == "completed"
    assert model["metric"] == {"final_loss": 2.0, "best_loss": 1.0, "steps": 120}
