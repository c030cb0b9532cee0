"""The first five minutes: a quiet terminal under the live panel, an ending that says what happened and what to
type next, `--report`, and shell completion."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import require_tool, run_msmon
from helpers_training import parse_step_lines, write_quickstart_config

from msmon.runner.framework_output import QuietFilter, level_of

MF_INFO = ("2026-11-30 17:23:11,856 - mindformers/x/logs/output/log[mindformers/core/callback/callback.py:747] - "
           "INFO - { Epoch:[  1/  1], step:[   10/  400], loss:[6.894472/6.902883], per_step_time: 32ms")
MF_BAR = ("2026-11-30 17:23:11,857 - mindformers/x/logs/output/log[mindformers/core/callback/callback.py:764] - INFO -"
          "    0.8% |                                   | 61.42350 samples/s/p  0")
MF_WARNING = ("2026-11-30 17:23:06,343 - mindformers/x/logs/output/log[mindformers/models/qwen3/modeling_qwen3.py:35]"
              " - WARNING - Import PyNativeQwen3ForCausalLM failed: No module named 'hyper_parallel'.")
MS_WARNING = ("[WARNING] ME(11970:140153024560000,MainProcess):2026-11-30-17:23:06.791.000 "
              "[mindspore/runtime/thread_bind_core.py:942] Module bind core policy generated: {'main': [0, 1]}.")
MS_ERROR = "[ERROR] RUNTIME_FRAMEWORK(11970,7f77,python):2026-11-30-17:23:06.818.421 [graph_scheduler.cc:1] Boom"


def test_the_quiet_filter_keeps_warnings_errors_tracebacks_and_msmon_lines() -> None:
    assert [level_of(line) for line in (MF_INFO, MF_BAR, MF_WARNING, MS_WARNING, MS_ERROR, "_recompute:False")] == [
        20, 20, 30, 30, 40, None]
    text = "\n".join([
        "swap:[ParallelConfig]", "_recompute:False", MF_INFO, MF_BAR, MF_WARNING, "    its indented detail",
        MF_INFO, "    an indented line under an INFO", MS_WARNING, "/x/y.py:3: UserWarning: careful", MS_ERROR,
        "Traceback (most recent call last):", '  File "x.py", line 1, in <module>', "ValueError: bad",
        "after the traceback", "msmon: cannot write /x/info.log (No space left on device)",
    ]) + "\n"
    kept = QuietFilter().filter(text).splitlines()
    assert kept == [MF_WARNING, "    its indented detail", MS_WARNING, "/x/y.py:3: UserWarning: careful", MS_ERROR,
                    "Traceback (most recent call last):", '  File "x.py", line 1, in <module>', "ValueError: bad",
                    "msmon: cannot write /x/info.log (No space left on device)"]
    shown: list[str] = []
    QuietFilter().wrap(shown.append)(f"{MF_INFO}\n{MF_BAR}\n")
    assert shown == []


def _tmux_run(root: Path, config: Path, *args: str, name: str) -> tuple[str, list[str], str]:
    """`msmon run CONFIG ARGS` in a 140x40 tmux pane: (the pane's whole history at the end, the screens seen during
    the run, the exit code written by the shell)."""
    tmux = [require_tool("tmux", "apt-get install -y tmux"), "-L", f"msmon-{os.getpid()}-{name}", "-f", "/dev/null"]
    done = root / f"{name}.code"
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "MSMON_DEBUG")} | {"TERM": "xterm-256color"}
    command = f"cd {root} && {sys.executable} -m msmon run {config} {' '.join(args)}; echo $? > {done}; sleep 600"
    subprocess.run([*tmux, "new-session", "-d", "-x", "140", "-y", "40", command], check=True, env=env)
    screens = []
    try:
        deadline = time.monotonic() + 400
        while not done.exists() and time.monotonic() < deadline:
            screens.append(subprocess.run([*tmux, "capture-pane", "-p"], capture_output=True, text=True).stdout)
            time.sleep(1.0)
        history = subprocess.run([*tmux, "capture-pane", "-p", "-S", "-", "-J"], capture_output=True,
                                 text=True).stdout
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
    return history, screens, done.read_text().strip() if done.exists() else "timeout"


@pytest.mark.training
def test_a_quiet_terminal_under_the_panel_and_an_ending_with_the_next_commands(tmp_path: Path) -> None:
    config = write_quickstart_config(tmp_path, steps=120, run_name="quiet", log_interval=10)
    history, screens, code = _tmux_run(tmp_path, config, name="quiet")
    assert code == "0", history[-3000:]
    assert any("╭─ msmon" in screen for screen in screens)  # the panel was there during the run
    assert "step:[" not in history and "ParallelConfig" not in history  # mindformers' INFO lines and dumps: not
    run_dir = tmp_path / "monitor_logs" / "quickstart" / "quiet"
    assert "run completed (exit 0; run directory" in history
    assert "120 of 120 steps" in history and "loss " in history and "alerts: none" in history
    assert "msmon report monitor_logs/quickstart/quiet" in history
    assert "msmon board start monitor_logs/quickstart" in history
    # everything still went to the run directory: every step line, in mindformers' log and in the console log
    assert sorted(parse_step_lines((run_dir / "logs" / "console.log").read_text())) == list(range(1, 121))
    assert sorted(parse_step_lines((run_dir / "logs" / "output" / "log" / "rank_0" / "info.log").read_text())) == (
        list(range(1, 121)))


@pytest.mark.training
def test_framework_logs_brings_the_step_lines_back_and_the_ending_names_the_previous_run(tmp_path: Path) -> None:
    first = write_quickstart_config(tmp_path, steps=40, run_name="first", log_interval=10)
    assert run_msmon("run", str(first), "--plain", cwd=tmp_path, timeout=300).code == 0
    config = write_quickstart_config(tmp_path, steps=40, run_name="loud", log_interval=10)
    history, _, code = _tmux_run(tmp_path, config, "--framework-logs", name="loud")
    assert code == "0", history[-3000:]
    assert sorted(parse_step_lines(history)) == list(range(1, 41))
    assert "msmon compare monitor_logs/quickstart/first monitor_logs/quickstart/loud" in history
    run_dir = tmp_path / "monitor_logs" / "quickstart" / "loud"
    assert sorted(parse_step_lines((run_dir / "logs" / "console.log").read_text())) == list(range(1, 41))


@pytest.mark.training
def test_plain_output_keeps_every_framework_line(tmp_path: Path) -> None:
    """Without a terminal nothing is filtered: log collectors get mindformers' output as it was."""
    config = write_quickstart_config(tmp_path, steps=40, run_name="plain", log_interval=10)
    result = run_msmon("run", str(config), "--plain", cwd=tmp_path, timeout=300)
    assert result.code == 0, result.stderr[-2000:]
    assert sorted(parse_step_lines(result.stdout)) == list(range(1, 41))
    assert [line for line in result.stdout.splitlines() if line.startswith("msmon: step ")][-1].startswith(
        "msmon: step 40/40")
    run_dir = tmp_path / "monitor_logs" / "quickstart" / "plain"
    assert not (run_dir / "logs" / "console.log").exists()  # nothing captured: the output went where it goes
    assert sorted(parse_step_lines((run_dir / "logs" / "output" / "log" / "rank_0" / "info.log").read_text())) == (
        list(range(1, 41)))
    assert "next:" in result.stderr and "msmon report monitor_logs/quickstart/plain" in result.stderr


@pytest.mark.training
def test_report_after_a_completed_a_failed_and_an_interrupted_run(tmp_path: Path) -> None:
    completed = write_quickstart_config(tmp_path, steps=20, run_name="done", log_interval=5)
    result = run_msmon("run", str(completed), "--plain", "--report", cwd=tmp_path, timeout=300)
    assert result.code == 0 and "report: " in result.stderr, result.stderr[-2000:]
    report = tmp_path / "monitor_logs" / "quickstart" / "done" / "report.html"
    assert report.is_file() and "completed" in report.read_text()

    failed = write_quickstart_config(tmp_path, steps=20, run_name="broken", log_interval=5,
                                     overrides={"model.model_config.seq_length": 32})
    result = run_msmon("run", str(failed), "--plain", "--report", cwd=tmp_path, timeout=300)
    assert result.code == 3 and "report: " in result.stderr, result.stderr[-2000:]
    page = (tmp_path / "monitor_logs" / "quickstart" / "broken" / "report.html").read_text()
    assert "failed" in page and "the run logged no step" in page and "For &#39;Mul&#39;" in page

    interrupted = write_quickstart_config(tmp_path, steps=400, run_name="stopped", log_interval=5)
    run_dir = tmp_path / "monitor_logs" / "quickstart" / "stopped"
    proc = subprocess.Popen([sys.executable, "-m", "msmon", "run", str(interrupted), "--plain", "--report"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not ((run_dir / "metrics.jsonl").exists() and (run_dir / "metrics.jsonl").read_text().count("\n") >= 2):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "report: " in stderr, stderr[-2000:]
    assert "interrupted" in (run_dir / "report.html").read_text()
    resume = re.search(r"^\s+msmon resume (\S+)", stderr, re.M)
    assert resume and (tmp_path / resume.group(1)).resolve() == run_dir.resolve()  # the command that continues it


def test_completion_of_run_directories_and_config_keys(tmp_path: Path) -> None:
    run = tmp_path / "monitor_logs" / "p" / "r1"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"status": "completed"}))
    (tmp_path / "c.yaml").write_text("lr_schedule:\n  learning_rate: 0.001\nmonitor_config:\n  log_interval: 5\n")

    def complete(words: str, index: int) -> list[str]:
        env = {"_MSMON_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(index)}
        result = run_msmon(cwd=tmp_path, env=env)
        return result.stdout.split()

    assert complete("msmon report ", 2) == ["./monitor_logs/p/r1"]
    assert complete("msmon compare monitor_logs/p/", 2) == ["monitor_logs/p/r1"]
    assert complete("msmon run c.yaml lr_sch", 3) == ["lr_schedule.learning_rate="]
    assert "monitor_config.health.stall.timeout_s=" in complete("msmon validate c.yaml monitor_config.health.st", 3)
    assert "--install-completion" in run_msmon("--help").stdout
