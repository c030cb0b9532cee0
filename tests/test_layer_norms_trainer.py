"""Per-layer gradient norms when one block's gradients grow, with the real mindformers Trainer on CPU, on both model
paths (the canonical runs ``lr_1e_3`` and ``completed_mcore``: block 1's weights rescaled at every step from step 100 so
that the network computes the same while that block's gradients grow; tests/rank_callbacks.GrowBlock):

- the grown block is the group the growth alert names, and the alert's context file holds every step of the window
  before it at full resolution (the values the train step returned, tests/rank_callbacks.DumpOutputs);
- ``msmon report`` draws the groups as a heatmap (log10 of each norm over its group's median) in which the grown
  block is the hot row, and the alert row shows its values and its context file;
- the alert, ``msmon replay`` and the report name the grown block as the group that left its baseline first, the
  signal that found it and how many steps before the global grad norm (the loss never shows it).

The groups of a clean run (one norm per block, their root sum of squares the global norm) are checked on the
canonical completed runs in test_records_backends.py.
"""

from __future__ import annotations

import json
import math
import statistics
from html import unescape

import pytest
from conftest import run_msmon
from engine_support import read_jsonl
from test_view_unit import page_data

from msmon import layout
from msmon.health.first_mover import departure
from msmon.probe import ProbeState, read_marks

GROUPS = ["embedding", "layers.0", "layers.1", "final_norm", "head"]


GROWN = {"legacy": "lr_1e_3", "mcore": "completed_mcore"}


@pytest.fixture(params=list(GROWN))
def grown(request: pytest.FixtureRequest, canonical):
    return canonical(GROWN[request.param])


def group_keys(record: dict) -> dict[str, float]:
    return {key.removeprefix("grad_norm/"): value for key, value in record.items() if key.startswith("grad_norm/")}


def growth_alert(run) -> dict:
    return next(a for a in run.alerts() if a["detector"] == "grad_explosion")


def test_the_growth_alert_names_the_block_whose_gradients_grow(grown):
    growth = growth_alert(grown)
    assert grown.extra["grow_from"] < growth["step"] < grown.steps
    assert growth["values"]["groups"]["led_by"][0] == "layers.1"
    assert "led by layers.1 (x" in growth["message"] and "since step" in growth["message"]
    ratios = growth["values"]["groups"]["ratios"]
    assert ratios["layers.1"] > 1.5 * max(v for g, v in ratios.items() if g != "layers.1")


def test_the_growth_alert_names_its_context_file_with_every_step_before_it(grown):
    growth = growth_alert(grown)
    lines = read_jsonl(grown.run_dir / growth["context_file"])
    assert growth["context_file"] == f"context/step_{growth['step']}_grad_explosion.jsonl"
    window = list(range(max(1, growth["step"] - 199), growth["step"] + 1))  # 200 steps, or all of them since step 1
    assert [line["step"] for line in lines] == window
    _, outputs = grown.outputs()
    for line in lines:  # full per-step resolution: the values the train step returned at that step
        assert line["grad_norm"] == pytest.approx(outputs[line["step"]][4][0], rel=1e-7)
        assert set(group_keys(line)) == set(GROUPS) and line["overflow"] == 0 and line["loss_scale"] == 1.0
        assert line["step_time_ms"] > 0 and math.isfinite(line["loss"])
    logged = {r["step"]: r for r in grown.records()}
    for line in lines:
        if line["step"] in logged:
            assert line["loss"] == logged[line["step"]]["loss"]


def test_the_report_heatmap_shows_the_grown_block_as_the_hot_row(grown, tmp_path):
    report = tmp_path / "report.html"
    assert run_msmon("report", str(grown.run_dir), "--out", str(report)).code == 0
    page = report.read_text(encoding="utf-8")
    data = page_data(page)["heatmap"]
    rows = grown.records()
    assert data["groups"] == GROUPS and data["starts"] == [r["step"] for r in rows] == data["ends"]
    for group, row in zip(GROUPS, data["cells"], strict=True):  # one column per logged step: no bucket merges here
        series = [r[f"grad_norm/{group}"] for r in rows]
        median = statistics.median(series)
        assert data["baseline"][group] == pytest.approx(median)
        assert row == pytest.approx([math.log10(v / median) for v in series])
    hot = data["cells"][GROUPS.index("layers.1")]
    for column in range(-3, 0):  # the last logs: the grown block far above its own median, above every other group
        others = max(row[column] for group, row in zip(GROUPS, data["cells"], strict=True) if group != "layers.1")
        assert hot[column] > max(others + 0.5, math.log10(5))
    growth = growth_alert(grown)
    assert f"<code>{growth['context_file']}</code>" in page
    assert f"grad_norm_mean={growth['values']['grad_norm_mean']:.5g}" in page and "built-in method" not in page
    assert first_mover_text(growth) in unescape(page)


def first_mover_text(alert: dict) -> str:
    mover = alert["values"]["first_mover"]
    return (f"{mover['group']}'s {mover['signal']} left its baseline first (step {mover['step']}, "
            f"{mover['lead_steps']} steps before {mover['shown_by']} showed anything)")


def test_the_alert_and_replay_name_the_block_that_moved_first_and_the_signal_that_found_it(grown):
    """The grown block's update ratio leaves its baseline at the first log of the growth (GrowBlock rescales two of
    its weight matrices by 4% / 6% a step, several times the optimizer's own update of them: the fault moves the
    weights itself); its grad norm no later than the global grad norm; its weight norm later; the loss never."""
    growth = growth_alert(grown)
    start, mover = grown.extra["grow_from"], growth["values"]["first_mover"]
    assert (mover["group"], mover["signal"], mover["step"]) == ("layers.1", "update_ratio", start)
    assert mover["shown_by"] == "the global grad norm" and start < mover["shown_step"] < growth["step"]
    assert mover["lead_steps"] == mover["shown_step"] - start >= 20
    assert first_mover_text(growth) in growth["message"]
    rows = [r for r in grown.records() if r["step"] <= growth["step"]]
    steps = [r["step"] for r in rows]
    found = {key: departure(steps, [r.get(key) for r in rows], upward="/" not in key)
             for key in ("loss", "grad_norm", "grad_norm/layers.1", "weight_norm/layers.1")}
    assert found["loss"] is None
    assert found["grad_norm"] is not None and found["grad_norm"].step == mover["shown_step"]
    block, weights = found["grad_norm/layers.1"], found["weight_norm/layers.1"]
    assert block is not None and start < block.step <= found["grad_norm"].step
    assert weights is not None and weights.step > start
    result = run_msmon("replay", str(grown.run_dir), "--json")
    assert result.code == 0, result.stderr
    replayed = next(a for a in json.loads(result.stdout) if a["detector"] == "grad_explosion")
    assert (replayed["step"], replayed["values"]["first_mover"]) == (growth["step"], mover)


def test_the_growth_alert_is_followed_by_histograms_of_the_logs_after_it(canonical):
    """health.alerts.distributions_logs (default 3): the alert leaves a distributions probe request, rank 0 takes
    it at its next logging step and writes the histograms of each group's weights, updates and gradients at the 3 logs
    after it, in which block 1 (its weights rescaled every step) has the largest update for its size, and each
    group's gradient norm is its recorded grad norm times the step's clip factor. (lr_1e_3 trains 240 steps for it;
    the mcore run's alert comes too close to its end at step 200.)"""
    from test_gradients_probe_unit import assert_gradients_are_the_clipped_grad_norms

    grown = canonical("lr_1e_3")
    growth = growth_alert(grown)
    (window,) = list((grown.run_dir / layout.DISTRIBUTIONS).iterdir())
    first, last = (int(n) for n in window.name.split("-"))
    assert growth["step"] < first and (first - 1) % grown.log_interval == 0
    assert last - first + 1 == 3 * grown.log_interval
    lines = read_jsonl(window / "rank_0" / layout.DISTRIBUTIONS_FILE)
    assert [line["step"] for line in lines] == [first - 1 + 10, first - 1 + 20, first - 1 + 30] and last < grown.steps
    for line in lines:
        ratios = {g: math.sqrt(line["histograms"][f"updates/{g}"]["sum_squares"] /
                               line["histograms"][f"weights/{g}"]["sum_squares"]) for g in GROUPS}
        assert max(ratios, key=ratios.__getitem__) == "layers.1", ratios
    assert_gradients_are_the_clipped_grad_norms(lines, {r["step"]: r for r in grown.records()}, GROUPS)
    (request,) = [p.name for p in (grown.run_dir / layout.PROBES).iterdir() if p.is_dir()]
    mark = read_marks(grown.run_dir, request)[0]
    assert mark.state is ProbeState.DONE and mark.output == str((window / "rank_0").relative_to(grown.run_dir))


#: The sudden-jump runs (block 1's weight pairs rescaled once by 20 at the end of step 99).
JUMPED = {"legacy": "jump_legacy", "mcore": "jump_mcore"}


@pytest.mark.parametrize("model", list(JUMPED))
def test_a_sudden_jump_in_one_block_is_named_at_the_first_log_after_it_with_histograms_after(canonical, model):
    """The canonical runs ``jump_legacy`` and ``jump_mcore`` (block 1's weight pairs rescaled once by 20 at the end of
    step 99): at the first log after it the block's grad norm, update ratio and weight norm and the global grad norm
    all leave their baselines; the loss has not moved at the alert. The alert (the absolute threshold, step 100)
    names block 1 and its weight norm (the furthest beyond its band: the fault moved the weights), lead 0 against the
    global grad norm; `msmon replay` the same; the histograms of the 3 logs after the alert (weights, updates and
    gradients) exist in msmon's file, TensorBoard's reader and MindInsight's histogram API return them, and each
    group's gradient norm is its recorded grad norm times the step's clip factor."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from test_distributions_probe_unit import mindinsight_steps, summary_histograms
    from test_gradients_probe_unit import assert_gradients_are_the_clipped_grad_norms

    jumped = canonical(JUMPED[model])
    assert jumped.code == 0, jumped.output
    alert = growth_alert(jumped)
    assert alert["step"] == 100 and alert["values"]["check"] == "absolute"
    assert alert["values"]["first_mover"] == {"group": "layers.1", "signal": "weight_norm", "step": 100,
                                              "lead_steps": 0, "shown_by": "the global grad norm", "shown_step": 100}
    assert "layers.1's weight_norm left its baseline first (step 100; the global grad norm showed it at step 100)" \
        in alert["message"]
    rows = jumped.records()
    steps = [r["step"] for r in rows]
    for key in ("grad_norm/layers.1", "update_ratio/layers.1", "weight_norm/layers.1", "grad_norm"):
        rate = "update_ratio" in key  # over the learning rate, as the first mover judges it (legacy: a cosine decay)
        found = departure(steps, [r[key] / r["learning_rate"] if rate else r[key] for r in rows],
                          upward=key == "grad_norm")
        assert found is not None and found.step == 100, key
    upto = [r for r in rows if r["step"] <= alert["step"]]
    assert departure([r["step"] for r in upto], [r["loss"] for r in upto], upward=True) is None
    result = run_msmon("replay", str(jumped.run_dir), "--json")
    assert result.code == 0, result.stderr
    replayed = next(a for a in json.loads(result.stdout) if a["detector"] == "grad_explosion")
    assert replayed["values"]["first_mover"] == alert["values"]["first_mover"]
    (window,) = list((jumped.run_dir / layout.DISTRIBUTIONS).iterdir())
    assert window.name == "111-140"  # the request is taken at the next logging step (110): its next 3 logs
    directory = window / "rank_0"
    lines = read_jsonl(directory / layout.DISTRIBUTIONS_FILE)
    assert [line["step"] for line in lines] == [120, 130, 140]
    assert all(set(line["histograms"]) == {f"{kind}/{g}" for kind in ("weights", "updates", "gradients")
                                           for g in GROUPS} for line in lines)
    assert_gradients_are_the_clipped_grad_norms(lines, {r["step"]: r for r in rows}, GROUPS)
    events = EventAccumulator(str(directory), size_guidance={"histograms": 0})
    events.Reload()
    for tag in ("weights/layers.1", "gradients/layers.1"):
        assert [e.step for e in events.Histograms(tag)] == [120, 130, 140]
    assert mindinsight_steps(directory, "gradients/layers.1") == [120, 130, 140]
    assert sorted(summary_histograms(directory)) == [120, 130, 140]
