"""Every rank counts, for real: `msmon run --worker-num 2` on CPU (msrun, real AllReduce between two ranks).

Two ranks record their own loss (msmon's equals mindformers' printed loss on each rank; one metrics file, from rank
0); a rank frozen mid-run (SIGSTOP) gives ONE stall alert naming rank 1 within the timeout + 5 s (a 5 s timeout: no
false stall while either attempt compiles); with ``action: stop`` and ``--max-restarts 1`` both ranks then restart
together from their checkpoint and complete, one curve. Two machines simulated on one host share one run directory
and both complete. (A rank whose loss turns NaN and a rank stuck in Python code, then SIGINT: the msrun COMMAND test
of test_own_launch.py, on the same watcher.)

The mcore (Qwen3) path cannot run on two CPU ranks (data parallel resets parallel_config and the model refuses the
world size): msmon refuses it before a rank starts (test_run_lifecycle.py).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from canonical import STALL, callbacks, registered
from helpers_ranks import RankRun, processes_of
from helpers_training import mindformers_step_lines
from launch import records
from test_resume import EVERY, STEPS, one_curve, same_losses

from msmon import layout
from msmon.ops.ranks import read_heartbeats
from msmon.util.net import free_port

pytestmark = pytest.mark.training

TIMEOUT_S = STALL["timeout_s"]


def stall_alerts(run: RankRun) -> list[dict]:
    return [a for a in run.alerts() if a["detector"] == "stall"]


def test_two_ranks_record_their_own_loss_a_frozen_one_is_named_and_both_restart_from_their_checkpoint(
    tmp_path: Path,
) -> None:
    """Two data-parallel ranks (msrun, a 5 s stall timeout: no false stall while either attempt compiles). Rank 1
    frozen (SIGSTOP) at the end of step 41, after the step-30 checkpoint, while rank 0 has begun step 42 and waits in
    its collective: one stall alert names rank 1; the monitor stops the run (SIGCONT and SIGTERM to the frozen rank,
    which stops at that step's end); rank 0, whose training thread waits inside the framework and runs no signal
    handler, is told to flush and exit (else it waited ~30 s for the collective's timeout on CPU, 1,800 s for HCCL's
    on Ascend, and was killed at 60 s); `--max-restarts 1` restarts both ranks from their checkpoint; the run
    completes with one metrics file from rank 0, msmon's loss the loss mindformers printed on each rank. msrun's
    scheduler only serves the cluster: nothing of mindformers in its log."""
    checkpoints = [dict(c, save_checkpoint_steps=EVERY) if c["type"] == "CheckpointMonitor" else c
                   for c in callbacks("legacy")]
    entered, release = tmp_path / "entered", tmp_path / "release"
    freeze = registered("SleepOnRank", rank=1, step=41, seconds=300.0, release=str(release), entered=str(entered))
    run = RankRun.start(tmp_path, steps=STEPS, log_interval=10, callbacks=[*checkpoints[1:], freeze],
                        health={"stall": {**STALL, "action": "stop"}},
                        extra=["--max-restarts", "1", "--restart-backoff", "1", "--msrun-arg=--cluster_time_out=600"])
    try:
        run.wait_for(entered.exists, timeout_s=600)
        os.kill(int(entered.read_text()), signal.SIGSTOP)
        stopped = time.time()
        release.write_text("")  # once continued, rank 1 ends its step
        raised = run.wait_for(lambda: bool(stall_alerts(run)), timeout_s=120)
        assert run.finish(900) == 0, run.stderr[-3000:]
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    # one alert for the hang (kept in alerts.attempt-1.jsonl when it came after the step the restart resumed from)
    alerts = records(run.run_dir, "alerts.attempt-1.jsonl") + records(run.run_dir, "alerts.jsonl")
    assert [a["detector"] for a in alerts] == ["stall", "restart"], alerts
    alert = alerts[0]
    assert "rank 1 is stopped" in alert["message"] and alert["values"]["stuck_ranks"] == [1]
    assert alert["time"] - alert["values"]["last_step_time"] <= TIMEOUT_S + 5.0
    assert raised - stopped <= TIMEOUT_S + 10.0
    print(f"measured: alert {alert['time'] - alert['values']['last_step_time']:.1f} s after the last step end, "
          f"{raised - stopped:.1f} s after SIGSTOP")
    assert alert["step"] == alert["values"]["last_step"] > 0 and alert["action"] == "stop"
    assert "HEALTH ALERT [critical]" in run.stderr and "rank 1 is stopped" in run.stderr
    assert "mindspore" in (run.run_dir / "stacks" / "rank_0.txt").read_text()  # where rank 0 waits
    scheduler = (run.run_dir / "logs" / "ranks" / "scheduler.log").read_text(errors="replace")
    assert "Cluster is successfully initialized" in scheduler and "mindformers" not in scheduler  # it serves only
    log = (run.run_dir / "logs" / "msmon.log").read_text()  # the parent's and rank 0's
    assert "rank 0 began a step a rank that ended will never take part in: it is told to flush and exit now" in log
    assert "forced by msmon run: a rank that ended never takes part in the step this rank began" in log
    restart = alerts[1]
    print(f"measured: the restart alert {restart['time'] - alert['time']:.1f} s after the stall alert")
    assert restart["time"] - alert["time"] < 25.0  # not the collective's 30 s timeout
    info = json.loads((run.run_dir / "run.json").read_text())
    assert [(a["status"], a["reason"]) for a in info["attempts"]] == [("stopped_by_monitor", "start"),
                                                                      ("completed", "restart")]
    assert info["status"] == "completed" and info["device_count"] == 2 and info["last_step"] == STEPS
    # the watcher's stall alert and the restart alert, both counted in the attempt they ended
    assert [a["alert_count"] for a in info["attempts"]] == [2, 0] and info["alert_count"] == 2
    assert info["attempts"][1]["checkpoint"].endswith(".ckpt") and "msmon status" not in run.stderr
    resumed_from = info["attempts"][1]["resumed_from_step"]
    assert resumed_from >= EVERY  # the step-30 checkpoint, or one saved when the monitor stopped the ranks
    rows, superseded = one_curve(run.run_dir, steps=STEPS, interval=10), records(run.run_dir, "metrics.attempt-1.jsonl")
    if resumed_from < info["attempts"][0]["last_step"] // 10 * 10:  # logged steps after the checkpoint: trained again
        same_losses(superseded, rows)
    assert {r["rank"] for r in rows} == {0}
    assert list(run.run_dir.rglob("metrics.jsonl")) == [run.run_dir / "metrics.jsonl"]
    printed = mindformers_step_lines(run.run_dir, rank=0)
    for row in rows:
        assert row["loss"] == pytest.approx(printed[row["step"]]["loss"], abs=1e-5)
        assert row["throughput"] == pytest.approx(2 * row["throughput_per_device"])  # it knows it is one of two
    heartbeats = [run.heartbeat(rank) for rank in (0, 1)]
    for rank, beat in enumerate(heartbeats):
        assert beat["state"] == "completed" and beat["ended"] == STEPS and beat["nonfinite"] is None
        own = mindformers_step_lines(run.run_dir, rank=rank)[STEPS]["loss"]  # each rank's own batch
        assert beat["logged"]["loss"] == pytest.approx(own, abs=1e-5)
        text = (run.run_dir / "logs" / "ranks" / f"worker_{rank}.log").read_text(errors="replace")
        if rank == 0:  # the writing rank's framework output is captured in the run's console.log, a line says so
            assert "msmon: the framework's output is in" in text
            text += (run.run_dir / "logs" / "console.log").read_text(errors="replace")
        assert "global_batch_size = batch_size_per_card * device_num" in text and "= 4 = 2 * 2 * 1" in text
        assert json.loads((run.run_dir / "logs" / f"rank_{rank}.result.json").read_text())["status"] == "completed"
    assert heartbeats[0]["logged"]["loss"] != heartbeats[1]["logged"]["loss"]
    launches = [line for line in (run.run_dir / "logs" / "msmon.log").read_text().splitlines() if "launching" in line]
    assert len(launches) == 2 and all("--cluster_time_out=600 python -m msmon.runner.worker" in x for x in launches)
    assert processes_of(run.run_dir) == []


def test_two_machines_on_one_host_share_one_run_directory(tmp_path: Path) -> None:
    port = str(free_port("127.0.0.1"))
    common = ["--worker-num", "2", "--local-worker-num", "1", "--master-addr", "127.0.0.1", "--master-port", port]
    node0 = RankRun.start(tmp_path, steps=20, run_name="nodes", flags=[*common, "--node-rank", "0"])
    node0.wait_for(lambda: (node0.run_dir / "run.json").exists(), timeout_s=300)
    node1 = RankRun.start(tmp_path, steps=20, run_name="nodes", flags=[*common, "--node-rank", "1"])
    assert node0.finish() == 0, node0.stderr[-3000:]
    assert node1.finish() == 0, node1.stderr[-3000:]
    for name in ("run.json", "run.node1.json"):
        info = json.loads((node0.run_dir / name).read_text())
        assert info["status"] == "completed" and info["exit_code"] == 0 and info["alert_count"] == 0, info
    assert list(tmp_path.glob("monitor_logs/*/*")) == [node0.run_dir]
    rows = [json.loads(line) for line in (node0.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(5, rows[-1]["step"] + 1, 5))  # one curve, from rank 0
    assert {r["rank"] for r in rows} == {0}
    # each machine rewrote its rank's liveness on its own disk and gathered it into one file of the shared directory
    beats_dir = node0.run_dir / "heartbeats"
    assert sorted(p.name for p in beats_dir.glob("*.json")) == ["node_0.json", "node_1.json"]
    for node in (0, 1):
        gathered = json.loads((beats_dir / f"node_{node}.json").read_text())
        assert gathered["node"] == node and list(gathered["ranks"]) == [str(node)]
        assert not layout.local_heartbeats(node0.run_dir, node).exists()  # removed at the machine's end
    assert {beat["state"] for beat in read_heartbeats(node0.run_dir).values()} == {"completed"}
    assert sorted(read_heartbeats(node0.run_dir)) == [0, 1]
    assert (node0.run_dir / "logs" / "ranks" / "node_1" / "worker_1.log").exists()
    assert not (node0.run_dir / "stacks").exists()  # nobody asked for a stack
    assert processes_of(node0.run_dir) == []
