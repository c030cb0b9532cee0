"""A plain ``mindspore.train.Model.train`` loop (only the loss exists) monitored by msmon in a child process."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from engine_support import read_jsonl
from test_engine_faults import drive, warnings_about

pytestmark = pytest.mark.training


def test_model_train_records_loss_lr_throughput_and_warns_about_grad_norm(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    metrics = ["loss", "grad_norm", "learning_rate", "throughput", "global_step", "step_time_ms"]
    proc, summary, seen = drive(tmp_path, monitor_type=["file", "tensorboard"], steps=60, log_interval=10,
                                track_metrics=metrics, verbose=True)
    assert [r["step"] for r in seen] == [10, 20, 30, 40, 50, 60]
    losses = json.loads((tmp_path / "logs" / "losses.json").read_text())
    for record in seen:
        assert record["loss"] == losses[str(record["step"])]
        # nn.CosineDecayLR(0, 0.01, 60) applied at this step (the optimizer's global step before the update)
        expected_lr = 0.01 * 0.5 * (1 + math.cos(math.pi * (record["step"] - 1) / 60))
        assert record["learning_rate"] == pytest.approx(expected_lr, rel=1e-5, abs=1e-9)
        assert record["samples_per_s"] == pytest.approx(4 / (record["step_time_ms"] / 1000))
        assert "grad_norm" not in record and "throughput" not in record  # float features: no token count
    absent = warnings_about(proc.stderr, "'grad_norm' is absent")
    assert len(absent) == 1 and "use_clip_grad: True" in absent[0]
    assert proc.stderr.count("Monitor callback registered successfully") == 1
    assert proc.stderr.count("INFO msmon msmon: step ") == 6
    assert read_jsonl(tmp_path / "logs" / "p" / "r" / "metrics.jsonl") == seen
    assert summary["backends"]["tensorboard"]["written"] == 6
