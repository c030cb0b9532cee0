"""The reference loaders, one source kind at a time, on small files written here: the kind detected from the path,
the steps and values read, the default and mapped names, and one-line errors for bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from msmon.errors import MsmonError
from msmon.reference import ReferenceCurve, ReferenceKind, load_reference

MF_LINE = ("[INFO] 2026-12-04 18:37:35,893 [mindformers/core/callback/callback.py:747] print_output_info: "
           "{{ Epoch:[{epoch:3d}/  2], step:[{step:5d}/    3], loss:[{loss:5.6f}/6.912004], per_step_time: 50ms, "
           "lr: {lr}, overflow cond: False, loss_scale: 1.0, global_norm: [{norm}], "
           "train_throughput_per_npu: 0.003T\n")
PROGRESS = "[INFO] 2026-12-04 18:37:35,894 [mindformers/core/callback/callback.py:764] print_output_info:   " \
           "16.7% |████          | 39.96 samples/s/p  0:00:00 }\n"


def _values(curve: ReferenceCurve, name: str) -> list[float]:
    return list(curve.metric(name))


def _run_dir(path: Path, rows: list[dict], config: str = "") -> Path:
    path.mkdir(parents=True)
    (path / "run.json").write_text(json.dumps({"run_name": "r", "layout": {"world_size": 2}}))
    (path / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    if config:
        (path / "mindformers.yaml").write_text(config)
    return path


def test_a_run_directory_is_its_metrics_in_step_order_the_last_value_of_a_step_kept(tmp_path):
    rows = [{"step": 1, "rank": 0, "loss": 7.0, "grad_norm": 1.0, "learning_rate": 0.0, "step_time_ms": 50.0},
            {"step": 3, "rank": 0, "loss": "NaN", "grad_norm": 2.0},
            {"step": 2, "rank": 0, "loss": 6.0},
            {"step": 3, "rank": 0, "loss": 5.0, "throughput": 9.0}]
    config = "runner_config: {batch_size: 2, gradient_accumulation_steps: 3}\n"
    curve = load_reference(_run_dir(tmp_path / "run", rows, config))
    assert curve.kind is ReferenceKind.RUN and list(curve.steps) == [1, 2, 3]
    assert _values(curve, "loss") == [7.0, 6.0, 5.0] and curve.metrics == ("loss", "grad_norm", "learning_rate",
                                                                          "step_time_ms")
    assert _values(curve, "grad_norm")[0] == 1.0 and math.isnan(_values(curve, "grad_norm")[2])
    assert curve.global_batch_size == 12  # 2 x 3 accumulation x 2 ranks of data parallel mode
    assert curve.value("loss", 2) == 6.0 and math.isnan(curve.value("loss", 9)) and curve.samples(3) == 36


def test_a_run_directory_shows_the_rank_that_logged_the_loss(tmp_path):
    rows = [{"step": s, "rank": 0, "grad_norm": 1.0} for s in (1, 2)] + [
        {"step": s, "rank": 3, "loss": 4.0 + s} for s in (1, 2)]
    curve = load_reference(_run_dir(tmp_path / "run", rows))
    assert _values(curve, "loss") == [5.0, 6.0] and "grad_norm" not in curve.series
    assert curve.global_batch_size is None


def _log(path: Path, steps: list[tuple[int, int, float]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "[INFO] ... _check_global_batch_size_for_auto_parallel: global_batch_size = batch_size_per_card * " \
           "device_num * gradient_accumulation_steps = 4 = 2 * 2 * 1\n"
    for epoch, step, loss in steps:
        text += MF_LINE.format(epoch=epoch, step=step, loss=loss, lr="0.004969313", norm="1.0383421") + PROGRESS
    path.write_text(text)
    return path


def test_mindformers_log_steps_are_global_across_epochs(tmp_path):
    log = _log(tmp_path / "output" / "log" / "rank_0" / "info.log", [(1, 1, 6.9), (1, 2, 6.8), (1, 3, 6.7),
                                                                    (2, 1, 6.6)])
    for path in (log, log.parent, tmp_path / "output", tmp_path):  # the file, its rank directory, the ones above
        curve = load_reference(path)
        assert curve.kind is ReferenceKind.MINDFORMERS_LOG and curve.source == log
        assert list(curve.steps) == [1, 2, 3, 4] and _values(curve, "loss") == [6.9, 6.8, 6.7, 6.6]
    assert _values(curve, "grad_norm") == [1.0383421] * 4 and _values(curve, "learning_rate") == [0.004969313] * 4
    assert _values(curve, "step_time_ms") == [50.0] * 4 and curve.global_batch_size == 4


def test_mindformers_log_reads_its_rotated_files_oldest_first(tmp_path):
    log = _log(tmp_path / "info.log", [(1, 3, 6.0)])
    _log(tmp_path / "info.log.1", [(1, 2, 7.0), (1, 3, 9.0)])
    _log(tmp_path / "info.log.2", [(1, 1, 8.0)])
    curve = load_reference(log)
    assert list(curve.steps) == [1, 2, 3] and _values(curve, "loss") == [8.0, 7.0, 6.0]


def test_mindformers_sink_mode_line_and_nonfinite_values(tmp_path):
    line = ("{ Epoch:[  1/  1], step:[    5/   10], loss: nan, per_step_time: 12ms, overflow cond: True, "
            "loss_scale: 1.0, global_norm: [inf]\n")
    path = tmp_path / "train.txt"
    path.write_text(line)
    curve = load_reference(path)
    assert list(curve.steps) == [5] and math.isnan(curve.metric("loss")[0]) and curve.metric("grad_norm")[0] == math.inf
    assert "learning_rate" not in curve.series  # no lr printed (a schedule mindformers cannot evaluate on CPU)


def _events(directory: Path, scalars: dict[str, list[tuple[int, float]]]) -> Path:
    from tensorboardX import SummaryWriter

    writer = SummaryWriter(str(directory))
    for tag, points in scalars.items():
        for step, value in points:
            writer.add_scalar(tag, value, global_step=step)
    writer.close()
    return directory


def test_tensorboard_mindformers_tags_in_its_rank_directory(tmp_path):
    _events(tmp_path / "tb" / "rank_0", {"loss": [(1, 6.5), (2, 6.25)], "loss vs samples": [(4, 6.5)],
                                         "grad-norm": [(1, 1.5), (2, 1.25)], "learning-rate": [(2, 0.005)],
                                         "batch-size": [(1, 4.0), (2, 4.0)], "iteration-time": [(1, 30), (2, 31)]})
    curve = load_reference(tmp_path / "tb")
    assert curve.kind is ReferenceKind.TENSORBOARD and list(curve.steps) == [1, 2]
    assert _values(curve, "loss") == [6.5, 6.25] and _values(curve, "grad_norm") == [1.5, 1.25]
    assert math.isnan(_values(curve, "learning_rate")[0]) and _values(curve, "step_time_ms") == [30.0, 31.0]
    assert curve.global_batch_size == 4


def test_tensorboard_megatron_tags_and_seconds(tmp_path):
    _events(tmp_path / "tb", {"lm loss": [(10, 3.5), (20, 3.25)], "grad-norm": [(10, 0.5), (20, 0.75)],
                              "iteration-time": [(10, 0.25), (20, 0.5)]})
    curve = load_reference(tmp_path / "tb")
    assert list(curve.steps) == [10, 20] and _values(curve, "loss") == [3.5, 3.25]
    assert _values(curve, "step_time_ms") == [250.0, 500.0]


def test_tensorboard_tags_override_the_defaults(tmp_path):
    _events(tmp_path / "tb", {"loss": [(1, 9.0)], "objective": [(1, 2.0), (2, 1.5)]})
    curve = load_reference(tmp_path / "tb", {"loss": "objective"})
    assert list(curve.steps) == [1, 2] and _values(curve, "loss") == [2.0, 1.5]


def test_a_csv_table_with_aliases_and_mapped_columns(tmp_path):
    path = tmp_path / "ref.csv"
    path.write_text("iteration,objective,lr,global_norm,note\n1,7.5,0.001,,a\n2,nan,0.002,1.5,b\n")
    curve = load_reference(path, {"loss": "objective"})
    assert curve.kind is ReferenceKind.TABLE and list(curve.steps) == [1, 2]
    assert _values(curve, "loss")[0] == 7.5 and math.isnan(_values(curve, "loss")[1])
    assert _values(curve, "learning_rate") == [0.001, 0.002] and math.isnan(_values(curve, "grad_norm")[0])


def test_a_jsonl_table_with_global_step(tmp_path):
    path = tmp_path / "ref.jsonl"
    path.write_text('{"global_step": 2, "loss": 5.0}\n{"global_step": 1, "loss": 6.0, "grad_norm": "Infinity"}\n')
    curve = load_reference(path)
    assert list(curve.steps) == [1, 2] and _values(curve, "loss") == [6.0, 5.0]
    assert curve.metric("grad_norm")[0] == math.inf


def _one_line(path: Path, tags: dict[str, str] | None = None) -> MsmonError:
    with pytest.raises(MsmonError) as caught:
        load_reference(path, tags)
    assert "\n" not in str(caught.value) and caught.value.hint
    return caught.value


def test_bad_input_is_one_line_naming_the_file_and_the_fix(tmp_path):
    assert "no such file" in str(_one_line(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    error = _one_line(tmp_path / "empty")
    assert str(tmp_path / "empty") in error.message and "TensorBoard" in error.hint
    (tmp_path / "notes.txt").write_text("hello\n")
    assert "not a reference source" in _one_line(tmp_path / "notes.txt").message
    (tmp_path / "nostep.csv").write_text("epoch,loss\n1,2.0\n")
    error = _one_line(tmp_path / "nostep.csv")
    assert "no step column (columns: epoch, loss)" in error.message and "iteration" in error.hint
    (tmp_path / "noloss.csv").write_text("step,accuracy\n1,0.5\n")
    assert "no loss" in _one_line(tmp_path / "noloss.csv").message
    (tmp_path / "bad.jsonl").write_text('{"step": 1, "loss": 1}\nnot json\n{"step": 2, "loss": 1}\n')
    assert "bad.jsonl:2" in _one_line(tmp_path / "bad.jsonl").message
    (tmp_path / "half.csv").write_text("step,loss\n1.5,2\n")
    assert "integer" in _one_line(tmp_path / "half.csv").message


def test_tensorboard_without_a_loss_names_the_tags_it_found(tmp_path):
    _events(tmp_path / "tb", {"accuracy": [(1, 0.5)], "objective": [(1, 2.0)]})
    error = _one_line(tmp_path / "tb")
    assert "loss in this TensorBoard" in error.message and "accuracy, objective" in error.hint
    _events(tmp_path / "two" / "rank_0", {"loss": [(1, 1.0)]})
    _events(tmp_path / "two" / "rank_1", {"loss": [(1, 1.0)]})
    assert "rank_0, rank_1" in _one_line(tmp_path / "two").message
    assert "unknown metrics: accuracy" in _one_line(tmp_path / "tb", {"accuracy": "x"}).message


def test_a_run_directory_without_a_loss_and_an_unreadable_file(tmp_path):
    run = _run_dir(tmp_path / "run", [{"step": 1, "rank": 0, "grad_norm": 1.0}])
    assert "track_metrics" in _one_line(run).hint
    assert "cannot read" in _one_line(Path("/proc/self/mem")).message  # opens, then fails to read (even as root)
