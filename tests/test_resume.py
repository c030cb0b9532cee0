"""Resuming and restarting with the real Trainer, through `msmon run` / `msmon resume` child processes and real
signals, in two tests: the canonical interrupted run continued with `--resume` and no extra keys (legacy); and
one mcore training (per-token loss, separate losses, a DingTalk robot told of every event) killed with SIGKILL as
the OOM killer does, restarted automatically from its checkpoint, killed again, its second restart cancelled by a
Ctrl-C during the back-off, then finished by `msmon resume` (restarts do not depend on the model: the legacy
model's restarts are the two-rank test's). A hang stopped by the stall detector and two data-parallel ranks
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


BACKOFF_S = 5  # --restart-backoff: the first restart waits 5 s, the second 10 s (RestartPolicy doubles it)


def test_a_training_killed_like_the_oom_killer_does_restarts_then_msmon_resume_finishes_it_after_a_ctrl_c(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One mcore training (the per-token loss, mindformers' separate losses, a generated run name), `--max-restarts
    2 --restart-backoff 5`, the team's DingTalk robot (a local stand-in that checks the signature) told of alerts and
    of the run's end, in three attempts:

    1. SIGKILL after the first checkpoint (as the OOM killer does): one restart alert, and after 5 s the training
       restarts from that checkpoint, the steps it trains again giving the loss they gave the first time.
    2. SIGKILL again after a later checkpoint: a second restart alert, then a real SIGINT to `msmon run` during its
       10 s back-off: it ends at once, interrupted (130), the two dead attempts recorded, no third one, nothing left
       running.
    3. `msmon resume RUN_DIR` finishes it from the last checkpoint: one curve, the steps after it trained again with
       the same loss, and msmon's values equal what MFLossMonitor printed (per-token loss: the train step returns the
       loss already divided by the token count; print_separate_loss with mtp_num_layers: Qwen3 builds no MTP block,
       so the MTP loss is an exact 0 and not recorded).

    The robot hears, from the `msmon run` parent, which outlived each killed training: both restarts, the
    interrupted end, then the resumed run's completion; neither its URL token nor its secret is in any file of the
    run. It needs a training of its own: no canonical run is killed or restarted.

    The back-off of 5 s: the first restart waits little, and the second back-off (10 s) is far longer than the test
    takes to send the SIGINT once the second restart alert is on disk (a poll of 0.1 s: 0.1 s measured on the busy
    2-core machine). The alert is written before the back-off begins; a SIGINT that came before the back-off would
    still cancel the restart, one that came after it would show as a third attempt. (A hang stopped by the stall
    detector, then restarted: the two-rank test of test_run_ranks.py.)"""
    secret = "SECkill-test-3"
    robots = RobotServer({"dingtalk": secret})
    monkeypatch.setenv("MSMON_TEST_ROBOT_URL", robots.url("dingtalk"))
    monkeypatch.setenv("MSMON_TEST_ROBOT_SECRET", secret)
    chat = [{"service": "dingtalk", "url": "${oc.env:MSMON_TEST_ROBOT_URL}", "secret_env": "MSMON_TEST_ROBOT_SECRET",
             "min_interval_s": 0}]
    config, _ = _config(tmp_path, "mcore", run_name="msmon_${now:%H%M%S%f}",  # a generated name
                        overrides={"calculate_per_token_loss": True, "print_separate_loss": True,
                                   "model.model_config.mtp_num_layers": 1}, log_interval=10, monitor_type=["file"],
                        health={"alerts": {"chat": chat}})
    started = Launched.start(tmp_path, "run", str(config), "--plain", "--max-restarts", "2",
                             "--restart-backoff", str(BACKOFF_S))
    try:
        try:
            run_dir = started.wait_for(lambda: _generated_run_dir(tmp_path / "monitor_logs" / PROJECTS["mcore"]))
            wait_for_checkpoint(started.wait_for, run_dir, step=40, checkpoint=EVERY)
            first = _checkpoint_step(run_dir)
            kill_training(started)
            wait_for_checkpoint(started.wait_for, run_dir, step=first + EVERY + 10, checkpoint=first + EVERY)
            second = _checkpoint_step(run_dir)
            kill_training(started)
            started.wait_for(lambda: len(records(run_dir, "alerts.jsonl")) == 2)
            sent, alerted = time.monotonic(), time.time()
            started.proc.send_signal(signal.SIGINT)
            code = started.finish(120)
        finally:
            started.kill()
        late = alerted - records(run_dir, "alerts.jsonl")[1]["time"]
        print(f"measured: SIGINT {late:.1f} s after the second restart alert, {time.monotonic() - sent:.1f} s from "
              "it to the exit")
        assert code == 130 and time.monotonic() - sent < 30, started.output[-3000:]
        assert processes_of(run_dir) == []
        interrupted = json.loads((run_dir / "run.json").read_text())
        assert interrupted["status"] == "interrupted" and interrupted["exit_code"] == 130
        assert [(a["status"], a["reason"], a["resumed_from_step"]) for a in interrupted["attempts"]] == [
            ("failed", "start", None), ("failed", "restart", first)], (f"SIGINT {late:.1f} s after the alert",
                                                                       interrupted["attempts"])
        for attempt, saved in zip(interrupted["attempts"], (first, second), strict=True):
            assert "code -9" in attempt["error"] and attempt["last_step"] > saved, attempt
        alerts = records(run_dir, "alerts.jsonl")
        assert [(a["detector"], a["action"]) for a in alerts] == [("restart", "restart")] * 2, alerts
        for number, (alert, saved) in enumerate(zip(alerts, (first, second), strict=True), 1):
            assert f"restart {number} of 2" in alert["message"] and "code -9" in alert["message"], alert
            assert alert["values"]["resumed_from_step"] == saved and alert["values"]["delay_s"] == BACKOFF_S * number
        assert "HEALTH ALERT [warning]" in started.output

        resumed = run_msmon("resume", str(run_dir), "--plain", cwd=tmp_path, timeout=900)
        assert resumed.code == 0, resumed.stderr[-3000:]
    finally:
        robots.close()
    told = [body["markdown"]["text"] for _, body in robots.received["dingtalk"]]
    assert robots.refused == 0 and len(told) == 4, told
    for message, saved in zip(told[:2], (first, second), strict=True):
        assert message.startswith(f"### msmon warning: restart at step {saved} ({run_dir.name})"), message
        assert "code -9" in message
    assert told[2].startswith(f"### msmon: run {run_dir.name} interrupted") and "- **exit code**: 130" in told[2]
    assert f"- **last step**: {interrupted['last_step']} of {STEPS}" in told[2] and interrupted["last_step"] > second
    assert told[3].startswith(f"### msmon: run {run_dir.name} completed") and "- **exit code**: 0" in told[3]
    assert f"- **last step**: {STEPS} of {STEPS}" in told[3]
    for path in tmp_path.rglob("*"):
        if path.is_file() and path.stat().st_size < 50_000_000:
            data = path.read_bytes()
            assert b"t0ken" not in data and secret.encode() not in data, path

    rows = one_curve(run_dir)
    same_losses(records(run_dir, "metrics.attempt-1.jsonl"), rows)  # resumed from the first checkpoint
    same_losses(records(run_dir, "metrics.attempt-2.jsonl"), rows)  # and from the second
    info = json.loads((run_dir / "run.json").read_text())
    # one alert per restart alert (docs/run.md): the restart that ran and the one the SIGINT cancelled, counted in
    # the attempt each ended; both chat messages of the end say so too
    assert info["status"] == "completed" and info["last_step"] == STEPS and info["alert_count"] == 2
    assert [a["alert_count"] for a in interrupted["attempts"]] == [1, 1]
    assert interrupted["alert_count"] == 2 and all("- **alerts**: 2\n" in message for message in told[2:])
    assert [(a["status"], a["reason"], a["resumed_from_step"]) for a in info["attempts"]] == [
        ("failed", "start", None), ("failed", "restart", first), ("completed", "resume", second)]
    assert info["command"][:2] == ["msmon", "run"] and "--resume" in info["command"]
    assert len(records(run_dir, "alerts.jsonl")) == 2, "the resumed run raised no alert"
    printed = mindformers_step_lines(run_dir)  # the resumed attempt printed the steps after the checkpoint last
    for row in rows:
        for name in ("loss", "grad_norm", "learning_rate", "loss_lm"):  # printed with 6 or 8 significant digits
            assert row[name] == pytest.approx(printed[row["step"]][name], rel=2e-6, abs=2e-6), (row["step"], name)
        assert row["loss_lm"] == pytest.approx(row["loss"], rel=1e-6) and row["loss_lm"] > 1.0
        assert "loss_mtp" not in row and "loss_aux" not in row


def _checkpoint_step(run_dir: Path) -> int:
    point = latest_checkpoint(run_dir)
    assert point is not None
    return point.step


def _generated_run_dir(project: Path) -> Path | None:
    found = [p for p in project.glob("msmon_*") if (p / "run.json").exists()] if project.is_dir() else []
    return found[0] if found else None
