"""Faults on the way out of `msmon run` (the real Trainer, real child processes, real signals).

Each fault ends with its documented exit code and run.json status, metrics.jsonl holds every record logged
before the fault (checked against the steps mindformers itself printed), no process is left behind, and
the time from the fault to the exit is bounded. docs/run.md lists the numbers measured here. Supervisor-level
faults do not depend on the model: they run on the legacy quickstart.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from canonical import hanging_server, registered
from helpers_training import parse_step_lines, write_quickstart_config
from launch import Launched, records

pytestmark = pytest.mark.training


@dataclass
class Ended:
    """What a run left behind."""

    code: int
    output: str
    run_dir: Path
    exit_s: float  # from the fault to the end of `msmon run`
    left: list[str]

    @property
    def info(self) -> dict:
        return json.loads((self.run_dir / "run.json").read_text())

    def records(self) -> list[dict]:
        path = self.run_dir / "metrics.jsonl"
        text = path.read_text() if path.exists() else ""
        assert text == "" or text.endswith("\n"), "metrics.jsonl ends mid-line"
        return [json.loads(line) for line in text.splitlines()]

    def logged_steps(self, log_interval: int) -> list[int]:
        """The steps msmon logged, from the steps mindformers printed (``--framework-logs``: on the output)."""
        return [s for s in sorted(parse_step_lines(self.output)) if s % log_interval == 0]


def run_with_fault(root: Path, config: Path, run_dir: Path, fault: Callable[[Launched], None], *args: str,
                   after_records: int = 3) -> Ended:
    """`msmon run --plain --framework-logs CONFIG ARGS` (mindformers' step lines on the output, whatever happens to
    the run directory); once ``after_records`` records are on disk, ``fault(run)``."""
    run = Launched.start(root, "run", str(config), "--plain", "--framework-logs", *args)
    try:
        run.wait_for(lambda: len(records(run_dir)) >= after_records)
        fault(run)
        faulted = time.monotonic()
        code = run.finish(kill=False)
        ended = time.monotonic()
        left = run.left_behind()
    finally:
        run.kill()
    return Ended(code, run.output, run_dir, ended - faulted, left)


def assert_clean_end(run: Ended) -> None:
    info = run.info
    rows = run.records()
    tail = (run.run_dir / "run.json").stat().st_mtime - rows[-1]["time"] if rows else float("nan")
    print(f"\nMEASURED {run.run_dir.name}: exit {run.code} {run.exit_s:.1f} s after the fault, run.json {tail:.1f} s "
          f"after the last record, status {info['status']}, "
          f"{len(rows)} records in metrics.jsonl, records_lost {info['records_lost']}, "
          f"failed to close {info['backends_failed_to_close']}")
    assert "Traceback" not in run.output and "internal error" not in run.output and "Logging error" not in run.output
    assert run.left == []


def test_board_killed_then_sigterm_with_an_mlflow_server_that_never_answers(tmp_path: Path) -> None:
    """The board beside the run is killed (the run goes on, one warning), then SIGTERM while the MLflow server
    hangs: exit 143 within the close budgets, every logged step in metrics.jsonl, nothing left running."""
    server = hanging_server()
    uri = f"http://127.0.0.1:{server.getsockname()[1]}"
    release = tmp_path / "release"  # the training waits in step 16 until the board is dead and SIGTERM was sent
    config = write_quickstart_config(
        tmp_path, steps=400, run_name="term", log_interval=5, monitor_type=["file", "mindinsight", "mlflow"],
        mlflow={"tracking_uri": uri, "timeout_s": 2.0},
        overrides={"callbacks": [{"type": "MFLossMonitor"},
                                 registered("SleepOnRank", rank=0, step=16, seconds=300, release=str(release))]})
    run_dir = tmp_path / "monitor_logs" / "quickstart" / "term"
    boards: list[psutil.Process] = []

    def kill_board_then_terminate(run: Launched) -> None:
        found = run.wait_for(lambda: re.search(r"board: http://127.0.0.1:(\d+)/", run.output))
        port = int(found.group(1))
        listeners = [c.pid for c in psutil.net_connections("inet") if c.laddr and c.laddr.port == port
                     and c.status == psutil.CONN_LISTEN and c.pid]
        assert listeners, "nothing listens on the board's port"
        boards.extend(psutil.Process(pid) for pid in listeners)
        os.killpg(os.getpgid(listeners[0]), signal.SIGKILL)
        run.wait_for(lambda: "the board exited during the run" in run.output)
        run.proc.send_signal(signal.SIGTERM)
        run.wait_for(lambda: "SIGTERM received" in run.output)  # the stop is on its way to the training
        release.write_text("")

    try:
        run = run_with_fault(tmp_path, config, run_dir, kill_board_then_terminate, "--board", "--port", "0")
    finally:
        server.close()
    assert run.code == 143, run.output[-3000:]
    info = run.info
    assert info["status"] == "interrupted" and info["exit_code"] == 143
    steps = [r["step"] for r in run.records()]
    assert steps == run.logged_steps(5) and steps[-1] < 400  # every logged step, the last ones included
    assert info["backends"]["file"]["written"] == len(steps) and info["backends"]["file"]["lost"] == 0
    assert info["backends"]["mlflow"]["written"] == 0
    assert "file" not in info["backends_failed_to_close"]
    assert run.exit_s < 30, f"exit took {run.exit_s:.1f} s"
    assert_clean_end(run)
    assert [p.pid for p in boards if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []


def _can_mount() -> str | None:
    if os.geteuid() != 0:
        return "mounting a small tmpfs needs root"
    if shutil.which("mount") is None:
        return "no mount command"
    return None


STEPS_FULL = 300


@pytest.mark.skipif(_can_mount() is not None, reason=str(_can_mount()))
def test_disk_full_mid_run(tmp_path: Path) -> None:
    """The save_dir on a 384 KiB tmpfs (the framework's console.log and info.log fill half of it: about 90 of the 300
    records fit): the run completes, every record written before the disk filled is
    complete on disk, the rest is counted, log files stop with one line each, run.json says completed."""
    save = tmp_path / "full"
    save.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=384k", "tmpfs", str(save)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        # without the quickstart's CheckpointMonitor: mindformers fails the training when its 2.8 MB checkpoint does
        # not fit (msmon's own writes are under test here)
        config = write_quickstart_config(
            tmp_path, steps=STEPS_FULL, run_name="full", log_interval=1, save_dir=str(save), verbose=True,
            monitor_type=["mindinsight", "tensorboard", "file"], overrides={"callbacks": [{"type": "MFLossMonitor"}]})
        run = run_with_fault(tmp_path, config, save / "quickstart" / "full", lambda run: None, after_records=1)
        assert run.code == 0, run.output[-3000:]
        info = run.info
        assert info["status"] == "completed" and info["last_step"] == STEPS_FULL
        written = run.records()
        file = info["backends"]["file"]
        assert len(written) == file["written"] and 0 < len(written) < STEPS_FULL
        assert [r["step"] for r in written] == run.logged_steps(1)[: len(written)]
        assert info["records_lost"] == file["lost"] == STEPS_FULL - len(written)
        said = [line.split()[3] for line in run.output.splitlines() if line.startswith("msmon: cannot write ")]
        assert said and all(said.count(path) <= 2 for path in said), said  # once per file and process that holds it
        assert_clean_end(run)
    finally:
        subprocess.run(["umount", "-l", str(save)], check=False)


def removed(directory: Path) -> bool:
    """``rm -rf directory`` once; False when a file appeared in it meanwhile (a rank rewriting its heartbeat)."""
    try:
        shutil.rmtree(directory)
    except OSError:
        return False
    return True


def test_save_dir_removed_mid_run_then_sigint_twice_within_100_ms(tmp_path: Path) -> None:
    """The whole save_dir deleted after 10 records: the run goes on, its directory and run.json are recreated, one
    warning, the records since then are kept and the others counted lost. Then SIGINT twice, 50 ms apart: the second
    forces the exit (130, within 20 s), every record logged until then is in metrics.jsonl, nothing left running."""
    config = write_quickstart_config(tmp_path, steps=400, run_name="gone", log_interval=5)
    run_dir = tmp_path / "monitor_logs" / "quickstart" / "gone"
    removed_after: list[int] = []

    def remove_then_twice(run: Launched) -> None:
        removed_after.append(len(records(run_dir)))
        run.wait_for(lambda: removed(tmp_path / "monitor_logs"))  # the ranks rewrite their heartbeats meanwhile
        run.wait_for(lambda: "was deleted during the run" in run.output and len(records(run_dir)) >= 2)
        run.proc.send_signal(signal.SIGINT)
        time.sleep(0.05)  # the second signal is meant to come 50 ms after the first, not after an event
        run.proc.send_signal(signal.SIGINT)

    run = run_with_fault(tmp_path, config, run_dir, remove_then_twice, after_records=10)
    assert run.code == 130, run.output[-3000:]
    info = run.info  # recreated
    assert info["status"] == "interrupted" and info["error"] == "forced by a second SIGINT"
    steps = [r["step"] for r in run.records()]
    logged = run.logged_steps(5)
    assert len(steps) >= 2 and steps == logged[len(logged) - len(steps):]  # every record since it was recreated
    assert info["records_lost"] >= removed_after[0]
    assert run.exit_s < 20, f"exit took {run.exit_s:.1f} s"
    assert_clean_end(run)


def test_a_dead_network_with_hanging_hooks_and_tracking_server_exits_quickly(canonical) -> None:
    """The review's case (the canonical lr_50_mcore run): a NaN loss (alerts), a webhook and a command hook that
    hang, an MLflow server that never answers. The run completes and exits within the slowest budget; the JSONL
    loses nothing."""
    run = canonical("lr_50_mcore")
    assert run.code == 0, run.output[-3000:]
    info = run.info
    rows = run.records()
    assert info["status"] == "completed" and info["alert_count"] >= 1
    assert [r["step"] for r in rows] == list(range(run.log_interval, run.steps + 1, run.log_interval))
    printed = parse_step_lines((run.run_dir / "logs" / "console.log").read_text(errors="replace"))
    assert [s for s in sorted(printed) if s % run.log_interval == 0] == [r["step"] for r in rows]
    assert info["backends"]["file"]["lost"] == 0 and "file" not in info["backends_failed_to_close"]
    assert "backend 'file' did not finish closing" not in run.output
    finished = (run.run_dir / "run.json").stat().st_mtime
    assert finished - rows[-1]["time"] < 25, f"{finished - rows[-1]['time']:.0f} s from the last step to run.json"
    print(f"\nMEASURED {run.name}: run.json {finished - rows[-1]['time']:.1f} s after the last record")
    assert "Traceback" not in run.output and "internal error" not in run.output
