"""`msmon run` lifecycle: SIGINT mid-run, a crash, two runs racing for one name, refusals that create nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from conftest import run_msmon, tree_snapshot
from helpers_checkpoints import checkpoint_tree
from helpers_training import QUICKSTARTS, write_quickstart_config


def _env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MSMON_DEBUG", "LOCAL_DEFAULT_PATH")}
    env.update(NO_COLOR="1", MSMON_HOME=str(root / "home"), MSMON_CACHE_DIR=str(root / "cache"))
    return env


def _start(root: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "msmon", "run", *args], cwd=root, env=_env(root),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@dataclass
class Interrupted:
    """What an interrupted `msmon run` left: exit code, stderr, run directory, processes seen while running."""

    code: int
    stderr: str
    run_dir: Path
    seen: dict[int, psutil.Process]
    running_at_signal: bool


def _interrupt(root: Path, run_name: str, signals: list[int], *args: str, after_lines: int = 2) -> Interrupted:
    """Start a 400-step quickstart run, wait for ``after_lines`` logged records, send ``signals``."""
    config = write_quickstart_config(root, steps=400, run_name=run_name, log_interval=5)
    run_dir = root / "monitor_logs" / "quickstart" / run_name
    proc = _start(root, str(config), *args)
    seen: dict[int, psutil.Process] = {}
    try:
        deadline = time.monotonic() + 300
        while len(_lines(run_dir / "metrics.jsonl")) < after_lines and time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            seen.update({p.pid: p for p in _descendants(proc.pid)})
            time.sleep(0.2)
        seen.update({p.pid: p for p in _descendants(proc.pid)})
        running = proc.poll() is None
        for index, sig in enumerate(signals):
            if index:
                time.sleep(0.05)
            proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return Interrupted(proc.returncode, stderr, run_dir, seen, running)


@pytest.mark.training
def test_sigint_mid_run_flushes_marks_interrupted_and_leaves_no_process(tmp_path: Path) -> None:
    run = _interrupt(tmp_path, "sig", [signal.SIGINT], "--board", "--port", "0")
    assert run.running_at_signal, run.stderr[-2000:]
    assert run.code == 130, run.stderr[-2000:]
    info = json.loads((run.run_dir / "run.json").read_text())
    assert info["status"] == "interrupted" and info["exit_code"] == 130 and info["end_time"]
    rows = _lines(run.run_dir / "metrics.jsonl")
    assert 2 <= len(rows) and rows[-1]["step"] < 400
    assert info["last_step"] >= rows[-1]["step"]  # every logged step up to the stop is on disk
    assert "SIGINT received" in run.stderr
    assert "board: http://127.0.0.1:" in run.stderr  # the board was up, and is stopped with the run
    assert run.seen, "the training child was never seen"
    assert [p.pid for p in run.seen.values() if _alive(p)] == []
    assert _board_processes(tmp_path) == []


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _board_processes(root: Path) -> list[str]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            line = " ".join(proc.info["cmdline"] or [])
        except psutil.Error:
            continue
        if ("mindinsight" in line or "gunicorn" in line) and str(root) in line and _alive(proc):
            found.append(line)
    return found


@pytest.mark.training
def test_sigterm_mid_run_exits_143_interrupted_with_metrics_flushed(tmp_path: Path) -> None:
    run = _interrupt(tmp_path, "term", [signal.SIGTERM])
    assert run.code == 143, run.stderr[-2000:]
    info = json.loads((run.run_dir / "run.json").read_text())
    assert info["status"] == "interrupted" and info["exit_code"] == 143
    rows = _lines(run.run_dir / "metrics.jsonl")
    assert rows and rows[-1]["step"] < 400 and info["last_step"] >= rows[-1]["step"]
    assert run.seen and [p.pid for p in run.seen.values() if _alive(p)] == []


@pytest.mark.training
def test_a_second_sigint_forces_the_exit_after_flushing(tmp_path: Path) -> None:
    run = _interrupt(tmp_path, "twice", [signal.SIGINT, signal.SIGINT], after_lines=1)
    assert run.code == 130, run.stderr[-2000:]
    info = json.loads((run.run_dir / "run.json").read_text())
    assert info["status"] == "interrupted" and info["error"] == "forced by a second SIGINT"
    assert len(_lines(run.run_dir / "metrics.jsonl")) >= 1
    assert [p.pid for p in run.seen.values() if _alive(p)] == []


@pytest.mark.training
def test_a_crash_in_training_is_failed_with_one_line_and_the_traceback_in_the_log(tmp_path: Path) -> None:
    bad_heads = {"model.model_config.num_heads": 3}
    config = write_quickstart_config(tmp_path, steps=10, run_name="crash", overrides=bad_heads)
    result = run_msmon("run", str(config), cwd=tmp_path, env=_env(tmp_path), timeout=300)
    run_dir = tmp_path / "monitor_logs" / "quickstart" / "crash"
    assert result.code == 3, result.stderr[-2000:]
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "failed" and info["exit_code"] == 3
    assert info["error"] == "ValueError: LlamaForCausalLM: 64 is not divisible by 3"
    assert "Traceback (most recent call last)" in (run_dir / "logs" / "msmon.log").read_text()
    assert "Traceback" not in result.stderr
    assert "run failed: ValueError: LlamaForCausalLM: 64 is not divisible by 3" in result.stderr


@pytest.mark.training
def test_a_health_stop_ends_the_run_with_exit_4(tmp_path: Path) -> None:
    config = write_quickstart_config(
        tmp_path, steps=200, run_name="diverged", log_interval=5, health={"nonfinite": {"action": "stop"}},
        overrides={"lr_schedule.learning_rate": 1e30},
    )
    result = run_msmon("run", str(config), cwd=tmp_path, env=_env(tmp_path), timeout=300)
    run_dir = tmp_path / "monitor_logs" / "quickstart" / "diverged"
    assert result.code == 4, result.stderr[-2000:]
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "stopped_by_monitor" and info["exit_code"] == 4
    assert info["alert_count"] >= 1 and info["error"].startswith("nonfinite")
    assert info["last_step"] < 200


@pytest.mark.training
def test_use_callback_false_trains_without_the_callback_but_keeps_the_accounting(tmp_path: Path) -> None:
    config = write_quickstart_config(tmp_path, steps=10, run_name="nocb", use_callback=False)
    result = run_msmon("run", str(config), cwd=tmp_path, env=_env(tmp_path), timeout=300)
    run_dir = tmp_path / "monitor_logs" / "quickstart" / "nocb"
    assert result.code == 0, result.stderr[-2000:]
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "completed" and info["last_step"] is None
    assert (run_dir / "config.yaml").is_file() and (run_dir / "logs" / "output").is_dir()
    assert not (run_dir / "metrics.jsonl").exists() and not list(run_dir.glob("events.out.*"))


@pytest.mark.training
def test_two_simultaneous_runs_with_one_name_cannot_share_a_directory(tmp_path: Path) -> None:
    config = write_quickstart_config(tmp_path, steps=10, run_name="same")
    first, second = _start(tmp_path, str(config)), _start(tmp_path, str(config))
    outs = [p.communicate(timeout=300) for p in (first, second)]
    codes = sorted(p.returncode for p in (first, second))
    assert codes == [0, 1], [o[1][-1500:] for o in outs]
    loser = outs[[first.returncode, second.returncode].index(1)][1]
    assert "already" in loser
    run_dir = tmp_path / "monitor_logs" / "quickstart" / "same"
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "completed" and info["pid"] in (first.pid, second.pid)
    assert [row["step"] for row in _lines(run_dir / "metrics.jsonl")] == [10]


def test_an_existing_run_directory_is_refused_unless_resume(tmp_path: Path) -> None:
    config = write_quickstart_config(tmp_path, steps=10, run_name="taken")
    (tmp_path / "monitor_logs" / "quickstart" / "taken").mkdir(parents=True)
    (tmp_path / "monitor_logs" / "quickstart" / "taken" / "metrics.jsonl").write_text("{}\n")
    result = run_msmon("run", str(config), "--dry-run", cwd=tmp_path, env=_env(tmp_path))
    assert result.code == 1 and "MS103" in result.stderr
    no_run = run_msmon("run", str(config), "--dry-run", "--resume", cwd=tmp_path, env=_env(tmp_path))
    assert no_run.code == 1 and "nothing to resume at" in no_run.stderr and "no readable run.json" in no_run.stderr
    (tmp_path / "monitor_logs" / "quickstart" / "taken" / "run.json").write_text('{"status": "interrupted"}')
    no_checkpoint = run_msmon("run", str(config), "--dry-run", "--resume", cwd=tmp_path, env=_env(tmp_path))
    assert no_checkpoint.code == 1 and "no complete checkpoint to resume from" in no_checkpoint.stderr
    checkpoint_tree(tmp_path / "monitor_logs" / "quickstart" / "taken", [10])
    resumed = run_msmon("run", str(config), "--dry-run", "--resume", cwd=tmp_path, env=_env(tmp_path))
    assert resumed.code == 0, resumed.stderr
    assert "(resume)" in resumed.stdout and "resume from:   step 10" in resumed.stdout


def test_failed_validation_leaves_the_working_directory_byte_for_byte_unchanged(tmp_path: Path) -> None:
    config = write_quickstart_config(tmp_path, steps=10, log_interval=0, save_dir="./logs dir")
    before = tree_snapshot(tmp_path)
    result = run_msmon("run", str(config), "--board", cwd=tmp_path, env=_env(tmp_path))
    assert result.code == 1
    assert "MS401" in result.stderr and "nothing was started" in result.stderr
    assert tree_snapshot(tmp_path) == before


def test_dry_run_prints_the_plan_and_creates_nothing(tmp_path: Path) -> None:
    config = write_quickstart_config(tmp_path, steps=10, run_name="plan")
    before = tree_snapshot(tmp_path)
    result = run_msmon("run", str(config), "--dry-run", "--board", "--port", "8099", cwd=tmp_path, env=_env(tmp_path))
    assert result.code == 0, result.stderr
    out = result.stdout
    assert f"run directory: {tmp_path / 'monitor_logs' / 'quickstart' / 'plan'}" in out
    assert "backends:      mindinsight, file" in out
    assert "MFLossMonitor -> CheckpointMonitor -> msmon MonitorCallback (every 10 steps)" in out
    assert "restarts:      none" in out
    assert f"mindinsight start --port 8099 --summary-base-dir {tmp_path / 'monitor_logs' / 'quickstart'}" in out
    assert "-m msmon.runner.worker" in out
    assert tree_snapshot(tmp_path) == before


def test_dry_run_shows_the_msrun_command(tmp_path: Path) -> None:
    config = write_quickstart_config(tmp_path, steps=10, run_name="dist")
    args = ["run", str(config), "--dry-run", "--worker-num", "4", "--local-worker-num", "2", "--node-rank", "1",
            "--master-addr", "10.0.0.5", "--master-port", "9123", "use_parallel=True",
            "parallel_config.data_parallel=4", "parallel.full_batch=False"]
    result = run_msmon(*args, cwd=tmp_path, env=_env(tmp_path))
    assert result.code == 0, result.stderr
    for part in ("msrun --worker_num=4 --local_worker_num=2 --master_addr=10.0.0.5 --master_port=9123",
                 "--join=True", "--node_rank=1", "python -m msmon.runner.worker"):
        assert part in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--worker-num", "2"], "use_parallel is not True"),
        (["--worker-num", "4", "--local-worker-num", "2"], "needs --node-rank"),
        (["--node-rank", "1"], "--node-rank needs --worker-num"),
    ],
)
def test_distributed_flag_mistakes_are_refused_before_anything_starts(
    tmp_path: Path, args: list[str], message: str
) -> None:
    config = write_quickstart_config(tmp_path, steps=10, run_name="x")
    before = tree_snapshot(tmp_path)
    result = run_msmon("run", str(config), *args, cwd=tmp_path, env=_env(tmp_path))
    assert result.code in (1, 2) and message in result.stderr
    assert tree_snapshot(tmp_path) == before


@pytest.mark.training
@pytest.mark.parametrize("path", ["legacy", "mcore"])
def test_a_failed_graph_compile_names_the_error_and_leaves_the_working_directory_alone(
    tmp_path: Path, path: str
) -> None:
    """A graph that cannot compile (the model's sequence is half the data's): the summary line is the real
    error, and MindSpore's analyze_fail.ir lands in the run directory, not in the working directory."""
    (tmp_path / "conf").mkdir()
    work = tmp_path / "work"
    work.mkdir()
    config = write_quickstart_config(tmp_path / "conf", steps=10, run_name="nocompile", source=QUICKSTARTS[path],
                                     save_dir=str(tmp_path / "save"),
                                     overrides={"model.model_config.seq_length": 32})
    result = run_msmon("run", str(config), "--plain", cwd=work, env=_env(tmp_path), timeout=300)
    assert result.code == 3, result.stderr[-2000:]
    run_dir = next((tmp_path / "save").glob("*/nocompile"))
    error = json.loads((run_dir / "run.json").read_text())["error"]
    assert error.startswith("ValueError: For 'Mul', input1.shape and input2.shape need to broadcast")
    assert f"run failed: {error}" in result.stderr
    assert list(run_dir.glob("logs/rank_0/om/analyze_fail.ir"))
    assert tree_snapshot(work) == {}


def test_a_kernel_failure_reads_as_the_unsupported_op() -> None:
    """MindSpore's kernel-selection error (as a CPU run raises it): the section title and rules are skipped."""
    from msmon.errors import describe

    message = ("\n----------------------------------------------------\n- Kernel select failed:\n"
               "----------------------------------------------------\nUnsupported op [FlashAttentionScore] on CPU, "
               "Please confirm whether the device target setting is correct, or refer to 'mindspore.ops' at "
               "https://www.mindspore.cn to query the operator support list.\n\n---------------------------------"
               "-------------------\n- The Function Call Stack: (For framework developers)\n")
    assert describe(RuntimeError(message)).startswith("RuntimeError: Unsupported op [FlashAttentionScore] on CPU, ")
