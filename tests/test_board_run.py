"""End to end: `msmon run --board --keep-board` trains for real; the board lists the run, `runs` and
`backup-config --list` show it, `board stop` leaves no process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

pytestmark = [pytest.mark.training, pytest.mark.board]
QUICKSTART = Path(__file__).resolve().parents[1] / "configs" / "quickstart_cpu.yaml"


def test_run_with_kept_board(tmp_path: Path) -> None:
    config = tmp_path / "quickstart_cpu.yaml"
    shutil.copy(QUICKSTART, config)
    env = {**os.environ, "MSMON_HOME": str(tmp_path / "home"), "NO_COLOR": "1"}
    msmon = [sys.executable, "-m", "msmon"]
    run = subprocess.run(
        [*msmon, "run", str(config), "--board", "--port", "0", "--keep-board",
         "train_dataset.data_loader.num_samples=40"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400,
    )
    status = subprocess.run([*msmon, "board", "status", "--json"], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=60)
    boards = json.loads(status.stdout or "[]")
    try:
        assert run.returncode == 0, run.stderr[-3000:]
        (board,) = boards
        assert board["state"] == "healthy"
        assert board["directory"] == str(tmp_path / "monitor_logs" / "quickstart")
        deadline = time.monotonic() + 60
        while True:
            with urllib.request.urlopen(f"{board['url']}v1/mindinsight/datavisual/train-jobs", timeout=5) as resp:
                jobs = json.loads(resp.read())
            # MindInsight lists the job once it sees the lineage file; its scalars arrive a load cycle later
            loaded = [job for job in jobs["train_jobs"] if "loss/scalar" in job["plugins"]["scalar"]]
            if loaded or time.monotonic() > deadline:
                break
            time.sleep(1)
        (job,) = jobs["train_jobs"]
        run_dir = next((tmp_path / "monitor_logs" / "quickstart").iterdir())
        assert job["train_id"] == f"./{run_dir.name}" and "loss/scalar" in job["plugins"]["scalar"]

        table = subprocess.run([*msmon, "runs", "monitor_logs", "--json"], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=60)
        (info,) = json.loads(table.stdout)
        assert (info["project"], info["run"], info["status"], info["last_step"]) == (
            "quickstart", run_dir.name, "completed", 20)
        assert isinstance(info["last_loss"], float)
        listing = subprocess.run([*msmon, "backup-config", str(config), "--list"], cwd=tmp_path, env=env,
                                 capture_output=True, text=True, timeout=60)
        assert f"msmon run {run_dir.name}" in listing.stdout and "identical to #1" in listing.stdout
    finally:
        stop = subprocess.run([*msmon, "board", "stop", "--all"], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=60)
    assert stop.returncode == 0, stop.stderr
    for board in boards:
        left = []
        for proc in psutil.process_iter():
            try:
                if os.getpgid(proc.pid) == board["pgid"] and proc.status() != psutil.STATUS_ZOMBIE:
                    left.append(proc)
            except (OSError, psutil.Error):
                continue
        assert left == []
