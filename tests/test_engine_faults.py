"""Faults of the backends while a real MindSpore training runs (``mindspore.train.Model.train`` on a tiny network, in a
child process: tests/engine_driver.py): training must finish with exit code 0, each failing backend warns once, and
the other backends keep every record.

One training carries every backend fault at once (the isolation is the point: a backend that raises on every call,
one that blocks two seconds per write, one whose every flush hits the kernel's ENOSPC, an MLflow server killed
mid-run, the run directory made read-only at step 60 where root can do that) beside the file and memory
backends, and is asked to stop at step 137; it is also the plain ``Model.train`` loop with no train-step wrapper
(only the loss exists). Two more trainings each need their own process: a SIGKILL, and a session never closed (its
atexit hook flushes).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from engine_support import MlflowServer, read_jsonl, wait_until

pytestmark = pytest.mark.training

DRIVER = Path(__file__).resolve().parent / "engine_driver.py"


def drive(tmp_path: Path, **spec: Any) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], list[dict[str, Any]]]:
    spec = {"save_dir": str(tmp_path / "logs"), "steps": 100, **spec}
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec))
    proc = subprocess.run([sys.executable, str(DRIVER), str(spec_file)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, start_new_session=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    seen = json.loads((tmp_path / "logs" / "seen.json").read_text())
    return proc, summary, seen


def warnings_about(stderr: str, text: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("WARNING msmon") and text in line]


def jsonl(tmp_path: Path) -> list[dict[str, Any]]:
    return read_jsonl(tmp_path / "logs" / "p" / "r" / "metrics.jsonl")


def immutable_files_work(directory: Path) -> bool:
    """Whether ``chattr +i`` works here (root, chattr, a file system with the immutable attribute)."""
    if os.geteuid() != 0 or shutil.which("chattr") is None:
        return False
    probe = directory / ".immutable-probe"
    probe.write_text("x")
    made = subprocess.run(["chattr", "+i", str(probe)], capture_output=True)
    subprocess.run(["chattr", "-i", str(probe)], capture_output=True)
    probe.unlink()
    return made.returncode == 0


@pytest.fixture(scope="module")
def faulty() -> dict[str, Any]:
    """The one training with every backend fault (built once per session; its tests read it)."""
    import shared_session

    def build(directory: Path) -> dict[str, Any]:
        server = MlflowServer(directory / "mlflow")
        run_dir = directory / "logs" / "p" / "r"
        read_only = immutable_files_work(directory)
        events = {"100": ["kill_group", server.proc.pid], "137": ["stop", "test asked to stop"]}
        if read_only:
            events["60"] = ["immutable", str(run_dir)]
        try:
            started = time.monotonic()
            proc, summary, seen = drive(
                directory, monitor_type=["failing", "blocking", "devfull", "mlflow", "file", "memory"],
                steps=300, sleep=0.01, mlflow_uri=server.url, verbose=True, events=events,
                track_metrics=["loss", "grad_norm", "learning_rate", "throughput", "global_step", "step_time_ms"])
        finally:
            server.stop()
            subprocess.run(["chattr", "-R", "-i", str(directory / "logs")], check=False, capture_output=True)
        losses = json.loads((directory / "logs" / "losses.json").read_text())
        return {"stderr": proc.stderr, "summary": summary, "seen": seen, "seconds": time.monotonic() - started,
                "jsonl": read_jsonl(run_dir / "metrics.jsonl"), "losses": losses, "read_only": read_only}

    return shared_session.once("engine-faults", build)


def test_each_failing_backend_warns_once_and_the_others_keep_every_record(faulty: dict[str, Any]) -> None:
    stderr, summary, seen = faulty["stderr"], faulty["summary"], faulty["seen"]
    backends = summary["backends"]
    assert len(seen) == 27  # steps 5..135
    assert backends["memory"]["written"] == 27 and backends["memory"]["lost"] == 0
    if not faulty["read_only"]:  # (else the file backend is the read-only case below)
        assert faulty["jsonl"] == seen
    # raising on every call: one warning, disabled
    assert len(warnings_about(stderr, "msmon: backend 'failing'")) == 1 and backends["failing"]["status"] == "disabled"
    # two seconds per write: never a warning, training never waited, every record accounted for
    blocked = backends["blocking"]
    assert warnings_about(stderr, "backend 'blocking'") == []
    assert blocked["written"] + blocked["dropped"] + blocked["lost"] == 27 and blocked["written"] > 0
    assert faulty["seconds"] < 120
    # the kernel's ENOSPC at every flush
    warned = warnings_about(stderr, "msmon: backend 'devfull'")
    assert len(warned) == 1 and "No space left on device" in warned[0] and "ENOSPC" in summary["disk_guard"]
    # the MLflow server killed at step 100 (record 20): one warning, retried, the rest counted lost
    assert len(warnings_about(stderr, "msmon: backend 'mlflow'")) == 1
    mlflow = backends["mlflow"]
    assert mlflow["status"] == "retrying" and 0 < mlflow["written"] <= 20 < 27 == mlflow["written"] + mlflow["lost"]


def test_save_dir_made_read_only_mid_run(faulty: dict[str, Any]) -> None:
    """The run directory made read-only (even for root: chattr +i) at step 60: the file backend warns once and
    keeps what it wrote before, intact; the memory backend keeps every record."""
    if not faulty["read_only"]:
        pytest.skip("making a directory read-only for root needs root, chattr and a file system that supports it")
    stderr, summary, seen = faulty["stderr"], faulty["summary"], faulty["seen"]
    assert len(warnings_about(stderr, "msmon: backend 'file'")) == 1
    assert len(warnings_about(stderr, "rank_0.json")) <= 1
    written = faulty["jsonl"]
    assert written == seen[: len(written)] and 0 < len(written) < 27  # intact up to the step it became read-only
    assert summary["backends"]["file"]["status"] in ("failing", "disabled") and summary["backends"]["file"]["lost"] > 0


def test_model_train_records_loss_lr_throughput_warns_about_grad_norm_and_stops_on_request(
    faulty: dict[str, Any],
) -> None:
    """A plain ``Model.train`` loop: only the loss exists (no grad norm, no token count); asked to stop after msmon's
    check at step 137 (a later callback), msmon stops the run at the end of step 138."""
    stderr, summary, seen = faulty["stderr"], faulty["summary"], faulty["seen"]
    assert [r["step"] for r in seen] == list(range(5, 136, 5)) and summary["last_step"] == 138
    for record in seen:
        assert record["loss"] == faulty["losses"][str(record["step"])]
        # nn.CosineDecayLR(0, 0.01, 300) applied at this step (the optimizer's global step before the update)
        expected_lr = 0.01 * 0.5 * (1 + math.cos(math.pi * (record["step"] - 1) / 300))
        assert record["learning_rate"] == pytest.approx(expected_lr, rel=1e-5, abs=1e-9)
        assert record["samples_per_s"] == pytest.approx(4 / (record["step_time_ms"] / 1000))
        assert "grad_norm" not in record and "throughput" not in record  # float features: no token count
    absent = warnings_about(stderr, "'grad_norm' is absent")
    assert len(absent) == 1 and "use_clip_grad: True" in absent[0]
    assert stderr.count("Monitor callback registered successfully") == 1
    assert stderr.count("INFO msmon msmon: step ") == 27


def test_sigkill_keeps_the_jsonl_up_to_the_last_flush(tmp_path):
    spec = {"save_dir": str(tmp_path / "logs"), "steps": 2000, "sleep": 0.01, "monitor_type": ["file"],
            "log_interval": 5}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    proc = subprocess.Popen([sys.executable, str(DRIVER), str(tmp_path / "spec.json")], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    path = tmp_path / "logs" / "p" / "r" / "metrics.jsonl"
    try:
        assert wait_until(lambda: path.exists() and path.read_text().count("\n") >= 20, 300, 0.2)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(60) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(60)
    text = path.read_text()
    assert text.endswith("\n")
    records = read_jsonl(path)
    assert len(records) >= 20 and [r["step"] for r in records] == list(range(5, 5 * len(records) + 1, 5))
    assert all(isinstance(r["loss"], float) for r in records)


def test_atexit_flushes_when_close_is_never_called(tmp_path: Path) -> None:
    spec = {"save_dir": str(tmp_path / "logs"), "steps": 100, "log_interval": 1, "monitor_type": ["file", "blocking"],
            "blocking_delay": 0.5, "no_close": True}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    proc = subprocess.run([sys.executable, str(DRIVER), str(tmp_path / "spec.json")], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path, start_new_session=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads((tmp_path / "logs" / "seen.json").read_text())
    assert len(seen) == 100 and read_jsonl(tmp_path / "logs" / "p" / "r" / "metrics.jsonl") == seen
