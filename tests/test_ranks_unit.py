"""Every rank counts, the logic: the pipeline rank rule and mindformers' loss correction (checked against
mindformers' own functions), each rank's heartbeat, the diagnosis of a stalled run, stack capture with real
signals, and the rank watcher of ``msmon run`` on heartbeat files."""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import run_msmon
from helpers_training import write_quickstart_config

from msmon.anomaly import StopRequest
from msmon.compat import PipelineLayout, expected_world_size, pipeline_layout
from msmon.config.schema import MonitorSettings
from msmon.engine.rank_heartbeat import RankHeartbeat
from msmon.engine.record import StepProgress
from msmon.ops.rank_summary import summarize
from msmon.ops.ranks import diagnose, rank_states, read_heartbeats
from msmon.ops.ranks import report as ranks_report
from msmon.runner import stacks
from msmon.runner.rank_watch import RankWatcher

# (world size, pipeline stages) as mindformers' shipped configs lay them out (1.9: qwen3 32b on 16 devices with pp 4,
# deepseek-style 8-device examples with pp 2 and 4, one stage per device, and data parallel only)
LAYOUTS = [(16, 4), (8, 2), (8, 4), (8, 8), (32, 4), (64, 8), (4, 2), (2, 2), (8, 1), (1, 1)]


@pytest.fixture(scope="module")
def mf_utils():
    """mindformers' own rank rule (``is_last_pipeline_stage``) with the group size and rank it reads patched."""
    import mindspore as ms
    from mindformers.tools import utils

    saved = utils.get_real_group_size, utils.get_real_rank
    yield ms, utils
    utils.get_real_group_size, utils.get_real_rank = saved
    ms.reset_auto_parallel_context()


@pytest.mark.parametrize(("world", "stages"), LAYOUTS)
def test_the_last_stage_is_mindformers_last_stage(mf_utils, world: int, stages: int) -> None:
    ms, utils = mf_utils
    ms.set_auto_parallel_context(pipeline_stages=stages)
    utils.get_real_group_size = lambda: world
    theirs = []
    for rank in range(world):
        utils.get_real_rank = lambda rank=rank: rank
        if utils.is_last_pipeline_stage():
            theirs.append(rank)
    layout = PipelineLayout(world, stages)
    assert list(layout.loss_ranks) == (theirs if stages > 1 else list(range(world)))
    assert layout.loss_rank == (utils.get_pipeline_rank_ids()[-1] if stages > 1 else 0)  # the last stage's first
    assert [layout.stage_of(r) for r in range(world)] == [r // (world // stages) for r in range(world)]


def test_zero_bubble_v_keeps_the_loss_on_rank_zero_and_odd_layouts_fall_back() -> None:
    assert PipelineLayout(16, 4, zero_bubble_v=True).loss_rank == 0
    assert list(PipelineLayout(16, 4, zero_bubble_v=True).loss_ranks) == [0, 1, 2, 3]
    odd = PipelineLayout(6, 4)  # mindformers' get_pipeline_rank_ids gives [-1]: msmon keeps rank 0
    assert not odd.valid and odd.loss_rank == 0 and "do not divide" in odd.describe()
    assert PipelineLayout(8, 2).describe().startswith("rank 4: the first rank of the last of 2 pipeline stages")


def test_pipeline_layout_reads_the_config_as_mindformers_does() -> None:
    config = {"use_parallel": True, "parallel_config": {"data_parallel": 2, "model_parallel": 2, "pipeline_stage": 4},
              "parallel": {"pipeline_config": {"pipeline_interleave": True, "pipeline_scheduler": "zero_bubble_v"}}}
    assert pipeline_layout(config, 16) == PipelineLayout(16, 4, True)
    assert expected_world_size(config) == 16
    assert pipeline_layout({**config, "use_parallel": False}, 16).stages == 1  # ParallelOperator: only when parallel
    assert pipeline_layout({"parallel_config": {"pipeline_stage": True}, "use_parallel": True}, 2).stages == 1


def test_validate_and_dry_run_show_which_rank_the_metrics_come_from(tmp_path: Path) -> None:
    config = write_quickstart_config(tmp_path, steps=10, overrides={
        "use_parallel": True, "parallel_config.data_parallel": 2, "parallel_config.pipeline_stage": 4,
        "parallel_config.micro_batch_num": 4})
    env = {"MSMON_HOME": str(tmp_path / "home"), "MSMON_CACHE_DIR": str(tmp_path / "cache")}
    shown = "rank 6: the first rank of the last of 4 pipeline stages, ranks 6-7 of 8; the other stages hold no loss"
    checked = run_msmon("validate", str(config), "--worker-num", "8", cwd=tmp_path, env=env)  # as run: its ranks
    assert checked.code == 0 and f"metrics from: {shown}" in checked.stdout, checked.stdout + checked.stderr
    plan = run_msmon("run", str(config), "--dry-run", "--worker-num", "8", cwd=tmp_path, env=env)
    assert plan.code == 0 and f"metrics from:  {shown}" in plan.stdout, plan.stdout + plan.stderr
    alone = run_msmon("run", str(config), "--dry-run", "use_parallel=False", cwd=tmp_path, env=env)
    assert alone.code == 0 and "metrics from:  rank 0" in alone.stdout, alone.stdout + alone.stderr


def expected_loss(raw: float, stages: int, micro: int, interleave: int, accumulation: int, per_token: bool) -> float:
    """MFLossMonitor._fix_loss_for_parallel as its docstring and the issue state it."""
    if stages > 1 and not per_token:
        raw /= micro
    if interleave > 1:
        raw /= interleave
    if accumulation > 1 and not per_token:
        raw /= accumulation
    return raw


ZBV = {"pipeline_interleave": True, "pipeline_scheduler": "zero_bubble_v"}
CASES = list(itertools.product((1, 2), (1, 4), (1, 2), (1, 3), (False, True), (False, True)))


@pytest.mark.parametrize(("stages", "micro", "interleave", "accumulation", "per_token", "zbv"), CASES)
def test_msmon_corrects_the_loss_exactly_as_mflossmonitor(mf_utils, stages, micro, interleave, accumulation,
                                                          per_token, zbv) -> None:
    from mindformers.core.callback.callback import MFLossMonitor

    from msmon.engine.step_outputs import resolve_fix

    ms, _ = mf_utils
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(pipeline_stages=stages, parallel_mode="semi_auto_parallel")
    if zbv:
        ms.set_auto_parallel_context(pipeline_config=ZBV)
    monitor = MFLossMonitor(micro_batch_num=micro, micro_batch_interleave_num=interleave,
                            gradient_accumulation_steps=accumulation, calculate_per_token_loss=per_token)
    raw = 7.25 * micro * interleave * accumulation
    want = expected_loss(raw, stages, micro, interleave, accumulation, per_token)
    assert monitor._fix_loss_for_parallel(raw) == pytest.approx(want, rel=1e-12)  # the rule, as mindformers has it
    fix = resolve_fix([object(), monitor], None)  # the run's own MFLossMonitor
    assert (fix(raw) if fix else raw) == pytest.approx(want, rel=1e-12)
    assert (fix is None) == (want == raw)  # nothing to correct: no per-log cost
    # without an MFLossMonitor: the same function with the values the Trainer gives it (it drops the accumulation
    # steps under pipeline stages)
    config = {"parallel_config": {"micro_batch_num": micro}, "micro_batch_interleave_num": interleave,
              "runner_config": {"gradient_accumulation_steps": accumulation}, "calculate_per_token_loss": per_token}
    fix = resolve_fix([], config)
    trainer = expected_loss(raw, stages, micro, interleave, accumulation if stages == 1 else 1, per_token)
    assert (fix(raw) if fix else raw) == pytest.approx(trainer, rel=1e-12)


def test_without_semi_auto_parallel_the_trainer_drops_the_accumulation(mf_utils) -> None:
    from msmon.engine.step_outputs import resolve_fix

    ms, _ = mf_utils
    ms.reset_auto_parallel_context()  # stand_alone / data_parallel: BaseTrainer resets gradient_accumulation_steps
    config = {"micro_batch_interleave_num": 2, "runner_config": {"gradient_accumulation_steps": 4}}
    fix = resolve_fix([], config)
    assert fix is not None and fix(8.0) == 4.0


# -- heartbeats ------------------------------------------------------------------------------------------------
def test_rank_heartbeat_keeps_steps_liveness_and_the_last_nonfinite_values(tmp_path: Path) -> None:
    progress = StepProgress()
    beat = RankHeartbeat(tmp_path, progress, 3, log_interval=1, interval_s=0.05)
    beat.start()
    progress.training_thread = 1234
    progress.begun_step, progress.begun_monotonic = 7, time.monotonic()
    progress.last_step, progress.last_end_monotonic = 6, time.monotonic()
    progress.add_step_seconds(5.0)  # step 1: compilation, left out at log_interval 1
    progress.add_step_seconds(0.25)
    beat.on_record({"step": 5, "time": 1.0, "loss": math.nan, "grad_norm": 2.0, "learning_rate": 1e-3})
    beat.on_record({"step": 6, "time": 2.0, "loss": 1.5, "grad_norm": 2.0})
    first = json.loads((tmp_path / "heartbeats" / "rank_3.json").read_text())
    time.sleep(0.3)
    data = read_heartbeats(tmp_path)[3]
    assert first["state"] == "starting" and data["state"] == "training" and data["alive"] > first["alive"]
    assert (data["begun"], data["ended"], data["thread"]) == (7, 6, 1234)
    assert data["step_seconds"] == [0.25]
    assert math.isnan(data["nonfinite"]["loss"]) and data["logged"] == {"step": 6, "time": 2.0, "loss": 1.5,
                                                                        "grad_norm": 2.0}
    beat.stop("completed")
    assert read_heartbeats(tmp_path)[3]["state"] == "completed"


def test_the_heartbeat_keeps_the_step_a_divergence_began(tmp_path: Path) -> None:
    """The parent may read the file several logging steps late: ``nonfinite`` stays the first non-finite record
    until the values are finite again (a grad norm alone on an overflow step does not count)."""
    beat = RankHeartbeat(tmp_path, StepProgress(), 1)
    beat.on_record({"step": 5, "loss": 2.0, "grad_norm": math.inf, "overflow": True})
    assert beat.snapshot()["nonfinite"] is None
    for step in (15, 20, 25):
        beat.on_record({"step": step, "loss": math.nan, "grad_norm": 1.0})
    assert beat.snapshot()["nonfinite"]["step"] == 15 and beat.snapshot()["logged"]["step"] == 25
    beat.on_record({"step": 30, "loss": 2.0, "grad_norm": 1.0})
    beat.on_record({"step": 35, "loss": 2.0, "grad_norm": math.inf})
    beat.on_record({"step": 40, "loss": math.nan, "grad_norm": math.inf})
    assert beat.snapshot()["nonfinite"]["step"] == 35


def beat(begun: int, ended: int, now: float, *, alive_age: float = 0.5, begun_ago: float = 5.0,
         ended_ago: float = 6.0, state: str = "training", **extra) -> dict:
    return {"state": state, "alive": now - alive_age, "begun": begun, "begun_time": now - begun_ago, "ended": ended,
            "ended_time": now - ended_ago, **extra}


def test_diagnosis_names_the_rank_behind_and_how() -> None:
    now = 1000.0
    behind = {0: beat(812, 811, now, begun_ago=41), 1: beat(811, 811, now, begun_ago=60), 2: beat(812, 811, now)}
    result = diagnose(rank_states(behind, now), now)
    assert result.lines == ["rank 1 has not begun step 812 (others began it 41.0s ago)"] and result.culprits == [1]
    still = {0: beat(813, 812, now, ended_ago=30), 1: beat(812, 811, now, ended_ago=80)}
    assert diagnose(rank_states(still, now), now).lines == ["rank 1 is still in step 812 (others ended it 30.0s ago)"]
    frozen = {0: beat(812, 811, now), 3: beat(812, 811, now, alive_age=25.0)}
    result = diagnose(rank_states(frozen, now, world_size=4, stopped=frozenset({2})), now)
    assert result.lines[0].startswith("rank 1 has no heartbeat")
    assert "rank 2 is stopped (the process is stopped: SIGSTOP or a debugger)" in result.lines
    assert "rank 3 is not responding (process stopped or frozen: no heartbeat for 25.0s)" in result.lines
    assert result.culprits == [1, 2, 3]
    same = {r: beat(812, 811, now) for r in range(3)}
    assert "all in step 812, none ahead" in diagnose(rank_states(same, now), now).lines[0]
    assert diagnose(rank_states({0: beat(9, 9, now)}, now), now).lines == ["rank 0 is between steps 9 and 10"]
    states = rank_states({0: beat(5, 5, now), 1: beat(5, 4, now, alive_age=30)}, now)
    assert [s.state for s in states] == ["after step 5", "not responding"]
    assert summarize(states).cell() == "2 ranks: 1 ok; rank 1 not responding 30s"
    assert summarize(rank_states(same, now)).cell() == "3 ranks ok"


# -- stacks -----------------------------------------------------------------------------------------------------
CHILD = """
import sys, time
sys.path.insert(0, {repo!r})
from pathlib import Path
from msmon.runner import stacks
stacks.register(Path({run_dir!r}), 1)
def stuck_here():
    print("ready", flush=True)
    time.sleep(60)
stuck_here()
"""


def test_a_rank_writes_its_stack_on_the_signal_and_the_frame_is_named(tmp_path: Path) -> None:
    repo = str(Path(__file__).resolve().parents[1])
    child = subprocess.Popen([sys.executable, "-c", CHILD.format(repo=repo, run_dir=str(tmp_path))],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        texts = stacks.capture(tmp_path, {1: psutil.Process(child.pid)}, "test")
    finally:
        child.kill()
        child.wait()
    frame = stacks.innermost_frame(texts[1], None)
    assert frame is not None and frame.function == "stuck_here" and frame.file == "<string>"
    assert "--- test ---" in (tmp_path / "stacks" / "rank_1.txt").read_text()
    stacks.remove_unused(tmp_path, [1])
    assert (tmp_path / "stacks" / "rank_1.txt").exists()  # not empty: kept


def test_innermost_frame_skips_msmon_and_picks_the_training_thread() -> None:
    msmon_file = str(Path(stacks.__file__))
    text = (f'Thread 0x0000000000000010 (most recent call first):\n  File "{msmon_file}", line 3 in tick\n'
            '  File "/x/threading.py", line 9 in run\n\n'
            f'Current thread 0x0000000000000020 (most recent call first):\n  File "{msmon_file}", line 5 in step_end\n'
            '  File "/u/cb.py", line 7 in on_train_step_end\n  File "/m/model.py", line 1 in train\n')
    assert str(stacks.innermost_frame(text, 0x20)) == "/u/cb.py:7 in on_train_step_end"
    assert str(stacks.innermost_frame(text, 0x10)) == "/x/threading.py:9 in run"


# -- the rank watcher on heartbeat files -------------------------------------------------------------------------
def watcher(run_dir: Path, **health) -> RankWatcher:
    settings = MonitorSettings()
    stall = {"timeout_s": 2.0, "poll_s": 0.05, **health}
    from msmon.config.coerce import build

    settings, findings = build(MonitorSettings, {"health": {"stall": stall}}, "monitor_config")
    assert not findings
    return RankWatcher(run_dir, settings, {}, pipeline=PipelineLayout(2), writer_rank=0, node_rank=None)


def poll(watch: RankWatcher, stopped: list[StopRequest]) -> None:
    """One poll as the supervisor makes it (no local rank); each new stop the watcher asks for goes in ``stopped``."""
    stop = watch.poll({})
    if stop is not None and not any(earlier is stop for earlier in stopped):
        stopped.append(stop)


def write_beats(run_dir: Path, beats: dict[int, dict]) -> None:
    (run_dir / "heartbeats").mkdir(parents=True, exist_ok=True)
    for rank, data in beats.items():
        (run_dir / "heartbeats" / f"rank_{rank}.json").write_text(json.dumps(data))


def alerts(run_dir: Path) -> list[dict]:
    path = run_dir / "alerts.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_the_watcher_raises_one_stall_alert_naming_the_rank(tmp_path: Path) -> None:
    stopped: list[StopRequest] = []
    watch = watcher(tmp_path)
    now = time.time()
    write_beats(tmp_path, {0: beat(21, 20, now, ended_ago=1.0), 1: beat(20, 20, now, ended_ago=1.0)})
    poll(watch, stopped)
    assert alerts(tmp_path) == []  # 1 s idle, timeout 2 s
    write_beats(tmp_path, {0: beat(21, 20, now, ended_ago=3.0, step_seconds=[0.1]),
                           1: beat(20, 20, now, ended_ago=3.0, begun_ago=4.0)})
    for _ in range(3):
        watch._next = 0.0
        poll(watch, stopped)
    found = alerts(tmp_path)
    assert len(found) == 1 and found[0]["detector"] == "stall" and found[0]["step"] == 20
    assert "rank 1 has not begun step 21" in found[0]["message"] and found[0]["values"]["stuck_ranks"] == [1]
    assert watch.alert_count == 1 and stopped == []


def test_the_stall_names_the_last_step_the_records_and_heartbeats_say_ended(tmp_path: Path) -> None:
    """A process frozen just after a log keeps a heartbeat up to a second old: it said "last step 43 ended" while step
    50 was logged after it. The alert and `msmon status` name step 50 and its time."""
    stopped: list[StopRequest] = []
    watch = watcher(tmp_path)
    now = time.time()
    write_beats(tmp_path, {0: beat(44, 43, now, alive_age=20.0, ended_ago=20.0, step_seconds=[0.02])})
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 50, "time": now - 19.5, "rank": 0, "loss": 2.0}) + "\n")
    poll(watch, stopped)
    found = alerts(tmp_path)
    assert [a["step"] for a in found] == [50], found
    assert "last step 50 ended" in found[0]["message"] and found[0]["values"]["last_step_time"] == now - 19.5
    state = ranks_report(tmp_path, now).states[0]
    assert (state.ended, state.ended_time) == (50, now - 19.5)
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 40, "time": now - 21, "rank": 0}) + "\n")
    assert ranks_report(tmp_path, now).states[0].ended == 43  # an older record changes nothing


def test_the_watcher_is_quiet_once_every_planned_step_has_ended(tmp_path: Path) -> None:
    """Closing (the last checkpoint, the backends) may take longer than the timeout: no stall after the last step."""
    watch = watcher(tmp_path)
    now = time.time()
    write_beats(tmp_path, {r: beat(30, 30, now, ended_ago=60.0, total_steps=30, step_seconds=[0.1]) for r in (0, 1)})
    poll(watch, [])
    assert alerts(tmp_path) == []
    write_beats(tmp_path, {r: beat(30, 29, now, ended_ago=60.0, total_steps=30, step_seconds=[0.1]) for r in (0, 1)})
    watch._next = 0.0
    poll(watch, [])
    assert [a["detector"] for a in alerts(tmp_path)] == ["stall"]  # the control: one step short, it is a stall


def test_no_stall_before_the_first_step_with_a_short_timeout(tmp_path: Path) -> None:
    watch = watcher(tmp_path, first_step_timeout_s=100.0)
    watch._started -= 30.0  # 30 s of compilation
    write_beats(tmp_path, {0: {"state": "starting", "alive": time.time(), "begun": 0, "ended": 0}})
    poll(watch, [])
    assert alerts(tmp_path) == []


def test_the_watcher_names_a_rank_whose_loss_is_nan(tmp_path: Path) -> None:
    watch = watcher(tmp_path)
    now = time.time()
    nan = {"step": 30, "time": now, "loss": math.nan, "grad_norm": 1.0}
    write_beats(tmp_path, {0: beat(31, 30, now, ended_ago=0.1, logged={"step": 30, "loss": 2.0}),
                           1: beat(31, 30, now, ended_ago=0.1, logged=nan, nonfinite=nan)})
    poll(watch, [])
    found = alerts(tmp_path)
    assert [a["detector"] for a in found] == ["nonfinite"]
    assert found[0]["message"].startswith("rank 1: loss is NaN") and found[0]["values"]["rank"] == 1
    watch._next = 0.0
    poll(watch, [])  # the same record again: no second alert
    assert len(alerts(tmp_path)) == 1


def test_a_late_read_names_the_step_the_nan_began(tmp_path: Path) -> None:
    watch = watcher(tmp_path)
    now = time.time()
    write_beats(tmp_path, {0: beat(31, 30, now, ended_ago=0.1, logged={"step": 30, "loss": 2.0}),
                           1: beat(31, 30, now, ended_ago=0.1, logged={"step": 30, "loss": math.nan},
                                   nonfinite={"step": 15, "loss": math.nan})})
    poll(watch, [])
    assert [a["step"] for a in alerts(tmp_path)] == [15]


def test_a_pipeline_stage_without_the_loss_is_judged_on_its_grad_norm_only(tmp_path: Path) -> None:
    watch = watcher(tmp_path)
    watch.pipeline, watch.writer_rank = PipelineLayout(4, 2), 2
    now = time.time()
    write_beats(tmp_path, {0: beat(3, 2, now, ended_ago=0.1, nonfinite={"step": 2, "loss": math.nan})})
    poll(watch, [])
    assert alerts(tmp_path) == []


def test_a_restarted_attempt_is_watched_afresh(tmp_path: Path) -> None:
    """After a restart the dead attempt's heartbeats (still "training", their last step long ago) are gone: no stall
    while the new attempt starts; the same stall again is reported again and stops the run again."""
    stopped: list[StopRequest] = []
    watch = watcher(tmp_path, first_step_timeout_s=100.0, action="stop")
    now = time.time()
    write_beats(tmp_path, {0: beat(71, 70, now, ended_ago=3.0, step_seconds=[0.1]),
                           1: beat(71, 70, now, ended_ago=3.0, step_seconds=[0.1])})
    poll(watch, stopped)
    assert [a["step"] for a in alerts(tmp_path)] == [70]
    dead = {r: beat(71, 70, now, ended_ago=30.0, step_seconds=[0.1]) for r in (0, 1)}
    write_beats(tmp_path, dead)
    watch.restart()
    assert not list((tmp_path / "heartbeats").glob("rank_*.json"))
    poll(watch, stopped)
    assert len(alerts(tmp_path)) == 1  # the new attempt compiles: only first_step_timeout_s applies
    write_beats(tmp_path, dead)  # the new attempt hangs at the same step
    watch._next = 0.0
    poll(watch, stopped)
    assert [a["step"] for a in alerts(tmp_path)] == [70, 70] and len(stopped) == 2
