"""`msmon run quickstart-moe`: mindformers' own Qwen3-MoE pretrain config, shrunk, trained by the real Trainer on CPU.

One run of the shipped file by name (200 steps, log interval 10): exit 0, the loss falls, and msmon's loss, lm
loss, auxiliary load-balancing loss, grad norm and learning rate are the values MFLossMonitor printed; the routing
records are the tokens the routers counted, read apart by a test callback at every step. From step 141 on the test
callback pushes layer 1's router towards expert 2 (``PUSH_STEP``): the routing-health detectors stay silent on the
clean quickstart before it and name that layer and expert after it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import run_msmon
from engine_support import summary_scalars
from helpers_training import mindformers_step_lines
from launch import records

from msmon import layout

PUSH_LAYER, PUSH_EXPERT, PUSH_STEP = 1, 2, 140  # tests/moe_callbacks.py: the router's push, from step 141 on
ROUTING_DETECTORS = ("moe_collapse", "moe_dead_experts", "moe_imbalance_growth")


@pytest.fixture(scope="module")
def moe_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run directory of `msmon run quickstart-moe --plain` (exit 0 asserted), its MFLossMonitor replaced by
    tests/moe_callbacks.DumpRouting, which writes the routers' shares of every step to ``routing.jsonl`` beside it and
pushes layer PUSH_LAYER's router towards expert PUSH_EXPERT after step PUSH_STEP."""
    cwd = tmp_path_factory.mktemp("quickstart_moe")
    result = run_msmon("run", "quickstart-moe", "monitor_config.run_name=moe",
                       "callbacks[0].auto_register=moe_callbacks.DumpRouting", "--plain", cwd=cwd, timeout=900,
                       env={"MSMON_TEST_ROUTING_DUMP": str(cwd / "routing.jsonl"),
                            "MSMON_TEST_ROUTER_PUSH": f"{PUSH_LAYER}:{PUSH_EXPERT}:{PUSH_STEP}"})
    assert result.code == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return cwd / "monitor_logs" / "quickstart_moe" / "moe"


@pytest.mark.training
def test_the_moe_quickstart_trains_to_the_end_and_its_loss_falls(moe_run: Path) -> None:
    info = json.loads((moe_run / "run.json").read_text())
    assert (info["status"], info["exit_code"], info["last_step"]) == ("completed", 0, 200)
    rows = records(moe_run)
    assert [r["step"] for r in rows] == list(range(10, 201, 10))
    first, last = [r["loss"] for r in rows[:3]], [r["loss"] for r in rows[-5:]]
    assert sum(last) / len(last) < 0.5 * sum(first) / len(first), [r["loss"] for r in rows]


@pytest.mark.training
def test_msmon_records_the_losses_mindformers_printed_the_auxiliary_loss_apart(moe_run: Path) -> None:
    printed = mindformers_step_lines(moe_run)
    assert sorted(printed) == list(range(1, 201))
    for row in records(moe_run):
        step = printed[row["step"]]
        for name in ("loss", "loss_lm", "loss_aux"):  # 6 decimals printed
            assert row[name] == pytest.approx(step[name], abs=5e-6), (row["step"], name)
        for name in ("grad_norm", "learning_rate"):
            assert row[name] == pytest.approx(step[name], rel=2e-6, abs=2e-9), (row["step"], name)
        assert 0 < row["loss"] - row["loss_lm"] < 0.01  # the aux loss (coefficient 0.001, 2 layers) is in the loss


@pytest.mark.training
def test_the_routing_records_are_the_tokens_the_routers_counted_over_each_logging_window(moe_run: Path) -> None:
    """Tokens per expert = the routers' shares (read before mindformers zeroes them) * top-k 2 * 128 tokens a step,
    summed over the 10 steps since the previous logging step; every routed slot is counted once."""
    dumped = records(moe_run.parents[2], "routing.jsonl")
    assert [d["step"] for d in dumped] == list(range(1, 201))
    rows = records(moe_run)
    for row in rows:
        window = [d for d in dumped if row["step"] - 10 < d["step"] <= row["step"]]
        for layer in ("0", "1"):
            expected = [sum(d["layers"][layer][e] for d in window) * 2 * 128 for e in range(4)]
            got = [row[f"moe/layer_{layer}/expert_{e}"] for e in range(4)]
            assert got == pytest.approx(expected, abs=1e-2), (row["step"], layer)
            assert sum(got) == pytest.approx(10 * 2 * 128)
            mean = sum(got) / 4
            assert row[f"moe/layer_{layer}/max_load"] == pytest.approx(max(got) / mean)
            spread = (sum((g - mean) ** 2 for g in got) / 4) ** 0.5
            assert row[f"moe/layer_{layer}/cv"] == pytest.approx(spread / mean)
            assert row[f"moe/layer_{layer}/idle_experts"] == sum(1 for g in got if g == 0)


@pytest.mark.training
def test_the_routing_records_reach_the_board_as_scalars(moe_run: Path) -> None:
    scalars = summary_scalars(moe_run)
    for row in records(moe_run):
        routing = {key: value for key, value in row.items() if key.startswith("moe/")}
        assert len(routing) == 2 * (4 + 3)
        for key, value in routing.items():
            assert scalars[row["step"]][key] == pytest.approx(value, rel=1e-6), (row["step"], key)


@pytest.mark.training
def test_a_router_pushed_towards_one_expert_raises_the_collapse_alert_naming_layer_and_expert(moe_run: Path) -> None:
    """No routing alert on the clean quickstart (steps 1-140); the push at step 141 raises moe_collapse naming layer 1
    and expert 2 within 50 steps, with its onset at the push; the pushed expert really took every token; and
    ``msmon replay`` of the run raises the same routing alerts."""
    alerts = [a for a in records(moe_run, layout.ALERTS) if a["detector"] in ROUTING_DETECTORS]
    assert [a for a in alerts if a["step"] <= PUSH_STEP] == []
    collapse = [a for a in alerts if a["detector"] == "moe_collapse"]
    assert collapse, alerts
    first = collapse[0]
    assert PUSH_STEP < first["step"] <= PUSH_STEP + 50, first
    assert (first["values"]["layer"], first["values"]["experts"]) == (PUSH_LAYER, [PUSH_EXPERT]), first
    assert first["onset_step"] == PUSH_STEP + 1
    assert f"MoE layer {PUSH_LAYER} collapsed onto expert {PUSH_EXPERT}" in first["message"]
    pushed = [r for r in records(moe_run) if r["step"] > PUSH_STEP]
    assert all(r[f"moe/layer_{PUSH_LAYER}/expert_{PUSH_EXPERT}"] == pytest.approx(10 * 128) for r in pushed)
    replayed = run_msmon("replay", str(moe_run), "--json")
    assert replayed.code == 0, replayed.stderr[-2000:]
    again = [a for a in json.loads(replayed.stdout) if a["detector"] in ROUTING_DETECTORS]
    assert [(a["detector"], a["step"], a["message"]) for a in again] == \
        [(a["detector"], a["step"], a["message"]) for a in alerts]


@pytest.mark.training
def test_moe_tflops_count_the_active_experts_as_mindformers_does(moe_run: Path) -> None:
    """model_flops is mindformers' own count for the MoE model (its monitor's, here the test subclass in its place:
    routed top-2 of 4 experts of width 64, no shared expert), and the TFLOPS the figures MFLossMonitor printed."""
    info = (moe_run / "logs" / "output" / "log" / "rank_0" / "info.log").read_text(errors="replace")
    counted = re.search(r"Full model flops calculated: (\d+)", info)
    assert counted is not None and int(counted.group(1)) == 112_066_560  # tests/test_model_flops.py: the formula's
    printed = mindformers_step_lines(moe_run)
    for row in records(moe_run):
        assert row["model_flops"] == 112_066_560
        assert round(row["tflops_per_device"], 3) == pytest.approx(printed[row["step"]]["tflops_per_device"],
                                                                   abs=0.0011), row["step"]
