"""`msmon run --worker-num 2` on CPU: two data-parallel ranks through msrun, one metrics file, one run.json."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run_msmon
from helpers_ranks import processes_of
from helpers_training import write_quickstart_config

STEPS = 30


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.training
def test_two_cpu_ranks_train_data_parallel_with_one_metrics_file(tmp_path: Path) -> None:
    config = write_quickstart_config(tmp_path, steps=STEPS, run_name="dp2", log_interval=10)
    env = {"MSMON_HOME": str(tmp_path / "home"), "MSMON_CACHE_DIR": str(tmp_path / "cache")}
    result = run_msmon(
        "run", str(config), "--worker-num", "2", "--master-port", str(_free_port()),
        "use_parallel=True", "parallel_config.data_parallel=2", "parallel.full_batch=False",
        cwd=tmp_path, env=env, timeout=600,
    )
    run_dir = tmp_path / "monitor_logs" / "quickstart" / "dp2"
    assert result.code == 0, result.stderr[-3000:]
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "completed" and info["device_count"] == 2 and info["exit_code"] == 0
    assert info["last_step"] == STEPS
    assert list(tmp_path.rglob("metrics.jsonl")) == [run_dir / "metrics.jsonl"]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [10, 20, 30]
    assert {row["rank"] for row in rows} == {0}
    for row in rows:  # the callback knows it is one of two ranks
        assert row["throughput"] == pytest.approx(2 * row["throughput_per_device"])
    logs = run_dir / "logs" / "ranks"
    for rank in (0, 1):
        text = (logs / f"worker_{rank}.log").read_text(errors="replace")
        assert f"step:[   {STEPS}/   {STEPS}]" in text
        assert "global_batch_size = batch_size_per_card * device_num" in text and "= 4 = 2 * 2 * 1" in text
        status = json.loads((run_dir / "logs" / f"rank_{rank}.result.json").read_text())
        assert status["status"] == "completed"
    assert not (tmp_path / "output").exists()
    assert processes_of(run_dir) == []


@pytest.mark.training
def test_sigint_stops_every_rank_and_leaves_no_process(tmp_path: Path) -> None:
    config = write_quickstart_config(tmp_path, steps=400, run_name="dpsig", log_interval=5)
    env = {k: v for k, v in os.environ.items() if k != "LOCAL_DEFAULT_PATH"}
    env.update(MSMON_HOME=str(tmp_path / "home"), MSMON_CACHE_DIR=str(tmp_path / "cache"))
    run_dir = tmp_path / "monitor_logs" / "quickstart" / "dpsig"
    proc = subprocess.Popen(
        [sys.executable, "-m", "msmon", "run", str(config), "--worker-num", "2", "--master-port", str(_free_port()),
         "use_parallel=True", "parallel_config.data_parallel=2", "parallel.full_batch=False"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 300
        metrics = run_dir / "metrics.jsonl"
        while time.monotonic() < deadline and proc.poll() is None:
            if metrics.exists() and len(metrics.read_text().splitlines()) >= 2:
                break
            time.sleep(0.3)
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr[-2000:]
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "interrupted" and info["exit_code"] == 130
    for rank in (0, 1):
        assert json.loads((run_dir / "logs" / f"rank_{rank}.result.json").read_text())["status"] == "interrupted"
    assert info["last_step"] < 400
    assert processes_of(run_dir) == []
