"""`msmon probe RUN profile` on a running quickstart, with the real Trainer and MindSpore's own profiler (the
mechanism's units: tests/test_probe_units.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from msmon import layout
from msmon.probe import ProbeMark, ProbeState, read_marks, read_request
from msmon.probe.summary import ProfileSummary

pytestmark = pytest.mark.training

INTERVAL = 10


def test_a_profile_probe_measures_five_steps_of_a_running_quickstart_and_changes_nothing(canonical,
                                                                                        tmp_path: Path) -> None:
    """The canonical seed-1 legacy quickstart trained again, logging every 10 steps (with the layer summaries); once
    it has logged step 30, `msmon probe RUN profile --steps 5`: rank 0 profiles exactly 5 steps from the step after
    its next logging step, the profiler's output and msmon's summary (operators in every step) land in
    profiles/<from>-<to>/rank_0/, the request is marked done, `msmon status` lists it. Then `msmon probe RUN
    distributions --logs 2`: histograms of each group's weights, updates and gradients at the next 2 logging steps in
    distributions/<from>-<to>/rank_0/ (msmon's file, TensorBoard's, MindSpore's summary), whose sums of squares are
    the layer summaries' weight norms and update ratios, and the global grad norm after clipping. Then SIGINT after
    the step-100 checkpoint (exit 130) and `msmon resume`: the run ends with the canonical run's loss and grad norm
    at every logged step, and `msmon compare RUN REF --assert --exact` says so (exit 0, bit for bit); against the
    seed-0 run (completed_legacy) it exits 6 naming the first common logged step and the loss. A training of its
    own: a run probed live, interrupted and resumed (the probes change nothing; a resume continues the same curve bit
    for bit)."""
    import signal

    from conftest import run_msmon
    from launch import Launched, msmon_env, records

    from msmon.runner.checkpoints import latest_checkpoint

    reference = canonical("reference_seed1_legacy")
    run_dir = tmp_path / "runs" / "canonical" / "probed"
    metrics = "[loss,grad_norm,learning_rate,global_step,step_time_ms,layer_update_ratio]"
    overrides = ["monitor_config.run_name=probed", f"monitor_config.save_dir={tmp_path / 'runs'}",
                 f"monitor_config.log_interval={INTERVAL}", f"tensorboard.tensorboard_dir={tmp_path / 'tb'}",
                 f"monitor_config.track_metrics={metrics}"]
    run = Launched.start(tmp_path, "run", str(reference.config), "--plain", *overrides, env=msmon_env(tmp_path),
                         cwd=reference.cwd)
    try:
        logged = run.wait_for(lambda: (rows := records(run_dir)) and rows[-1]["step"] >= 30 and rows[-1]["step"])
        asked = run_msmon("probe", str(run_dir), "profile", "--steps", "5", cwd=tmp_path)
        assert asked.code == 0, asked.stderr
        request = read_request(run_dir)
        assert request is not None and asked.stdout.startswith(f"requested {request.id}: a profile of 5 step(s)")
        mark = run.wait_for(lambda: read_marks(run_dir, request.id).get(0))
        asked = run_msmon("probe", str(run_dir), "distributions", "--logs", "2", cwd=tmp_path)
        assert asked.code == 0, asked.stderr
        histograms = read_request(run_dir)
        assert histograms is not None and histograms.id != request.id
        assert asked.stdout.startswith(f"requested {histograms.id}: a distributions probe at 2 logging step(s)")
        taken = run.wait_for(lambda: read_marks(run_dir, histograms.id).get(0))
        run.wait_for(lambda: (rows := records(run_dir)) and rows[-1]["step"] >= 110
                     and (point := latest_checkpoint(run_dir)) is not None and point.step >= 100)
        run.proc.send_signal(signal.SIGINT)
        assert run.finish(kill=False) == 130, run.stderr[-2000:]
        assert run.left_behind() == []
    finally:
        run.kill()
    resumed = run_msmon("resume", str(run_dir), "--plain", cwd=reference.cwd, timeout=900)
    assert resumed.code == 0, resumed.stderr[-2000:]
    same = run_msmon("compare", str(run_dir), str(reference.run_dir), "--assert", "--exact", cwd=tmp_path)
    assert same.code == 0, same.stderr
    assert "bit for bit at every common logged step (20)" in same.stdout
    other = run_msmon("compare", str(run_dir), str(canonical("completed_legacy").run_dir), "--assert", "--exact",
                      cwd=tmp_path)
    assert other.code == 6 and "loss parts at step 10:" in other.stderr, other.stderr
    assert "Traceback" not in other.stderr

    assert mark.state is ProbeState.DONE, mark
    first, last = mark.first_step, mark.last_step
    assert first is not None and last is not None and last - first + 1 == 5
    assert (first - 1) % INTERVAL == 0 and first - 1 >= logged  # from the step after a logging step, not earlier
    profile = run_dir / layout.PROFILES / f"{first}-{last}" / "rank_0"
    assert mark.output == str(profile.relative_to(run_dir))
    summary = ProfileSummary.from_json(json.loads((profile / layout.PROFILE_SUMMARY).read_text()))
    assert summary.complete and [s.step for s in summary.steps] == list(range(first, last + 1))
    assert summary.op_types and summary.top_operators and summary.op_total_ms > 0
    assert all((s.ops or 0) > 0 and (s.op_ms or 0) > 0 and s.wall_ms > 0 for s in summary.steps)
    assert len({s.ops for s in summary.steps}) == 1  # the same graph every step: the calls split by step exactly
    (output,) = summary.profiler_output
    trace = json.loads((profile / output / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text())
    assert any(event.get("ph") == "X" for event in trace)  # a Chrome trace: chrome://tracing and Perfetto open it
    assert sorted(p.name for p in (run_dir / layout.PROFILES).iterdir()) == [f"{first}-{last}"]

    probed = {r["step"]: r for r in records(run_dir)}
    canon = {r["step"]: r for r in reference.records()}
    assert sorted(probed) == list(range(INTERVAL, 201, INTERVAL))
    for step, row in probed.items():
        assert (row["loss"], row["grad_norm"]) == (canon[step]["loss"], canon[step]["grad_norm"]), step

    check_distributions(run_dir, taken, probed)
    status = run_msmon("status", str(run_dir), cwd=tmp_path)
    assert f"profiles: {mark.output}" in status.stdout and f"distributions: {taken.output}" in status.stdout
    assert f"rank 0: done steps {taken.first_step}-{taken.last_step}" in status.stdout
    again = run_msmon("probe", str(run_dir), "profile", cwd=tmp_path)
    assert again.code != 0 and "the run is not running (status: completed)" in again.stderr


def check_distributions(run_dir: Path, mark: ProbeMark, records: dict[int, dict[str, Any]]) -> None:
    """The distributions probe's window (the next 2 logs), its three files, and its figures against the records'
    layer summaries at the same steps."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from test_distributions_probe_unit import summary_histograms

    assert mark.state is ProbeState.DONE, mark
    first, last = mark.first_step, mark.last_step
    assert first is not None and last is not None and (first - 1) % INTERVAL == 0 and last - first + 1 == 2 * INTERVAL
    steps = [first - 1 + INTERVAL, first - 1 + 2 * INTERVAL]
    directory = run_dir / layout.DISTRIBUTIONS / f"{first}-{last}" / "rank_0"
    assert mark.output == str(directory.relative_to(run_dir))
    lines = [json.loads(line) for line in (directory / layout.DISTRIBUTIONS_FILE).read_text().splitlines()]
    assert [line["step"] for line in lines] == steps
    groups = ("embedding", "layers.0", "layers.1", "final_norm", "head")
    for line in lines:
        row = records[line["step"]]
        gradient = math.sqrt(sum(line["histograms"][f"gradients/{group}"]["sum_squares"] for group in groups))
        assert gradient == pytest.approx(min(row["grad_norm"], 1.0), rel=1e-4)  # after clipping at max_grad_norm 1
        for group in groups:
            weights, updates = line["histograms"][f"weights/{group}"], line["histograms"][f"updates/{group}"]
            assert weights["count"] == updates["count"] == sum(weights["counts"]) > 0
            norm = math.sqrt(weights["sum_squares"])
            assert norm == pytest.approx(row[f"weight_norm/{group}"], rel=1e-6)
            assert math.sqrt(updates["sum_squares"]) / norm == pytest.approx(row[f"update_ratio/{group}"], rel=1e-4)
            assert list(weights["quantiles"].values()) == sorted(weights["quantiles"].values())
    events = EventAccumulator(str(directory), size_guidance={"histograms": 0})
    events.Reload()
    assert len(events.Tags()["histograms"]) == 15 and [e.step for e in events.Histograms("updates/layers.1")] == steps
    assert [e.step for e in events.Histograms("gradients/layers.1")] == steps
    assert sorted(summary_histograms(directory)) == steps


def test_on_the_mcore_model_a_profile_is_taken_then_ctrl_c_inside_a_second_window_exits_130(tmp_path: Path) -> None:
    """The Qwen3 (mcore) quickstart, logging every 5 steps: `msmon probe RUN profile --steps 5` profiles exactly 5
    steps from the step after a logging step and the training goes on; then a 100-step profile, and SIGINT once a
    logging step inside its window has passed: msmon run exits 130 with nothing left running, the window is cut
    short at the step the training stopped, the profiler analyses what it recorded, and the request is marked
    incomplete with the steps measured. One training: the mcore path of the issue's "Must show" and its Ctrl-C case
    (the legacy path's 5 steps, curve unchanged: the test above)."""
    import signal

    from conftest import run_msmon
    from helpers_training import QUICKSTART_QWEN3, write_quickstart_config
    from launch import Launched, msmon_env, records

    config = write_quickstart_config(tmp_path, log_interval=5, monitor_type=["file"], source=QUICKSTART_QWEN3)
    run_dir = tmp_path / "monitor_logs" / "quickstart_qwen3" / "test_run"
    run = Launched.start(tmp_path, "run", str(config), "--plain", env=msmon_env(tmp_path), cwd=tmp_path)
    try:
        logged = run.wait_for(lambda: (rows := records(run_dir)) and rows[-1]["step"])
        asked = run_msmon("probe", str(run_dir), "profile", "--steps", "5", cwd=tmp_path)
        assert asked.code == 0, asked.stderr
        five = read_request(run_dir)
        assert five is not None
        done = run.wait_for(lambda: read_marks(run_dir, five.id).get(0))
        asked = run_msmon("probe", str(run_dir), "profile", "--steps", "100", cwd=tmp_path)
        assert asked.code == 0, asked.stderr
        window = run.wait_for(lambda: next((p.name for p in (run_dir / layout.PROFILES).iterdir()
                                            if p.name != f"{done.first_step}-{done.last_step}"), None))
        first = int(window.split("-")[0])
        run.wait_for(lambda: records(run_dir)[-1]["step"] >= first + 5)
        run.proc.send_signal(signal.SIGINT)
        assert run.finish(kill=False) == 130, run.stderr[-2000:]
        assert run.left_behind() == []
    finally:
        run.kill()
    assert done.state is ProbeState.DONE and done.first_step is not None and done.last_step is not None, done
    assert done.last_step - done.first_step + 1 == 5
    assert (done.first_step - 1) % 5 == 0 and done.first_step - 1 >= logged
    kept = ProfileSummary.from_json(json.loads(
        (run_dir / layout.PROFILES / f"{done.first_step}-{done.last_step}" / "rank_0" / layout.PROFILE_SUMMARY)
        .read_text()))
    assert kept.complete and [s.step for s in kept.steps] == list(range(done.first_step, done.last_step + 1))
    assert kept.op_types and all((s.ops or 0) > 0 for s in kept.steps)
    assert first > done.last_step  # the training went on after the first window

    request = read_request(run_dir)
    assert request is not None and request.id != five.id
    mark = read_marks(run_dir, request.id)[0]
    assert mark.state is ProbeState.INCOMPLETE and mark.first_step == first, mark
    assert mark.last_step is not None and first + 5 <= mark.last_step < first + 99
    profile = run_dir / layout.PROFILES / window / "rank_0"
    summary = ProfileSummary.from_json(json.loads((profile / layout.PROFILE_SUMMARY).read_text()))
    assert not summary.complete and [s.step for s in summary.steps] == list(range(first, mark.last_step + 1))
    assert summary.op_types and all((s.ops or 0) > 0 for s in summary.steps)
    (output,) = summary.profiler_output
    assert json.loads((profile / output / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text())
