"""`msmon run` lifecycle: SIGINT mid-run (the canonical interrupted run), a graph that cannot compile (the canonical
failed runs of both model paths), two runs racing for one name, refusals that create nothing, the dry run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_msmon, tree_snapshot
from helpers_checkpoints import iteration_tree
from helpers_training import write_quickstart_config
from launch import Launched, records


def _env(root: Path) -> dict[str, str]:
    return {"MSMON_HOME": str(root / "home")}


def test_sigint_mid_run_flushes_marks_interrupted_and_leaves_no_process(canonical) -> None:
    run = canonical("interrupted_legacy")
    assert run.code == 130, run.output[-2000:]
    info = run.info
    assert info["status"] == "interrupted" and info["exit_code"] == 130 and info["end_time"]
    rows = run.records()
    assert 2 <= len(rows) and rows[-1]["step"] < run.steps
    assert info["last_step"] >= rows[-1]["step"]  # every logged step up to the stop is on disk
    assert "SIGINT received" in run.output
    assert "board: http://127.0.0.1:" in run.output  # the board was up, and is stopped with the run
    assert run.extra["seen"], "the training child was never seen"
    assert run.extra["left_behind"] == []  # the training, msrun-free, and the board beside it: all gone


@pytest.mark.parametrize("model", ["legacy", "mcore"])
def test_a_failed_graph_compile_names_the_error_once_and_is_never_restarted(canonical, model: str) -> None:
    """A graph that cannot compile (the model's sequence is half the data's): the summary line is the real
    error, the traceback only in the log, MindSpore's analyze_fail.ir in the run directory and not in the working
    directory; a failure before the first step is never restarted, --max-restarts or not."""
    run = canonical(f"failed_compile_{model}")
    assert run.code == 3, run.output[-2000:]
    info = run.info
    error = info["error"]
    assert info["status"] == "failed" and info["exit_code"] == 3
    assert error.startswith("ValueError: For 'Mul', input1.shape and input2.shape need to broadcast")
    assert f"run failed: {error}" in run.stderr
    assert "Traceback (most recent call last)" in (run.run_dir / "logs" / "msmon.log").read_text()
    assert "Traceback (most recent call last)" not in run.stderr  # (MindSpore's own message names its graph's)
    assert list(run.run_dir.glob("logs/rank_0/om/analyze_fail.ir"))
    assert tree_snapshot(run.cwd) == {}
    assert "restart" not in run.stderr.lower()
    assert [a["status"] for a in info["attempts"]] == ["failed"] and not info["attempts"][0]["last_step"]
    assert not (run.run_dir / "alerts.jsonl").exists()  # no step trained, no restart alert


@pytest.mark.training
def test_two_simultaneous_runs_with_one_name_cannot_share_a_directory(tmp_path: Path) -> None:
    """Both start; one wins the run directory and trains (here without msmon's callback: use_callback false keeps
    the accounting, writes no metrics), the other is refused before training."""
    config = write_quickstart_config(tmp_path, steps=10, run_name="same", use_callback=False)
    first = Launched.start(tmp_path / "a", "run", str(config), "--plain", cwd=tmp_path, name="first")
    second = Launched.start(tmp_path / "b", "run", str(config), "--plain", cwd=tmp_path, name="second")
    codes = sorted([first.finish(), second.finish()])
    assert codes == [0, 1], (first.output[-1500:], second.output[-1500:])
    loser = first if first.proc.returncode == 1 else second
    assert "already" in loser.output
    run_dir = tmp_path / "monitor_logs" / "quickstart" / "same"
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "completed" and info["pid"] in (first.proc.pid, second.proc.pid)
    assert info["last_step"] is None  # no callback: no step known
    assert (run_dir / "config.yaml").is_file() and (run_dir / "logs" / "output").is_dir()
    assert records(run_dir) == [] and not list(run_dir.glob("events.out.*"))


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
    iteration_tree(tmp_path / "monitor_logs" / "quickstart" / "taken", [10])  # the quickstart saves 1.9's layout
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
            "parallel_config.data_parallel=4", "parallel.full_batch=False",
            "--msrun-arg=--bind_core=True", "--msrun-arg", "--cluster_time_out=7200"]
    result = run_msmon(*args, cwd=tmp_path, env=_env(tmp_path))
    assert result.code == 0, result.stderr
    for part in ("msrun --worker_num=4 --local_worker_num=2 --master_addr=10.0.0.5 --master_port=9123",
                 "--join=True", "--node_rank=1",
                 "--node_rank=1 --bind_core=True --cluster_time_out=7200 python -m msmon.runner.worker"):
        assert part in result.stdout
    refused = run_msmon(*args[:3], "--msrun-arg=--worker_num=8", cwd=tmp_path, env=_env(tmp_path))
    assert refused.code == 2 and refused.stderr.strip().splitlines()[-1].startswith(
        "error: --msrun-arg --worker_num=8: msrun's --worker_num is set by --worker-num"), refused.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--worker-num", "2"], "use_parallel is not True"),
        (["--worker-num", "4", "--local-worker-num", "2"], "needs --node-rank"),
        (["--node-rank", "1"], "--node-rank needs --worker-num"),
        (["use_parallel=True"], "use_parallel is True but msmon run starts one process"),
        (["--worker-num", "8", "use_parallel=True", "parallel.parallel_mode=1", "parallel_config.data_parallel=1",
          "parallel_config.model_parallel=4", "parallel_config.pipeline_stage=4"],
         "parallel_config needs 16 devices (data_parallel 1 x model_parallel 4 x context_parallel 1 x "
         "pipeline_stage 4), but --worker-num 8 starts 8 ranks"),
        (["--worker-num", "4", "--local-worker-num", "2", "--node-rank", "1", "use_parallel=True",
          "parallel_config.data_parallel=4", "monitor_config.run_name=auto"],
         "a multi-machine run needs a fixed monitor_config.run_name"),
        (["--worker-num", "8", "use_parallel=True", "parallel.parallel_mode=1", "parallel_config.data_parallel=2",
          "parallel_config.model_parallel=4", "parallel_config.expert_parallel=3"],
         "parallel_config.expert_parallel 3 must divide the devices of one pipeline stage"),
        (["--master-port", "99999"], "65535"),
        (["--board", "--port", "70000"], "65535"),
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


def test_the_mcore_model_on_two_cpu_ranks_is_refused_before_anything_starts(tmp_path: Path) -> None:
    """Measured (mindformers 1.9.0, docs/run.md): in data parallel mode mindformers resets parallel_config and the
    mcore model refuses the world size; the semi-auto parallel mode it would need fails in MindSpore's compiler on a
    CPU backend. msmon says so before a rank starts."""
    from helpers_ranks import DATA_PARALLEL
    from helpers_training import QUICKSTART_QWEN3

    config = write_quickstart_config(tmp_path, steps=20, source=QUICKSTART_QWEN3)
    before = tree_snapshot(tmp_path)
    result = run_msmon("run", str(config), "--worker-num", "2", *DATA_PARALLEL, cwd=tmp_path)
    assert result.code == 1 and "cannot train on several CPU ranks" in result.stderr
    assert "Traceback" not in result.stderr
    assert tree_snapshot(tmp_path) == before


def test_a_kernel_failure_reads_as_the_unsupported_op() -> None:
    """MindSpore's kernel-selection error (as a CPU run raises it): the section title and rules are skipped."""
    from msmon.errors import describe

    message = ("\n----------------------------------------------------\n- Kernel select failed:\n"
               "----------------------------------------------------\nUnsupported op [FlashAttentionScore] on CPU, "
               "Please confirm whether the device target setting is correct, or refer to 'mindspore.ops' at "
               "https://www.mindspore.cn to query the operator support list.\n\n---------------------------------"
               "-------------------\n- The Function Call Stack: (For framework developers)\n")
    assert describe(RuntimeError(message)).startswith("RuntimeError: Unsupported op [FlashAttentionScore] on CPU, ")
