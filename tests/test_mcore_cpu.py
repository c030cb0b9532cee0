"""What only the mcore path has (Qwen3, use_legacy False), trained by the real `msmon run` on CPU: the per-token
loss and the separate losses. The quickstart itself runs on both model paths in test_run_e2e.py, and msmon's
values must equal what mindformers' own MFLossMonitor printed for the same step.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_msmon
from helpers_training import QUICKSTART_QWEN3, mindformers_step_lines, write_quickstart_config


def _run(root: Path, name: str, steps: int, interval: int, overrides: dict | None = None) -> dict:
    config = write_quickstart_config(root, steps=steps, overrides=overrides, source=QUICKSTART_QWEN3,
                                     run_name=name, log_interval=interval, monitor_type=["file"])
    env = {"MSMON_HOME": str(root / "home"), "MSMON_CACHE_DIR": str(root / "cache")}
    result = run_msmon("run", str(config), cwd=root, env=env, timeout=600)
    run_dir = root / "monitor_logs" / "quickstart_qwen3" / name
    rows = []
    if (run_dir / "metrics.jsonl").is_file():
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {"root": root, "result": result, "run_dir": run_dir, "rows": rows}


def _assert_equal_to_mindformers(run: dict, names: tuple[str, ...]) -> None:
    printed = mindformers_step_lines(run["run_dir"])
    for row in run["rows"]:
        for name in names:  # printed with 6 (loss) or 8 significant digits
            assert row[name] == pytest.approx(printed[row["step"]][name], rel=2e-6, abs=2e-6), (row["step"], name)


@pytest.mark.training
def test_per_token_loss_and_separate_losses_equal_mindformers_printed_values(tmp_path: Path) -> None:
    """calculate_per_token_loss: the train step still returns 5 values, the loss already divided by the token
    count. print_separate_loss (spelled out: msmon builds mindformers' config from a dict, which skips the
    template that defaults it to True) with mtp_num_layers makes MFLossMonitor read and print the separate
    losses (Qwen3 builds no MTP block, so the MTP loss is an exact 0: not recorded); on CPU it printed 0 for
    each before msmon's copy."""
    steps, interval = 12, 4
    run = _run(tmp_path, "parts_run", steps, interval, {"calculate_per_token_loss": True, "print_separate_loss": True,
                                                        "model.model_config.mtp_num_layers": 1})
    assert run["result"].code == 0, run["result"].stderr[-3000:]
    assert [row["step"] for row in run["rows"]] == list(range(interval, steps + 1, interval))
    _assert_equal_to_mindformers(run, ("loss", "grad_norm", "learning_rate", "loss_lm"))
    for row in run["rows"]:
        assert row["loss_lm"] == pytest.approx(row["loss"], rel=1e-6) and row["loss_lm"] > 1.0
        assert "loss_mtp" not in row and "loss_aux" not in row
