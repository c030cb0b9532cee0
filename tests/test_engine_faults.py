"""Fault tests: real MindSpore training in a child process while a backend fails; training must finish
with exit code 0, the warning must appear once, and the other backends must keep every record."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import require_immutable_files
from engine_support import MlflowServer, read_jsonl, wait_until

pytestmark = pytest.mark.training

DRIVER = Path(__file__).resolve().parent / "engine_driver.py"


def drive(tmp_path: Path, **spec: Any) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], list[dict[str, Any]]]:
    spec = {"save_dir": str(tmp_path / "logs"), "steps": 100, **spec}
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec))
    proc = subprocess.run([sys.executable, str(DRIVER), str(spec_file)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    seen = json.loads((tmp_path / "logs" / "seen.json").read_text())
    return proc, summary, seen


def warnings_about(stderr: str, text: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("WARNING msmon") and text in line]


def jsonl(tmp_path: Path) -> list[dict[str, Any]]:
    return read_jsonl(tmp_path / "logs" / "p" / "r" / "metrics.jsonl")


@pytest.fixture(autouse=True)
def _cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def test_backend_raising_on_every_call(tmp_path):
    proc, summary, seen = drive(tmp_path, monitor_type=["failing", "file"])
    assert len(seen) == 20
    assert len(warnings_about(proc.stderr, "msmon: backend 'failing'")) == 1
    assert summary["backends"]["failing"]["status"] == "disabled"
    assert jsonl(tmp_path) == seen


def test_backend_blocking_two_seconds_per_write(tmp_path):
    started = time.monotonic()
    proc, summary, seen = drive(tmp_path, monitor_type=["blocking", "file"], steps=300, sleep=0.01)
    assert time.monotonic() - started < 60
    assert jsonl(tmp_path) == seen and len(seen) == 60
    blocked = summary["backends"]["blocking"]
    assert blocked["written"] + blocked["dropped"] + blocked["lost"] == 60 and blocked["written"] > 0
    assert warnings_about(proc.stderr, "backend") == []


def test_save_dir_made_read_only_mid_run(tmp_path):
    require_immutable_files(tmp_path)
    run_dir = tmp_path / "logs" / "p" / "r"
    try:
        proc, summary, seen = drive(tmp_path, monitor_type=["file", "memory"], steps=150, sleep=0.005,
                                    events={"60": ["immutable", str(run_dir)]})
    finally:
        subprocess.run(["chattr", "-R", "-i", str(tmp_path / "logs")], check=False)
    assert len(seen) == 30
    assert len(warnings_about(proc.stderr, "msmon: backend 'file'")) == 1
    assert len(warnings_about(proc.stderr, "heartbeat.json")) <= 1
    written = jsonl(tmp_path)
    assert written == seen[: len(written)] and 0 < len(written) < 30  # intact up to the step it became read-only
    assert summary["backends"]["file"]["status"] in ("failing", "disabled") and summary["backends"]["file"]["lost"] > 0
    assert summary["backends"]["memory"]["written"] == 30 and summary["backends"]["memory"]["lost"] == 0


def test_enospc_raised_by_a_write(tmp_path):
    proc, summary, seen = drive(tmp_path, monitor_type=["devfull", "file", "memory"], steps=150, sleep=0.005)
    warned = warnings_about(proc.stderr, "msmon: backend 'devfull'")
    assert len(warned) == 1 and "No space left on device" in warned[0]
    assert jsonl(tmp_path) == seen and len(seen) == 30
    assert summary["backends"]["memory"]["written"] == 30
    assert "ENOSPC" in summary["disk_guard"]


@pytest.mark.board
def test_mlflow_server_killed_mid_run(tmp_path):
    server = MlflowServer(tmp_path / "mlflow")
    try:
        proc, summary, seen = drive(tmp_path, monitor_type=["mlflow", "file"], steps=200, sleep=0.01,
                                    mlflow_uri=server.url, events={"100": ["kill_group", server.proc.pid]})
    finally:
        server.stop()
    assert len(warnings_about(proc.stderr, "msmon: backend 'mlflow'")) == 1
    assert jsonl(tmp_path) == seen and len(seen) == 40
    mlflow = summary["backends"]["mlflow"]
    assert mlflow["status"] == "retrying" and 0 < mlflow["written"] <= 20 < 40 == mlflow["written"] + mlflow["lost"]


def test_sigkill_keeps_the_jsonl_up_to_the_last_flush(tmp_path):
    spec = {"save_dir": str(tmp_path / "logs"), "steps": 2000, "sleep": 0.01, "monitor_type": ["file"],
            "log_interval": 5}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    proc = subprocess.Popen([sys.executable, str(DRIVER), str(tmp_path / "spec.json")], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    path = tmp_path / "logs" / "p" / "r" / "metrics.jsonl"
    try:
        assert wait_until(lambda: path.exists() and path.read_text().count("\n") >= 20, 120, 0.2)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    text = path.read_text()
    assert text.endswith("\n")
    records = read_jsonl(path)
    assert len(records) >= 20 and [r["step"] for r in records] == list(range(5, 5 * len(records) + 1, 5))
    assert all(isinstance(r["loss"], float) for r in records)


