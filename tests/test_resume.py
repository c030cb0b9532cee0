"""Resuming and restarting with the real Trainer, through `msmon run` / `msmon resume` child processes and real
signals: the canonical interrupted run continued with `--resume` and no extra keys (legacy); an mcore training
(per-token loss, separate losses) killed with SIGKILL, whose restart a Ctrl-C during the back-off cancels, then
finished by `msmon resume`; one training that hangs (stopped by the stall detector), is restarted, is killed with
SIGKILL, is restarted again and completes (legacy: restarts do not depend on the model). Two data-parallel ranks
restarting together: test_run_ranks.py; a configuration error never restarted: the canonical failed_compile runs
(test_run_lifecycle.py).

Runs log every 10 steps and save a checkpoint every 30 (the last 3 kept). mindformers on CPU is deterministic
here: a step trained again from a checkpoint gives the loss it gave the first time, which is the proof that
training continued from the checkpoint (and not from the start, near ln(1000) = 6.9).
"""

from __future__ import annotations

import json
import math
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import run_msmon
from helpers_chat import RobotServer
from helpers_ranks import processes_of
from helpers_training import (
    PROJECTS,
    QUICKSTARTS,
    checkpoint_section,
    mindformers_step_lines,
    parse_step_lines,
    write_quickstart_config,
)
from launch import Launched, records
from omegaconf import OmegaConf

from msmon.runner.checkpoints import latest_checkpoint
from msmon.view.report import write_report
from msmon.view.series import load_run

pytestmark = pytest.mark.training

STEPS = 100
EVERY = 30
LN_VOCAB = math.log(1000)


def _config(tmp_path: Path, path: str, run_name: str = "resumed", overrides: dict[str, Any] | None = None,
            **monitor: Any) -> tuple[Path, Path]:
    """(config, run directory): the quickstart of ``path``, STEPS steps, a checkpoint every EVERY steps."""
    shipped = OmegaConf.to_container(OmegaConf.load(QUICKSTARTS[path]).callbacks)
    assert isinstance(shipped, list)
    callbacks = [dict(c, save_checkpoint_steps=EVERY) if c["type"] == "CheckpointMonitor" else c for c in shipped]
    callbacks += (overrides or {}).pop("callbacks", [])
    config = write_quickstart_config(tmp_path, steps=STEPS, source=QUICKSTARTS[path], run_name=run_name,
                                     overrides={"callbacks": callbacks, **checkpoint_section(EVERY, 3),
                                                **(overrides or {})}, **monitor)
    return config, tmp_path / "monitor_logs" / PROJECTS[path] / run_name


def wait_for_checkpoint(waiter: Callable[..., Any], run_dir: Path, step: int, checkpoint: int) -> None:
    """Until a complete checkpoint at ``checkpoint`` or later exists and metrics.jsonl has a record at ``step`` or
    later and one after the checkpoint's step: the next attempt, resumed from that checkpoint, trains that step again
    (the proof it continued from there), and a SIGKILL loses no record before it."""

    def reached() -> bool:
        rows = records(run_dir)
        point = latest_checkpoint(run_dir)
        return bool(point is not None and point.step >= checkpoint and rows
                    and rows[-1]["step"] >= step and rows[-1]["step"] > point.step)

    waiter(reached)


def kill_training(started: Launched, signum: int = signal.SIGKILL) -> int:
    """SIGKILL one training process (the worker, or rank 1 of msrun's), as the OOM killer does."""
    workers = [p for p in psutil.Process(started.proc.pid).children(recursive=True)
               if "msmon.runner.worker" in " ".join(p.cmdline()) and p.environ().get("MS_ROLE") != "MS_SCHED"]
    victim = max(workers, key=lambda p: p.environ().get("RANK_ID", "0"))
    victim.send_signal(signum)
    return victim.pid


def one_curve(run_dir: Path, steps: int = STEPS, interval: int = 10) -> list[dict[str, Any]]:
    """metrics.jsonl holds every logged step once, as the report and the views read it."""
    rows = records(run_dir)
    assert [r["step"] for r in rows] == list(range(interval, steps + 1, interval))
    drawn = load_run(run_dir).sketch("loss").draw()  # the report's loss curve: every step once, in order
    assert drawn.x == list(range(interval, steps + 1, interval)) and not drawn.nonfinite
    report, _ = write_report(run_dir)
    assert report.is_file()
    return rows


def same_losses(superseded: list[dict[str, Any]], kept: list[dict[str, Any]]) -> None:
    """The steps trained twice gave the same loss both times: training continued from the checkpoint."""
    again = {r["step"]: r["loss"] for r in kept}
    assert superseded, "the stopped attempt logged nothing after its checkpoint"
    for row in superseded:
        assert again[row["step"]] == pytest.approx(row["loss"], rel=1e-4, abs=1e-5), row["step"]


@pytest.mark.compat_smoke
def test_an_interrupted_quickstart_continues_with_resume_and_no_extra_keys(tmp_path: Path, canonical) -> None:
    interrupted = canonical("interrupted_legacy")
    assert interrupted.code == 130 and "restart" not in interrupted.output.lower()
    run_dir = interrupted.copy_to(tmp_path)
    config = write_quickstart_config(tmp_path, steps=interrupted.steps, run_name=interrupted.name,
                                     project_name="canonical", log_interval=interrupted.log_interval,
                                     monitor_type=["file"])
    before = records(run_dir)
    point = latest_checkpoint(run_dir)
    assert point is not None and point.step >= 100  # the canonical run stopped after its step-100 checkpoint

    console = run_dir / "logs" / "console.log"
    written = console.stat().st_size
    began = time.monotonic()
    resumed = run_msmon("run", str(config), "--resume", "--plain", cwd=tmp_path, timeout=900)
    assert resumed.code == 0, resumed.stderr[-3000:]
    print(f"legacy: resumed from step {point.step}, {time.monotonic() - began:.1f} s to the end")
    rows = one_curve(run_dir, steps=interrupted.steps, interval=interrupted.log_interval)
    first = next(r for r in rows if r["step"] > point.step)
    last = [r for r in before if r["step"] <= point.step][-1]
    assert first["loss"] < LN_VOCAB - 1.0 and abs(first["loss"] - last["loss"]) < 1.5, (last, first)
    with console.open("rb") as log:  # mindformers' own step lines of the resumed run (its output appended)
        printed = parse_step_lines(log.read()[written:].decode("utf-8", errors="replace"))
    assert min(printed) == point.step + 1 and max(printed) == interrupted.steps
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "completed" and info["last_step"] == interrupted.steps
    assert [(a["status"], a["reason"], a["resumed_from_step"]) for a in info["attempts"]] == [
        ("interrupted", "start", None), ("completed", "resume", point.step)]
    recorded = (run_dir / "run.json").read_bytes()
    again = run_msmon("resume", str(run_dir), cwd=tmp_path)  # a completed run: refused, its record untouched
    assert again.code == 1 and f"completed at step {interrupted.steps}; nothing to resume" in again.stderr
    assert "runner_config.epochs=2" in again.stderr and "Traceback" not in again.stderr
    assert (run_dir / "run.json").read_bytes() == recorded


def test_a_killed_mcore_training_interrupted_in_its_back_off_is_finished_by_msmon_resume(tmp_path: Path) -> None:
    """SIGKILL the training (mcore, with the per-token loss and mindformers' separate losses), then a real SIGINT to
    `msmon run` while it waits out a 60 s restart back-off: it ends at once, interrupted (130), the dead attempt
    recorded, no second attempt, nothing left running. `msmon resume RUN_DIR` (a generated run name) then finishes
    it from the last checkpoint: one curve, the steps after the checkpoint trained again with the same loss, and
    msmon's values equal what MFLossMonitor printed (per-token loss: the train step returns the loss already divided
    by the token count; print_separate_loss with mtp_num_layers: Qwen3 builds no MTP block, so the MTP loss is an
    exact 0 and not recorded)."""
    config, _ = _config(tmp_path, "mcore", run_name="msmon_${now:%H%M%S%f}",  # a generated name
                        overrides={"calculate_per_token_loss": True, "print_separate_loss": True,
                                   "model.model_config.mtp_num_layers": 1}, log_interval=10, monitor_type=["file"])
    started = Launched.start(tmp_path, "run", str(config), "--plain", "--max-restarts", "1", "--restart-backoff", "60")
    try:
        run_dir = started.wait_for(lambda: _generated_run_dir(tmp_path / "monitor_logs" / PROJECTS["mcore"]))
        wait_for_checkpoint(started.wait_for, run_dir, step=40, checkpoint=EVERY)
        kill_training(started)
        started.wait_for(lambda: (run_dir / "alerts.jsonl").exists())  # written before the back-off begins
        sent = time.monotonic()
        started.proc.send_signal(signal.SIGINT)
        code = started.finish(120)
    finally:
        started.kill()
    print(f"measured: SIGINT in the back-off to exit {time.monotonic() - sent:.1f} s")
    assert code == 130 and time.monotonic() - sent < 30, started.output[-3000:]
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "interrupted" and info["exit_code"] == 130
    assert [(a["status"], a["reason"]) for a in info["attempts"]] == [("failed", "start")], info["attempts"]
    (restart,) = records(run_dir, "alerts.jsonl")
    assert restart["detector"] == "restart" and "restart 1 of 1" in restart["message"]
    assert processes_of(run_dir) == []

    resumed = run_msmon("resume", str(run_dir), "--plain", cwd=tmp_path, timeout=900)
    assert resumed.code == 0, resumed.stderr[-3000:]
    rows = one_curve(run_dir)
    same_losses(records(run_dir, "metrics.attempt-1.jsonl"), rows)
    info = json.loads((run_dir / "run.json").read_text())
    assert [(a["status"], a["reason"]) for a in info["attempts"]] == [("failed", "start"), ("completed", "resume")]
    assert info["command"][:2] == ["msmon", "run"] and "--resume" in info["command"]
    printed = mindformers_step_lines(run_dir)  # the resumed attempt printed the steps after the checkpoint last
    for row in rows:
        for name in ("loss", "grad_norm", "learning_rate", "loss_lm"):  # printed with 6 or 8 significant digits
            assert row[name] == pytest.approx(printed[row["step"]][name], rel=2e-6, abs=2e-6), (row["step"], name)
        assert row["loss_lm"] == pytest.approx(row["loss"], rel=1e-6) and row["loss_lm"] > 1.0
        assert "loss_mtp" not in row and "loss_aux" not in row


def _generated_run_dir(project: Path) -> Path | None:
    found = [p for p in project.glob("msmon_*") if (p / "run.json").exists()] if project.is_dir() else []
    return found[0] if found else None


def test_a_training_killed_like_the_oom_killer_does_is_restarted_from_its_last_checkpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One process, `--max-restarts 1`: SIGKILL after a checkpoint at step 60 or later (as the OOM killer does); it
    restarts from that checkpoint after one restart alert and completes: one curve, the steps trained twice with the
    same loss. The team's DingTalk robot (a local stand-in that checks the signature) hears of the kill from the
    `msmon run` parent, which outlived the killed training, and then of the run's end; neither the robot's URL
    token nor its secret is in any file of the run. (A hang stopped by the stall detector, then restarted: the
    two-rank test of test_run_ranks.py.)"""
    robots = RobotServer({"dingtalk": "SECkill-test-3"})
    monkeypatch.setenv("MSMON_TEST_ROBOT_URL", robots.url("dingtalk"))
    monkeypatch.setenv("MSMON_TEST_ROBOT_SECRET", "SECkill-test-3")
    chat = [{"service": "dingtalk", "url": "${oc.env:MSMON_TEST_ROBOT_URL}", "secret_env": "MSMON_TEST_ROBOT_SECRET",
             "min_interval_s": 0}]
    config, run_dir = _config(tmp_path, "legacy", log_interval=10, monitor_type=["file"],
                              health={"alerts": {"chat": chat}})
    started = Launched.start(tmp_path, "run", str(config), "--plain", "--max-restarts", "1", "--restart-backoff", "1")
    try:
        wait_for_checkpoint(started.wait_for, run_dir, step=60, checkpoint=60)
        saved = latest_checkpoint(run_dir).step
        kill_training(started)
        assert started.finish(900) == 0, started.output[-3000:]
    finally:
        started.kill()
        robots.close()
    told = [body["markdown"]["text"] for _, body in robots.received["dingtalk"]]
    assert robots.refused == 0 and len(told) == 2, told
    assert told[0].startswith("### msmon warning: restart at step") and "code -9" in told[0]
    assert told[1].startswith("### msmon: run resumed completed") and f"- **last step**: {STEPS} of {STEPS}" in told[1]
    for path in tmp_path.rglob("*"):
        if path.is_file() and path.stat().st_size < 50_000_000:
            data = path.read_bytes()
            assert b"t0ken" not in data and b"SECkill-test-3" not in data, path
    alerts = records(run_dir, "alerts.jsonl")
    assert [(a["detector"], a["action"]) for a in alerts] == [("restart", "restart")], alerts
    assert alerts[0]["values"]["resumed_from_step"] == saved >= 60 and "HEALTH ALERT [warning]" in started.output
    rows = one_curve(run_dir)
    same_losses(records(run_dir, "metrics.attempt-1.jsonl"), rows)
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "completed" and info["alert_count"] == 1 and info["last_step"] == STEPS
    first, second = info["attempts"]
    assert first["status"] == "failed" and "code -9" in first["error"] and first["last_step"] > saved
    assert (second["status"], second["reason"], second["resumed_from_step"]) == ("completed", "restart", saved)
    assert processes_of(run_dir) == []
