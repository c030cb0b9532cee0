"""Every rank counts, for real: `msmon run --worker-num 2` on CPU (msrun, real AllReduce between two ranks).

A rank frozen mid-run (SIGSTOP) and a rank stuck in Python code (a callback that sleeps on rank 1) each give ONE
stall alert naming rank 1 within the timeout + 5 s (the Python case with rank 1's stack file and frame); SIGINT
then ends the run with 130 and no process left. A clean run raises nothing (with a 5 s stall timeout: no false
stall while the graph compiles), and msmon's loss equals mindformers' printed loss on each rank. A NaN loss on
rank 1 only is named. Two machines simulated on one host share one run directory and both complete. With
micro_batch_interleave_num 2 (one process) msmon's loss is the loss mindformers prints, not the train step's sum.

The mcore (Qwen3) path cannot run on two CPU ranks: data parallel resets parallel_config and the model refuses
the world size; semi-auto parallel fails in MindSpore with "Invalid backend: CPU" (test at the end).
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import time
from pathlib import Path

import pytest
from conftest import run_msmon
from helpers_ranks import RankRun, processes_of, registered
from helpers_training import QUICKSTART_QWEN3, mindformers_step_lines, write_quickstart_config

from msmon.util.net import free_port

pytestmark = pytest.mark.training

TIMEOUT_S = 5.0
STALL = {"stall": {"timeout_s": TIMEOUT_S, "poll_s": 0.2}}


def stall_alerts(run: RankRun) -> list[dict]:
    return [a for a in run.alerts() if a["detector"] == "stall"]


def stop_cleanly(run: RankRun) -> dict:
    """SIGINT to `msmon run`: exit 130, run.json interrupted, nothing left running."""
    sent = time.monotonic()
    run.proc.send_signal(signal.SIGINT)
    assert run.finish(150) == 130, run.stderr[-3000:]
    print(f"measured: SIGINT to exit {time.monotonic() - sent:.1f} s")  # docs/run.md (pytest -s)
    info = json.loads((run.run_dir / "run.json").read_text())
    assert info["status"] == "interrupted" and info["exit_code"] == 130
    assert processes_of(run.run_dir) == []
    return info


def test_a_frozen_rank_is_named_in_one_stall_alert(tmp_path: Path) -> None:
    run = RankRun.start(tmp_path, steps=400, health=STALL)
    try:
        run.wait_for(lambda: run.records() >= 2)
        pid = run.heartbeat(1)["pid"]
        os.kill(pid, signal.SIGSTOP)
        stopped = time.time()
        raised = run.wait_for(lambda: bool(stall_alerts(run)), timeout_s=60)
        time.sleep(4.0)  # no second alert for the same hang
        alerts = stall_alerts(run)
        assert len(alerts) == 1, alerts
        alert = alerts[0]
        assert "rank 1 is stopped" in alert["message"] and alert["values"]["stuck_ranks"] == [1]
        assert alert["time"] - alert["values"]["last_step_time"] <= TIMEOUT_S + 5.0
        assert raised - stopped <= TIMEOUT_S + 5.0
        print(f"measured: alert {alert['time'] - alert['values']['last_step_time']:.1f} s after the last step end, "
              f"{raised - stopped:.1f} s after SIGSTOP")
        assert alert["step"] == alert["values"]["last_step"] > 0
        assert "HEALTH ALERT [critical]" in run.stderr and "rank 1 is stopped" in run.stderr
        assert "mindspore" in (run.run_dir / "stacks" / "rank_0.txt").read_text()  # where rank 0 waits
        info = stop_cleanly(run)
        assert info["alert_count"] == 1
        assert re.search(r"^\s+msmon status \S+", run.stderr, re.M), run.stderr[-2000:]  # the ending's next command
    finally:
        if run.proc.poll() is None:
            run.proc.kill()


def test_a_rank_stuck_in_python_is_named_with_its_frame(tmp_path: Path) -> None:
    sleeper = registered("SleepOnRank", rank=1, step=20, seconds=40.0)
    run = RankRun.start(tmp_path, steps=400, callbacks=[sleeper], health=STALL)
    try:
        raised = run.wait_for(lambda: bool(stall_alerts(run)), timeout_s=400)
        time.sleep(3.0)
        alerts = stall_alerts(run)
        assert len(alerts) == 1, alerts
        alert = alerts[0]
        assert alert["step"] == 20 and alert["values"]["stuck_ranks"] == [1]
        assert "rank 1 is still in step 20 (others ended it" in alert["message"]
        assert raised - alert["values"]["last_step_time"] <= TIMEOUT_S + 5.0
        print(f"measured: alert {alert['time'] - alert['values']['last_step_time']:.1f} s after the last step end; "
              f"{alert['message']}")
        frame = alert["values"]["frame"]
        assert "rank_callbacks.py" in frame and frame.endswith("in on_train_step_end")
        assert alert["values"]["stack_file"] == "stacks/rank_1.txt"
        stack = (run.run_dir / "stacks" / "rank_1.txt").read_text()
        assert "on_train_step_end" in stack and "rank_callbacks.py" in stack
        stop_cleanly(run)
    finally:
        if run.proc.poll() is None:
            run.proc.kill()


def test_a_clean_two_rank_run_raises_nothing_and_records_mindformers_loss(tmp_path: Path) -> None:
    run = RankRun.start(tmp_path, steps=40, health=STALL)
    assert run.finish() == 0, run.stderr[-3000:]
    info = json.loads((run.run_dir / "run.json").read_text())
    assert info["status"] == "completed" and info["alert_count"] == 0
    assert not (run.run_dir / "alerts.jsonl").exists() and "HEALTH ALERT" not in run.stderr
    assert "msmon status" not in run.stderr  # a completed run needs no look at its ranks
    rows = [json.loads(line) for line in (run.run_dir / "metrics.jsonl").read_text().splitlines()]
    printed = mindformers_step_lines(run.run_dir, rank=0)
    last = info["last_step"]
    assert [r["step"] for r in rows] == list(range(5, last + 1, 5)) and last >= 20
    for row in rows:
        assert row["loss"] == pytest.approx(printed[row["step"]]["loss"], abs=1e-5)
    for rank in (0, 1):
        beat = run.heartbeat(rank)
        assert beat["state"] == "completed" and beat["ended"] == last and beat["nonfinite"] is None
        logged = beat["logged"]  # each rank's own loss: its own batch
        assert logged["loss"] == pytest.approx(mindformers_step_lines(run.run_dir, rank=rank)[last]["loss"], abs=1e-5)
    assert run.heartbeat(0)["logged"]["loss"] != run.heartbeat(1)["logged"]["loss"]
    assert not (run.run_dir / "stacks").exists()  # nobody asked for a stack
    assert processes_of(run.run_dir) == []


def test_a_nan_loss_on_rank_1_only_is_named(tmp_path: Path) -> None:
    run = RankRun.start(tmp_path, steps=40, callbacks=[registered("NanLossOnRank", rank=1, step=12)])
    assert run.finish() == 0, run.stderr[-3000:]
    alerts = run.alerts()
    assert [a["detector"] for a in alerts] == ["nonfinite"], alerts
    assert alerts[0]["message"].startswith("rank 1: loss is NaN") and alerts[0]["values"]["rank"] == 1
    assert alerts[0]["step"] == 15  # rank 1's first logging step with the NaN
    rows = [json.loads(line) for line in (run.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all(math.isfinite(r["loss"]) for r in rows)  # rank 0 stayed finite
    assert "HEALTH ALERT [critical] step 15 nonfinite: rank 1: loss is NaN" in run.stderr
    assert json.loads((run.run_dir / "run.json").read_text())["alert_count"] == 1


def test_two_machines_on_one_host_share_one_run_directory(tmp_path: Path) -> None:
    port = str(free_port("127.0.0.1"))
    common = ["--worker-num", "2", "--local-worker-num", "1", "--master-addr", "127.0.0.1", "--master-port", port]
    node0 = RankRun.start(tmp_path, steps=40, run_name="nodes", flags=[*common, "--node-rank", "0"])
    node0.wait_for(lambda: (node0.run_dir / "run.json").exists(), timeout_s=120)
    node1 = RankRun.start(tmp_path, steps=40, run_name="nodes", flags=[*common, "--node-rank", "1"])
    assert node0.finish() == 0, node0.stderr[-3000:]
    assert node1.finish() == 0, node1.stderr[-3000:]
    for name in ("run.json", "run.node1.json"):
        info = json.loads((node0.run_dir / name).read_text())
        assert info["status"] == "completed" and info["exit_code"] == 0 and info["alert_count"] == 0, info
    assert list(tmp_path.glob("monitor_logs/*/*")) == [node0.run_dir]
    rows = [json.loads(line) for line in (node0.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(5, rows[-1]["step"] + 1, 5))  # one curve, from rank 0
    assert {r["rank"] for r in rows} == {0}
    assert {node0.heartbeat(r)["state"] for r in (0, 1)} == {"completed"}
    assert (node0.run_dir / "logs" / "ranks" / "node_1" / "worker_1.log").exists()
    assert processes_of(node0.run_dir) == []


def test_the_mcore_model_cannot_run_on_two_cpu_ranks(tmp_path: Path) -> None:
    """Measured: in data parallel mode mindformers resets parallel_config and the mcore model refuses the world
    size; the semi-auto parallel mode it needs fails in MindSpore's compiler on a CPU backend."""
    run = RankRun.start(tmp_path, steps=20, source=QUICKSTART_QWEN3)
    assert run.finish() == 3
    error = json.loads((run.run_dir / "run.json").read_text())["error"]
    assert "which is not equal to world_size (2)" in error
    semi = RankRun.start(tmp_path, steps=20, source=QUICKSTART_QWEN3, run_name="semi",
                         extra=["parallel.parallel_mode=1", "parallel.full_batch=True"])
    assert semi.finish() == 3
    assert "Invalid backend: CPU" in json.loads((semi.run_dir / "run.json").read_text())["error"]


def test_the_loss_is_mindformers_printed_loss_with_micro_batch_interleaving(tmp_path: Path) -> None:
    """micro_batch_interleave_num 2 (runs on one CPU process, legacy model; the mcore models refuse it): the train
    step returns the sum of both micro batches, MFLossMonitor prints half of it, msmon records what it prints
    (it recorded twice the loss before)."""
    config = write_quickstart_config(tmp_path, steps=20, log_interval=5, monitor_type=["file"],
                                     overrides={"micro_batch_interleave_num": 2})
    result = run_msmon("run", str(config), "--plain", cwd=tmp_path, timeout=300,
                       env={"MSMON_HOME": str(tmp_path / "home"), "MSMON_CACHE_DIR": str(tmp_path / "cache")})
    assert result.code == 0, result.stderr[-3000:]
    run_dir = tmp_path / "monitor_logs" / "quickstart" / "test_run"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    printed = mindformers_step_lines(run_dir)
    assert [r["step"] for r in rows] == [5, 10, 15, 20]
    for row in rows:
        assert row["loss"] == pytest.approx(printed[row["step"]]["loss"], abs=1e-5)
        assert row["loss"] < 8.0  # ln(1000) = 6.9 at the start: not the sum of two micro batches


def test_one_process_the_parent_owns_the_stall_alert(tmp_path: Path) -> None:
    """Without --worker-num the parent watches the one rank the same way: one alert (rank 0's in-process watchdog
    does not run beside it), the frame of the callback that hangs, and the run goes on once it returns."""
    sleeper = registered("SleepOnRank", rank=0, step=10, seconds=12.0)
    run = RankRun.start(tmp_path, steps=30, callbacks=[sleeper], health=STALL, flags=[])
    assert run.finish() == 0, run.stderr[-3000:]
    alerts = run.alerts()
    assert [a["detector"] for a in alerts] == ["stall"], alerts
    assert alerts[0]["step"] == 9 and "rank 0 is in step 10" in alerts[0]["message"]
    assert "rank_callbacks.py" in alerts[0]["values"]["frame"]
    info = json.loads((run.run_dir / "run.json").read_text())
    assert info["status"] == "completed" and info["alert_count"] == 1 and info["last_step"] == 30
