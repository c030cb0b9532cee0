"""Resuming with the real Trainer on both model paths, through `msmon run` / `msmon resume` child processes and real
signals: an interrupted quickstart continued with `--resume` and no extra keys, a training process killed with
SIGKILL restarted by `--max-restarts 1`, the same kill failing the run with `--max-restarts 0` (then `msmon resume`),
a hung (SIGSTOP) training stopped by the stall detector and restarted, neither a Ctrl-C nor a configuration error
restarted, and a restart of two data-parallel ranks (legacy quickstart, `.ckpt` and safetensors).

Each run trains 160 steps (log every 10, a checkpoint every 50, the last 3 kept). mindformers on CPU is
deterministic here: a step trained again from a checkpoint gives the loss it gave the first time, which is the
proof that training continued from the checkpoint (and not from the start, near ln(1000) = 6.9).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import run_msmon
from helpers_ranks import processes_of
from helpers_training import PROJECTS, QUICKSTARTS, parse_step_lines, write_quickstart_config
from omegaconf import OmegaConf

from msmon.runner.checkpoints import latest_checkpoint
from msmon.util.net import free_port
from msmon.view.report import write_report
from msmon.view.series import load_run

STEPS = 160
EVERY = 50
LN_VOCAB = math.log(1000)
PATHS = sorted(QUICKSTARTS)
#: The legacy path also runs in the tested matrix's other pair (mindformers 1.8: RESUME_VERIFIED lists it).
SMOKE_LEGACY = [pytest.param(p, marks=pytest.mark.compat_smoke) if p == "legacy" else p for p in PATHS]
#: A model key each quickstart's network refuses when it is built: 64 hidden units in 3 heads; no such activation.
BROKEN_MODEL_KEY = {"legacy": ("num_heads", 3), "mcore": ("hidden_act", "no_such_activation")}


def _config(tmp_path: Path, path: str, run_name: str = "resumed", fmt: str | None = None,
            **monitor: Any) -> tuple[Path, Path]:
    """(config, run directory): the quickstart of ``path`` with a checkpoint every EVERY steps (in ``fmt`` when
    given), ``monitor``: monitor_config keys."""
    callbacks = OmegaConf.to_container(OmegaConf.load(QUICKSTARTS[path]).callbacks)
    assert isinstance(callbacks, list)
    for callback in callbacks:
        if callback["type"] == "CheckpointMonitor":
            callback["save_checkpoint_steps"] = EVERY
            if fmt is not None:
                callback["checkpoint_format"] = fmt
    config = write_quickstart_config(tmp_path, steps=STEPS, source=QUICKSTARTS[path], run_name=run_name,
                                     overrides={"callbacks": callbacks}, **monitor)
    return config, tmp_path / "monitor_logs" / PROJECTS[path] / run_name


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_DEFAULT_PATH", "MSMON_DEBUG")}
    env.update(MSMON_HOME=str(tmp_path / "home"), MSMON_CACHE_DIR=str(tmp_path / "cache"), NO_COLOR="1")
    return env


class Started:
    """``msmon ARGS`` running in the background, its output going to files (a pipe nobody reads while the test
    waits would fill up and stop the training at its next print)."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.out = tmp_path / f"msmon-{time.monotonic_ns()}.out"
        with self.out.open("w") as sink:
            self.proc = subprocess.Popen([sys.executable, "-m", "msmon", *args], cwd=tmp_path, env=_env(tmp_path),
                                         stdout=sink, stderr=subprocess.STDOUT, text=True)

    def finish(self, timeout: float) -> tuple[int, str]:
        """(exit code, everything it printed)."""
        code = self.proc.wait(timeout=timeout)
        return code, self.out.read_text(errors="replace")


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _wait_for_step(started: Started, run_dir: Path, step: int, checkpoint: int) -> None:
    """Until metrics.jsonl has a record at ``step`` or later and a checkpoint at ``checkpoint`` or later exists."""
    deadline = time.monotonic() + 600
    while True:
        rows = _rows(run_dir / "metrics.jsonl")
        point = latest_checkpoint(run_dir)
        if rows and rows[-1]["step"] >= step and point is not None and point.step >= checkpoint:
            return
        assert started.proc.poll() is None, started.out.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.1)


def _training(tmp_path: Path, config: Path, run_dir: Path, until: tuple[int, int], *options: str) -> Started:
    """``msmon run CONFIG --plain OPTIONS`` once it logged step ``until[0]`` and saved checkpoint ``until[1]``."""
    started = Started(tmp_path, "run", str(config), "--plain", *options)
    _wait_for_step(started, run_dir, until[0], checkpoint=until[1])
    return started


def _kill_training(started: Started, signum: int = signal.SIGKILL) -> int:
    """SIGKILL one training process (the worker, or rank 1 of msrun's), as the OOM killer does (or send it
    ``signum``)."""
    workers = [p for p in psutil.Process(started.proc.pid).children(recursive=True)
               if "msmon.runner.worker" in " ".join(p.cmdline()) and p.environ().get("MS_ROLE") != "MS_SCHED"]
    victim = max(workers, key=lambda p: p.environ().get("RANK_ID", "0"))
    victim.send_signal(signum)
    return victim.pid


def _one_curve(run_dir: Path) -> list[dict[str, Any]]:
    """metrics.jsonl holds every logged step once, as the report and the views read it."""
    rows = _rows(run_dir / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(10, STEPS + 1, 10))
    steps, _ = load_run(run_dir).series("loss")
    assert list(steps) == list(range(10, STEPS + 1, 10))
    report, _ = write_report(run_dir)
    assert report.is_file()
    return rows


def _same_losses(superseded: list[dict[str, Any]], kept: list[dict[str, Any]]) -> None:
    """The steps trained twice gave the same loss both times: training continued from the checkpoint."""
    again = {r["step"]: r["loss"] for r in kept}
    assert superseded, "the killed attempt logged nothing after its checkpoint"
    for row in superseded:
        assert again[row["step"]] == pytest.approx(row["loss"], rel=1e-4, abs=1e-5), row["step"]


@pytest.mark.training
@pytest.mark.parametrize("path", SMOKE_LEGACY)
def test_an_interrupted_quickstart_continues_with_resume_and_no_extra_keys(tmp_path: Path, path: str) -> None:
    config, run_dir = _config(tmp_path, path)
    started = _training(tmp_path, config, run_dir, (110, 100), "--max-restarts", "1", "--restart-backoff", "0")
    started.proc.send_signal(signal.SIGINT)
    code, output = started.finish(timeout=180)
    assert code == 130 and "restart" not in output.lower(), output[-3000:]  # a Ctrl-C is never restarted
    assert f"msmon resume {run_dir.relative_to(tmp_path)}" in output  # the ending names the simplest command
    before = _rows(run_dir / "metrics.jsonl")
    point = latest_checkpoint(run_dir)
    assert point is not None and point.step >= 100

    began = time.monotonic()
    resumed = run_msmon("run", str(config), "--resume", "--plain", cwd=tmp_path, env=_env(tmp_path), timeout=900)
    assert resumed.code == 0, resumed.stderr[-3000:]
    print(f"{path}: resumed from step {point.step}, {time.monotonic() - began:.1f} s to the end")
    rows = _one_curve(run_dir)
    first = next(r for r in rows if r["step"] > point.step)
    last = [r for r in before if r["step"] <= point.step][-1]
    assert first["loss"] < LN_VOCAB - 1.0 and abs(first["loss"] - last["loss"]) < 1.5, (last, first)
    printed = parse_step_lines(resumed.stdout + resumed.stderr)  # mindformers' own step lines of the resumed run
    assert min(printed) == point.step + 1 and max(printed) == STEPS
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "completed" and info["last_step"] == STEPS
    assert [(a["status"], a["reason"], a["resumed_from_step"]) for a in info["attempts"]] == [
        ("interrupted", "start", None), ("completed", "resume", point.step)]


@pytest.mark.training
@pytest.mark.parametrize("path", PATHS)
def test_a_killed_training_is_restarted_from_its_last_checkpoint(tmp_path: Path, path: str) -> None:
    config, run_dir = _config(tmp_path, path)
    started = _training(tmp_path, config, run_dir, (70, 50), "--max-restarts", "1", "--restart-backoff", "1")
    _kill_training(started)
    code, output = started.finish(timeout=900)
    assert code == 0, output[-3000:]
    alerts = _rows(run_dir / "alerts.jsonl")
    assert [(a["detector"], a["action"]) for a in alerts] == [("restart", "restart")]
    resumed_from = alerts[0]["values"]["resumed_from_step"]
    assert resumed_from >= 50 and "HEALTH ALERT [warning]" in output
    rows = _one_curve(run_dir)
    _same_losses(_rows(run_dir / "metrics.attempt-1.jsonl"), rows)
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "completed" and info["alert_count"] == 1 and info["last_step"] == STEPS
    first, second = info["attempts"]
    assert first["status"] == "failed" and "code -9" in first["error"] and first["last_step"] > resumed_from
    assert (second["status"], second["reason"], second["resumed_from_step"]) == ("completed", "restart", resumed_from)


@pytest.mark.training
def test_ctrl_c_during_the_restart_back_off_ends_the_run_without_a_restart(tmp_path: Path) -> None:
    """SIGKILL the training, then a real SIGINT to `msmon run` while it waits out a 60 s back-off: it ends at once,
    interrupted (130), the dead attempt recorded, no second attempt, nothing left running."""
    config, run_dir = _config(tmp_path, "legacy")
    started = _training(tmp_path, config, run_dir, (70, 50), "--max-restarts", "1", "--restart-backoff", "60")
    _kill_training(started)
    deadline = time.monotonic() + 120
    while not (run_dir / "alerts.jsonl").exists():  # the restart alert is written before the back-off begins
        assert started.proc.poll() is None and time.monotonic() < deadline, started.out.read_text()[-3000:]
        time.sleep(0.1)
    sent = time.monotonic()
    started.proc.send_signal(signal.SIGINT)
    code, output = started.finish(timeout=60)
    print(f"measured: SIGINT in the back-off to exit {time.monotonic() - sent:.1f} s")
    assert code == 130 and time.monotonic() - sent < 30, output[-3000:]
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "interrupted" and info["exit_code"] == 130
    assert [(a["status"], a["reason"]) for a in info["attempts"]] == [("failed", "start")], info["attempts"]
    assert [a["detector"] for a in _rows(run_dir / "alerts.jsonl")] == ["restart"]
    assert processes_of(run_dir) == []


@pytest.mark.training
@pytest.mark.parametrize("path", PATHS)
def test_a_hung_training_stopped_by_the_stall_detector_is_restarted(tmp_path: Path, path: str) -> None:
    """A frozen training process (SIGSTOP): the watcher of `msmon run` raises the stall alert, stops it (action
    stop), and the training is restarted from its last checkpoint and completes."""
    config, run_dir = _config(tmp_path, path, health={"stall": {"timeout_s": 5.0, "poll_s": 0.2, "action": "stop"}})
    started = _training(tmp_path, config, run_dir, (70, 50), "--max-restarts", "1", "--restart-backoff", "1")
    _kill_training(started, signal.SIGSTOP)
    code, output = started.finish(timeout=900)
    assert code == 0, output[-3000:]
    alerts = _rows(run_dir / "alerts.jsonl")
    assert [(a["detector"], a["action"]) for a in alerts] == [("stall", "stop"), ("restart", "restart")], alerts
    assert "rank 0 is stopped" in alerts[0]["message"]  # the watcher sees the attempt's own process
    _one_curve(run_dir)
    info = json.loads((run_dir / "run.json").read_text())
    first, second = info["attempts"]
    assert first["status"] == "stopped_by_monitor" and first["error"].startswith("stall at step")
    assert (second["status"], second["reason"]) == ("completed", "restart") and info["status"] == "completed"
    assert info["alert_count"] == 2


@pytest.mark.training
@pytest.mark.parametrize("path", PATHS)
def test_without_restarts_a_killed_training_fails_and_msmon_resume_finishes_it(tmp_path: Path, path: str) -> None:
    config, run_dir = _config(tmp_path, path, run_name="msmon_${now:%H%M%S%f}")  # a generated name
    started = Started(tmp_path, "run", str(config), "--plain", "--max-restarts", "0")
    run_dir = _wait_for_run_dir(tmp_path / "monitor_logs" / PROJECTS[path])
    _wait_for_step(started, run_dir, 70, checkpoint=50)
    _kill_training(started)
    code, output = started.finish(timeout=300)
    assert code == 3, output[-3000:]
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "failed" and len(info["attempts"]) == 1 and not (run_dir / "alerts.jsonl").exists()

    resumed = run_msmon("resume", str(run_dir), "--plain", cwd=tmp_path, env=_env(tmp_path), timeout=900)
    assert resumed.code == 0, resumed.stderr[-3000:]
    rows = _one_curve(run_dir)
    _same_losses(_rows(run_dir / "metrics.attempt-1.jsonl"), rows)
    info = json.loads((run_dir / "run.json").read_text())
    assert [(a["status"], a["reason"]) for a in info["attempts"]] == [("failed", "start"), ("completed", "resume")]
    assert info["command"][:2] == ["msmon", "run"] and "--resume" in info["command"]


@pytest.mark.training
@pytest.mark.parametrize("path", PATHS)
def test_a_configuration_error_is_never_restarted(tmp_path: Path, path: str) -> None:
    """A failure before the first step of an attempt (here a model key validation accepts and mindformers refuses
    when it builds the network) ends the run failed at once, restarts or not."""
    config, run_dir = _config(tmp_path, path)
    key, value = BROKEN_MODEL_KEY[path]
    result = run_msmon("run", str(config), "--plain", "--max-restarts", "2", "--restart-backoff", "0",
                       f"model.model_config.{key}={value}", cwd=tmp_path, env=_env(tmp_path), timeout=600)
    assert result.code == 3, result.stderr[-3000:]
    assert "restart" not in result.stderr.lower(), result.stderr[-3000:]
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "failed" and [a["status"] for a in info["attempts"]] == ["failed"]
    assert not info["attempts"][0]["last_step"] and not (run_dir / "alerts.jsonl").exists()  # no step trained


def _wait_for_run_dir(project: Path) -> Path:
    """The run directory a generated run_name made under ``project``."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        found = [p for p in project.glob("msmon_*") if (p / "run.json").exists()] if project.is_dir() else []
        if found:
            return found[0]
        time.sleep(0.1)
    raise AssertionError(f"no run directory appeared under {project}")


@pytest.mark.training
@pytest.mark.parametrize("fmt", ["ckpt", "safetensors"])
def test_two_data_parallel_ranks_restart_together_from_their_checkpoint(tmp_path: Path, fmt: str) -> None:
    """Legacy quickstart only: mindformers 1.9's mcore models train no multi-rank run on CPU (docs/run.md)."""
    config, run_dir = _config(tmp_path, "legacy", run_name="dp2", fmt=fmt)
    port = str(free_port("127.0.0.1"))
    started = _training(tmp_path, config, run_dir, (70, 50), "--worker-num", "2", "--master-port", port,
                        "--max-restarts", "1", "--restart-backoff", "1", "use_parallel=True",
                        "parallel_config.data_parallel=2", "parallel.full_batch=False")
    _kill_training(started)  # rank 1: msrun stops rank 0, msmon restarts both
    code, output = started.finish(timeout=900)
    assert code == 0, output[-3000:]
    info = json.loads((run_dir / "run.json").read_text())
    assert [a["status"] for a in info["attempts"]] == ["failed", "completed"] and info["device_count"] == 2
    assert info["attempts"][1]["checkpoint"].endswith(f".{fmt}")
    rows = _one_curve(run_dir)
    _same_losses(_rows(run_dir / "metrics.attempt-1.jsonl"), rows)
