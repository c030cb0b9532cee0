"""The layer summaries on the real mindformers Trainer (the canonical completed runs, both model paths, which track
``layer_grad_norm`` and so get ``weight_norm/<group>`` and ``update_ratio/<group>``): each equals what the weights
themselves say, read independently of msmon at every step (tests/rank_callbacks.DumpOutputs: each weight's squared sum
and that of its change since the previous step), and MindInsight, TensorBoard and MLflow hold the same series; the
report draws the ratios as a heatmap. The grown block of ``lr_1e_3`` (tests/rank_callbacks.GrowBlock: its weights
rescaled every step from step 100) is the hot row of its ratio heatmap."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from canonical import session_mindinsight
from conftest import run_msmon
from engine_support import served_scalars
from test_records_backends import mlflow_history, mlflow_run
from test_view_unit import page_data

from msmon.engine.grad_groups import group_of

pytestmark = [pytest.mark.board]

GROUPS = ["embedding", "layers.0", "layers.1", "final_norm", "head"]
PREFIXES = ("weight_norm/", "update_ratio/")


@pytest.fixture(params=["legacy", "mcore"])
def completed(request: pytest.FixtureRequest, canonical):
    return canonical(f"completed_{request.param}")


def dumped(run) -> tuple[list[str], dict[int, dict[str, Any]]]:
    """(parameter names, step -> DumpOutputs' line) of a canonical run."""
    lines = [json.loads(line) for line in (run.run_dir / "logs" / "outputs.jsonl").read_text().splitlines()]
    return lines[0]["names"], {line["step"]: line for line in lines[1:]}


def test_weight_norms_and_update_ratios_are_what_the_weights_say(completed) -> None:
    names, steps = dumped(completed)
    rows = completed.records()
    assert [r["step"] for r in rows] == list(range(10, completed.steps + 1, 10))
    for record in rows:
        line = steps[record["step"]]
        for group in GROUPS:
            members = [i for i, name in enumerate(names) if group_of(name) == group]
            weight = math.sqrt(math.fsum(line["weight_squares"][i] for i in members))
            change = math.sqrt(math.fsum(line["change_squares"][i] for i in members))
            assert record[f"weight_norm/{group}"] == pytest.approx(weight, rel=1e-6), (record["step"], group)
            assert record[f"update_ratio/{group}"] == pytest.approx(change / weight, rel=1e-4), (record["step"], group)
        assert [k.split("/")[1] for k in record if k.startswith("update_ratio/")] == GROUPS
    ratios = [r[f"update_ratio/{g}"] for r in rows for g in GROUPS]
    assert all(0 < ratio < 0.5 for ratio in ratios)  # every group learns at every logged step, by a small step


def test_every_backend_holds_the_summaries(completed) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(completed.run_dir))
    events.Reload()
    url, rows = session_mindinsight(), completed.records()
    run_id = mlflow_run(completed.name)["info"]["run_id"]
    for tag in (f"{prefix}{group}" for prefix in PREFIXES for group in GROUPS):
        want = [(r["step"], pytest.approx(r[tag], rel=1e-6)) for r in rows]
        assert [(e.step, e.value) for e in events.Scalars(tag)] == want, tag
        query = f"train_id=./{completed.name}&tag={tag}/scalar"
        points = served_scalars(url, query, len(rows))
        assert [(p["step"], p["value"]) for p in points] == want, tag
        assert [(m["step"], m["value"]) for m in mlflow_history(run_id, tag)] == want, tag


def test_the_grown_block_is_the_hot_row_of_the_reports_ratio_heatmap(canonical, tmp_path) -> None:
    grown = canonical("lr_1e_3")
    report = tmp_path / "report.html"
    assert run_msmon("report", str(grown.run_dir), "--out", str(report)).code == 0
    html = report.read_text(encoding="utf-8")
    data = page_data(html)["update_heatmap"]
    rows = grown.records()
    assert data["groups"] == GROUPS and data["starts"] == [r["step"] for r in rows]
    assert "Update-to-weight ratio by group (5)" in html
    for group, cells in zip(GROUPS, data["cells"], strict=True):
        series = [r[f"update_ratio/{group}"] for r in rows]
        assert cells == pytest.approx([math.log10(v / data["baseline"][group]) for v in series])
    before = {g: rows[8][f"update_ratio/{g}"] for g in GROUPS}  # step 90: before the growth
    for row in rows[-3:]:  # rescaled by x1.04 a step, block 1's weights move far more than they learn
        hot, others = row["update_ratio/layers.1"], [row[f"update_ratio/{g}"] for g in GROUPS if g != "layers.1"]
        assert hot > 5 * before["layers.1"] and hot > 5 * max(others)
