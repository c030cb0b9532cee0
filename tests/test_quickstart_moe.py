"""`msmon run quickstart-moe`: mindformers' own Qwen3-MoE pretrain config, shrunk, trained by the real Trainer on CPU.

One run of the shipped file by name (200 steps, log interval 10): exit 0, the loss falls, and msmon's loss, lm
loss, auxiliary load-balancing loss, grad norm and learning rate are the values MFLossMonitor printed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_msmon
from helpers_training import mindformers_step_lines
from launch import records


@pytest.fixture(scope="module")
def moe_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run directory of `msmon run quickstart-moe --plain` (exit 0 asserted)."""
    cwd = tmp_path_factory.mktemp("quickstart_moe")
    result = run_msmon("run", "quickstart-moe", "monitor_config.run_name=moe", "--plain", cwd=cwd, timeout=900)
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
