"""A plain ``mindspore.train.Model.train`` loop (only the loss exists) monitored by msmon in a child process."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from engine_support import read_jsonl
from test_engine_faults import drive, warnings_about

pytestmark = [pytest.mark.training, pytest.mark.compat_smoke]


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


def test_request_stop_ends_training_at_the_next_step_end(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    proc, summary, seen = drive(tmp_path, steps=200, log_interval=1, monitor_type=["file"],
                                events={"37": ["stop", "test asked to stop"]})
    # asked after msmon's check at step 37 (a later callback): msmon stops the run at the end of step 38
    assert summary["last_step"] == 38 and seen[-1]["step"] == 38
    assert read_jsonl(tmp_path / "logs" / "p" / "r" / "metrics.jsonl") == seen


def test_atexit_flushes_when_close_is_never_called(tmp_path: Path, monkeypatch):
    import subprocess
    import sys

    from test_engine_faults import DRIVER

    monkeypatch.chdir(tmp_path)
    spec = {"save_dir": str(tmp_path / "logs"), "steps": 100, "log_interval": 1, "monitor_type": ["file", "blocking"],
            "blocking_delay": 0.5, "no_close": True}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    proc = subprocess.run([sys.executable, str(DRIVER), str(tmp_path / "spec.json")], capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads((tmp_path / "logs" / "seen.json").read_text())
    assert len(seen) == 100 and read_jsonl(tmp_path / "logs" / "p" / "r" / "metrics.jsonl") == seen
