"""Per-layer gradient norms with the real mindformers Trainer on CPU, on both model paths (the legacy Llama and the
mcore Qwen3 quickstarts, each trained in its own process by tests/layer_norms_driver.py):

- every record holds one ``grad_norm/<group>`` per block plus the embedding, the final norm and the head, equal to the
  root sum of the wrapper's squared sums of that group, and their root sum of squares is the global grad_norm (before
  clipping) to float precision; MindInsight (its REST API) and TensorBoard hold the same series;
- mindformers' own log no longer prints the raw arrays at every step;
- a block whose gradients are made to grow (its weights rescaled so the network computes the same) is the group the
  growth alert names, and the alert's context file holds every step of the window before it;
- ``msmon report`` on that run's files draws the groups as a heatmap (log10 of each norm over its group's median) in
  which the grown block is the hot row, and the alert row shows its values and its context file.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import run_msmon
from engine_support import MindInsightServer, read_jsonl, wait_until
from helpers_training import QUICKSTARTS, mindformers_step_lines
from test_view_unit import page_data

from msmon.engine.grad_groups import group_of

pytestmark = pytest.mark.training

HERE = Path(__file__).resolve().parent
STEPS, INTERVAL = 30, 5
GROW_STEPS, GROW_FROM, GROW_FACTOR = 300, 150, 1.04
GROUPS = ["embedding", "layers.0", "layers.1", "final_norm", "head"]


@dataclass
class Run:
    run_dir: Path
    records: list[dict[str, Any]]
    names: list[str]
    outputs: dict[int, dict[str, Any]]
    wrapper: dict[str, Any]
    work: Path


def drive(work: Path, model: str, *args: int | float) -> Run:
    work.mkdir(parents=True)
    proc = subprocess.run([sys.executable, str(HERE / "layer_norms_driver.py"), str(work), model, *map(str, args)],
                          capture_output=True, text=True, timeout=600, cwd=work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    run_dir = Path(result["run_dir"])
    saved = json.loads((work / "outputs.json").read_text(encoding="utf-8"))
    outputs = {int(step): value for step, value in saved["steps"].items()}
    return Run(run_dir, read_jsonl(run_dir / "metrics.jsonl"), saved["names"], outputs, result["training_wrapper"],
               work)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("layer_norms")
    found = {model: drive(base / model, model, STEPS, INTERVAL) for model in QUICKSTARTS}
    server = MindInsightServer(base / "monitor_logs" / "layers")
    try:
        yield found, server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def grown(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("layer_growth")
    return {model: drive(base / model, model, GROW_STEPS, 10, GROW_FROM, GROW_FACTOR) for model in QUICKSTARTS}


def group_keys(record: dict[str, Any]) -> dict[str, float]:
    return {key.removeprefix("grad_norm/"): value for key, value in record.items() if key.startswith("grad_norm/")}


@pytest.mark.parametrize("model", list(QUICKSTARTS))
def test_every_record_has_one_norm_per_group_and_their_root_sum_of_squares_is_grad_norm(runs, model):
    run = runs[0][model]
    assert run.wrapper["local_norm"] is True  # msmon turned it on in the config it handed to mindformers
    assert [r["step"] for r in run.records] == list(range(INTERVAL, STEPS + 1, INTERVAL))
    for record in run.records:
        groups = group_keys(record)
        assert list(groups) == GROUPS  # one per block, the embedding, the final norm, the head (no parameter left over)
        root = math.sqrt(sum(value * value for value in groups.values()))
        assert root == pytest.approx(record["grad_norm"], rel=2e-6)  # float32 global norm, float64 group sums
        raw = run.outputs[record["step"]]
        assert record["grad_norm"] == pytest.approx(raw["global_norm"], rel=1e-7)
        for group, value in groups.items():
            squares = [s for name, s in zip(run.names, raw["squares"], strict=True) if group_of(name) == group]
            assert value == pytest.approx(math.sqrt(math.fsum(squares)), rel=1e-6), group


@pytest.mark.parametrize("model", list(QUICKSTARTS))
def test_every_parameter_of_the_model_belongs_to_a_named_group(runs, model):
    names = runs[0][model].names
    assert len(names) == len(runs[0][model].outputs[1]["squares"])
    assert {group_of(name) for name in names} == set(GROUPS)
    assert sum(1 for name in names if group_of(name) == "layers.0") == sum(
        1 for name in names if group_of(name) == "layers.1") > 3


@pytest.mark.parametrize("model", list(QUICKSTARTS))
def test_mindformers_log_keeps_its_step_lines_without_the_raw_arrays(runs, model):
    run = runs[0][model]
    log = run.work / "logs" / "output" / "log" / "rank_0" / "info.log"
    text = log.read_text(encoding="utf-8", errors="replace")
    assert "norm_size" not in text and "local_norm:" not in text
    printed = mindformers_step_lines(run.work)
    assert sorted(printed) == list(range(1, STEPS + 1))  # MFLossMonitor still prints every step
    for record in run.records:
        assert printed[record["step"]]["grad_norm"] == pytest.approx(record["grad_norm"], rel=1e-5)


@pytest.mark.parametrize("model", list(QUICKSTARTS))
def test_board_backends_hold_every_group_series(runs, model):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run, server = runs[0][model], runs[1]
    events = EventAccumulator(str(run.run_dir))
    events.Reload()
    for group in GROUPS:
        tag = f"grad_norm/{group}"
        assert [(e.step, e.value) for e in events.Scalars(tag)] == [
            (r["step"], pytest.approx(r[tag], rel=1e-6)) for r in run.records]
        points = wait_until(lambda tag=tag: server.scalars(f"./{model}", tag), 30)
        assert [(p["step"], p["value"]) for p in points] == [
            (r["step"], pytest.approx(r[tag], rel=1e-6)) for r in run.records]


@pytest.mark.parametrize("model", list(QUICKSTARTS))
def test_the_growth_alert_names_the_block_whose_gradients_grow(grown, model):
    run = grown[model]
    alerts = read_jsonl(run.run_dir / "alerts.jsonl")
    growth = next(a for a in alerts if a["detector"] == "grad_explosion")
    assert GROW_FROM < growth["step"] < GROW_STEPS
    assert growth["values"]["groups"]["led_by"][0] == "layers.1"
    assert "led by layers.1 (x" in growth["message"] and "since step" in growth["message"]
    ratios = growth["values"]["groups"]["ratios"]
    assert ratios["layers.1"] > 1.5 * max(v for g, v in ratios.items() if g != "layers.1")


@pytest.mark.parametrize("model", list(QUICKSTARTS))
def test_the_growth_alert_names_its_context_file_with_every_step_before_it(grown, model):
    run = grown[model]
    growth = next(a for a in read_jsonl(run.run_dir / "alerts.jsonl") if a["detector"] == "grad_explosion")
    lines = read_jsonl(run.run_dir / growth["context_file"])
    assert growth["context_file"] == f"context/step_{growth['step']}_grad_explosion.jsonl"
    assert [line["step"] for line in lines] == list(range(growth["step"] - 199, growth["step"] + 1))  # 200 steps
    for line in lines:  # full per-step resolution: the values the train step returned at that step
        raw = run.outputs[line["step"]]
        assert line["grad_norm"] == pytest.approx(raw["global_norm"], rel=1e-7)
        assert set(group_keys(line)) == set(GROUPS) and line["overflow"] == 0 and line["loss_scale"] == 1.0
        assert line["step_time_ms"] > 0 and math.isfinite(line["loss"])
    logged = {r["step"]: r for r in run.records}
    for line in lines:
        if line["step"] in logged:
            assert line["loss"] == logged[line["step"]]["loss"]


@pytest.mark.parametrize("model", list(QUICKSTARTS))
def test_the_report_heatmap_shows_the_grown_block_as_the_hot_row(grown, model, tmp_path):
    run = grown[model]
    report = tmp_path / "report.html"
    assert run_msmon("report", str(run.run_dir), "--out", str(report)).code == 0
    html = report.read_text(encoding="utf-8")
    data = page_data(html)["heatmap"]
    assert data["groups"] == GROUPS and data["starts"] == [r["step"] for r in run.records] == data["ends"]
    for group, row in zip(GROUPS, data["cells"], strict=True):  # one column per logged step: no bucket merges here
        series = [r[f"grad_norm/{group}"] for r in run.records]
        median = statistics.median(series)
        assert data["baseline"][group] == pytest.approx(median)
        assert row == pytest.approx([math.log10(v / median) for v in series])
    hot = data["cells"][GROUPS.index("layers.1")]
    for column in range(-3, 0):  # the last logs: the grown block far above its own median, above every other group
        others = max(row[column] for group, row in zip(GROUPS, data["cells"], strict=True) if group != "layers.1")
        assert hot[column] > max(others + 0.5, math.log10(5))
    growth = next(a for a in read_jsonl(run.run_dir / "alerts.jsonl") if a["detector"] == "grad_explosion")
    assert f"<code>{growth['context_file']}</code>" in html
    assert f"grad_norm_mean={growth['values']['grad_norm_mean']:.5g}" in html and "built-in method" not in html
