"""The first five minutes: a quiet terminal under the live panel, an ending that says what happened and what to
type next, `--report`, and shell completion."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import require_tool, run_msmon
from helpers_training import parse_step_lines, write_quickstart_config
from launch import msmon_env

from msmon.runner.framework_output import FrameworkCount, level_of, msmon_lines_only

MF_INFO = ("2026-11-30 17:23:11,856 - mindformers/x/logs/output/log[mindformers/core/callback/callback.py:747] - "
           "INFO - { Epoch:[  1/  1], step:[   10/  400], loss:[6.894472/6.902883], per_step_time: 32ms")
MF_BAR = ("2026-11-30 17:23:11,857 - mindformers/x/logs/output/log[mindformers/core/callback/callback.py:764] - INFO -"
          "    0.8% |                                   | 61.42350 samples/s/p  0")
MF_WARNING = ("2026-11-30 17:23:06,343 - mindformers/x/logs/output/log[mindformers/models/qwen3/modeling_qwen3.py:35]"
              " - WARNING - Import PyNativeQwen3ForCausalLM failed: No module named 'hyper_parallel'.")
MS_WARNING = ("[WARNING] ME(11970:140153024560000,MainProcess):2026-11-30-17:23:06.791.000 "
              "[mindspore/runtime/thread_bind_core.py:942] Module bind core policy generated: {'main': [0, 1]}.")
MS_ERROR = "[ERROR] RUNTIME_FRAMEWORK(11970,7f77,python):2026-11-30-17:23:06.818.421 [graph_scheduler.cc:1] Boom"


def test_the_quiet_rule_shows_msmon_lines_only_and_counts_the_framework_warnings_and_errors() -> None:
    assert [level_of(line) for line in (MF_INFO, MF_BAR, MF_WARNING, MS_WARNING, MS_ERROR, "_recompute:False")] == [
        20, 20, 30, 30, 40, None]
    text = "\n".join([
        "swap:[ParallelConfig]", "_recompute:False", MF_INFO, MF_BAR, MF_WARNING, "    its indented detail",
        MF_INFO, "    an indented line under an INFO", MS_WARNING, "/x/y.py:3: UserWarning: careful", MS_ERROR,
        "Traceback (most recent call last):", '  File "x.py", line 1, in <module>', "ValueError: bad",
        "after the traceback", "msmon: cannot write /x/info.log (No space left on device)",
        MF_INFO, "Traceback (most recent call last):", '  File "y.py", line 2, in <module>', "KeyError: 'k'",
    ]) + "\n"
    shown: list[str] = []
    msmon_lines_only(shown.append)(text)
    assert shown == ["msmon: cannot write /x/info.log (No space left on device)\n"]
    msmon_lines_only(shown.append)(f"{MF_INFO}\n{MF_WARNING}\n")
    assert len(shown) == 1  # nothing to show: show is not called
    counted = FrameworkCount()
    for line in text.splitlines(keepends=True):  # as the pipe delivers them, in pieces
        counted.add(line)
    # MF_WARNING, MS_WARNING, the UserWarning; MS_ERROR with the traceback under it, and the second traceback
    assert (counted.warnings, counted.errors) == (3, 2)


def test_framework_logs_brings_the_step_lines_back_above_the_panel(canonical) -> None:
    """On a terminal with --framework-logs (the canonical interrupted run): every mindformers step line is shown
    above the live panel, and all of them are in the run's console.log too."""
    run = canonical("interrupted_legacy")
    last = run.info["last_step"]
    assert "╭─ msmon" in run.output  # the panel was there
    assert set(range(1, last + 1)) <= set(parse_step_lines(run.output))
    assert set(range(1, last + 1)) <= set(parse_step_lines((run.run_dir / "logs" / "console.log").read_text()))


SGR = re.compile(r"\x1b\[([0-9;]*)m")


def coloured(text: str) -> bool:
    """Whether an SGR sequence in ``text`` sets a foreground colour (30-37, 38;..., 90-97); bold, dim and the
    default colour (39, which tmux writes for every cell) are not colours."""
    return any(code in range(30, 39) or code in range(90, 98)
               for params in SGR.findall(text) for code in (int(p) for p in params.split(";") if p))


#: What msmon itself puts on the screen of a run: its lines, its findings, the panel's box, the ending's lines.
MSMON_SCREEN = re.compile(r"^(msmon: |HEALTH ALERT |(warning|error) MS\d{3} |next:$|  \S|[╭│╰])")


def framework_lines(screen: str) -> list[str]:
    """The lines of a screen (escape sequences removed) that msmon did not write."""
    return [line for line in screen.splitlines() if line.strip() and not MSMON_SCREEN.match(line)]


@pytest.mark.training
def test_in_tmux_the_quickstart_shows_no_framework_line_with_the_panel_without_colour(tmp_path: Path) -> None:
    """A real quickstart run in a 140x40 tmux pane with NO_COLOR=1: not one line of the framework on the screen from
    launch to the ending (mindformers' deprecation warnings, its step lines, MindSpore's GLOG lines: all in
    console.log); the first line names that log, the ending counts its warnings; the panel without a colour. (With
    --plain on a terminal: the canonical lr_2e_2 run, below; neither: the canonical run on a terminal,
    test_run_e2e.py.) A training of its own: a real terminal emulator's screen."""
    require_tool("tmux", "apt-get install -y tmux")
    config = write_quickstart_config(tmp_path, steps=20, run_name="nocolor", log_interval=5, monitor_type=["file"])
    msmon = f"{shlex.quote(sys.executable)} -m msmon run"
    done = tmp_path / "done"
    script = (r"printf '\033[31mred\033[0m\n'; "
              f"echo ==nocolor==; cd {tmp_path} && NO_COLOR=1 {msmon} {config}; "
              f"echo ==end==; touch {done}; sleep 600")
    env = {k: v for k, v in msmon_env(tmp_path, terminal=True).items() if k not in ("NO_COLOR", "COLUMNS", "LINES")}
    tmux = ["tmux", "-L", f"msmon-runs-{os.getpid()}", "-f", "/dev/null"]
    subprocess.run([*tmux, "new-session", "-d", "-x", "140", "-y", "40", "bash", "-c", script], check=True, env=env)
    try:
        subprocess.run([*tmux, "set-option", "-g", "history-limit", "50000"], check=True)
        deadline = time.monotonic() + 600
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert done.exists(), "the run did not end within 10 minutes"
        screen = subprocess.run([*tmux, "capture-pane", "-p", "-e", "-S", "-", "-J"], capture_output=True, check=True,
                                text=True).stdout
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
    control, rest = screen.split("==nocolor==", 1)
    assert coloured(control)  # the control: the capture keeps a colour the pane showed
    no_color = rest.split("==end==")[0]
    assert_quiet_screen(re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", no_color),
                        tmp_path / "monitor_logs" / "quickstart" / "nocolor")
    assert "╭─ msmon" in no_color and not coloured(no_color), no_color[-2000:]


def test_plain_on_a_terminal_prints_plain_lines_and_no_framework_line(canonical) -> None:
    """`--plain` on a terminal (the canonical lr_2e_2 run, verbose, on a pseudo-terminal): a plain line per logged
    step (verbose mode's, whose start line is msmon's too), no panel, and the screen as quiet as the panel's: not one
    line of the framework, the log named first, the warnings counted at the ending."""
    run = canonical("lr_2e_2")
    assert run.code == 0, run.output[-3000:]
    screen = run.output.replace("\r", "")
    assert_quiet_screen(screen, run.run_dir)
    steps = [int(line.split()[2]) for line in screen.splitlines() if line.startswith("msmon: step ")]
    assert steps == [r["step"] for r in run.records()] and steps[-1] == run.steps, screen[-3000:]
    assert "msmon: Monitor callback registered successfully" in screen and "╭" not in screen


def assert_quiet_screen(text: str, run_dir: Path) -> None:
    """What a run's screen (escape sequences removed) shows of the framework: nothing but the name of console.log,
    which holds its lines, and the count of its warnings at the ending."""
    assert framework_lines(text) == [], text[-3000:]
    assert "msmon: the framework's output is in" in text and "console.log" in text
    assert "run completed (exit 0" in text
    logged = (run_dir / "logs" / "console.log").read_text(encoding="utf-8")
    assert parse_step_lines(logged) and sum(level_of(line) == 30 for line in logged.splitlines()) > 0
    warnings = json.loads((run_dir / "run.json").read_text())["framework_warnings"]
    assert warnings > 0 and f"framework output: {warnings} warnings, 0 errors, in {run_dir}" in text.replace("\n", "")


@pytest.mark.parametrize("name", ["lr_50_legacy", "lr_50_mcore"])
def test_piped_a_run_prints_a_line_per_logged_step_and_its_ending_and_nothing_of_the_framework(canonical,
                                                                                             name: str) -> None:
    """Outside a terminal (the canonical lr-50 runs, piped, every other step of 60 logged, alerts from step 1):
    the output is msmon's, at most one line per logged step plus 30; every framework line is in console.log. The
    quickstarts use mindformers 1.9's checkpoint: section, so its console.log holds none of mindformers' deprecation
    warnings for the legacy checkpoint keys (before: 11 lines in each, "The config keep_checkpoint_max is deprecated.
    Please use config save_max in `checkpoint_config` instead.", ...)."""
    run = canonical(name)
    logged = len(run.records())
    lines = run.output.splitlines()
    assert framework_lines(run.output) == [] and len(lines) <= logged + 30, run.output
    assert sum(line.startswith("msmon: step ") for line in lines) == logged == 30
    console = (run.run_dir / "logs" / "console.log").read_text(encoding="utf-8")
    assert parse_step_lines(console) or "Traceback" not in console  # mcore logs its steps in another form
    assert run.info["framework_warnings"] == sum(level_of(line) == 30 for line in console.splitlines())
    assert [line for line in console.splitlines() if "is deprecated. Please use config" in line] == []


def test_an_interrupted_run_ends_with_the_command_that_continues_it(canonical) -> None:
    run = canonical("interrupted_legacy")
    resume = re.search(r"^\s+msmon resume (\S+)", run.output, re.M)
    assert resume and (run.cwd / resume.group(1)).resolve() == run.run_dir.resolve()


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
