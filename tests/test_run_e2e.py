"""`msmon run` end to end on the canonical completed runs (tests/canonical.py) of both quickstarts: the real
mindformers Trainer in a child process, its run directory, what it printed, the board it kept beside it."""

from __future__ import annotations

import json
import math
import re

import pytest
from helpers_training import mindformers_step_lines

from msmon.compat import installed_versions

pytestmark = pytest.mark.compat_smoke

MODELS = ["legacy", "mcore"]
#: MFLossMonitor's line: ``{ Epoch:[  1/  1], step:[   10/   60], loss:[6.123456/6.5], ...`` (sink mode: ``loss: x``)
MF_STEP_LINE = re.compile(r"step:\[\s*(\d+)/\s*\d+\], loss:\s*\[?\s*([-+\w.]+)")


@pytest.fixture(params=MODELS)
def completed(request: pytest.FixtureRequest, canonical):
    return canonical(f"completed_{request.param}")


def test_run_completes_with_metrics_for_every_logged_step(completed) -> None:
    assert completed.code == 0, completed.output[-3000:]
    rows = completed.records()
    assert [row["step"] for row in rows] == list(range(completed.log_interval, completed.steps + 1,
                                                       completed.log_interval))
    for name in ("loss", "grad_norm", "learning_rate", "throughput", "global_step"):
        assert all(name in row for row in rows), name
    losses = [row["loss"] for row in rows]
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0] - 0.1, losses
    assert "run completed (exit 0" in completed.output


def test_run_json_says_what_ran_and_how_it_ended(completed) -> None:
    info = completed.info
    assert info["status"] == "completed" and info["exit_code"] == 0 and info["error"] is None
    assert info["last_step"] == completed.steps and info["alert_count"] == len(completed.alerts())
    assert info["run_name"] == completed.name and info["project_name"] == "canonical"
    assert info["run_dir"] == str(completed.run_dir) and info["cwd"] == str(completed.cwd)
    assert info["device_target"] == "CPU" and info["device_count"] == 1
    versions = installed_versions(["mindspore", "mindformers"])
    assert info["mindspore_version"] == versions["mindspore"] and info["mindformers_version"] == versions["mindformers"]
    assert info["python_version"].startswith("3.11")
    assert info["command"][:2] == ["msmon", "run"] and info["config_path"] == str(completed.config)
    assert info["dropped_records"] == 0 and info["records_lost"] == 0
    assert info["start_time"] <= info["end_time"]
    assert set(info) >= {"host", "pid", "git_commit", "total_steps"}
    grow_from = completed.extra.get("grow_from")
    if grow_from is None:  # a clean run raises nothing
        assert not (completed.run_dir / "alerts.jsonl").exists() and "HEALTH ALERT" not in completed.output
    else:  # nothing while it is clean; then only the growth of block 1's gradients
        assert {(a["detector"], a["step"] > grow_from) for a in completed.alerts()} == {("grad_explosion", True)}


def test_snapshot_is_the_config_as_written_and_nothing_leaks_into_the_cwd(completed) -> None:
    run_dir = completed.run_dir
    assert (run_dir / "config.yaml").read_bytes() == completed.config.read_bytes()
    assert "${msmon_dataset:" in (run_dir / "config.yaml").read_text()
    resolved = (run_dir / "monitor_config.resolved.yaml").read_text()
    assert f"run_name: {completed.name}" in resolved and f"log_interval: {completed.log_interval}" in resolved
    assert (run_dir / "logs" / "msmon.log").is_file()
    assert (run_dir / "logs" / "output" / "log" / "rank_0" / "info.log").is_file()
    # mindformers' ./output, MindSpore's rank_0/ and msmon's backups stay out of the working directory
    assert {p.name for p in completed.cwd.iterdir()} <= {".git", "README", "configs", "monitor_logs"}
    assert (completed.config.parent / "monitor_config_backup").is_dir()  # the backup sits beside the config


def test_the_report_was_written_at_the_end(completed) -> None:
    report = completed.run_dir / "report.html"
    assert report.is_file() and "completed" in report.read_text()
    assert f"report: {report}" in completed.output


def test_the_kept_board_was_recorded_listed_and_stopped_without_a_process_left(canonical) -> None:
    run = canonical("completed_legacy")
    board = run.extra["board"]
    assert "board kept running: http://127.0.0.1:" in run.output
    (status,) = board["status"]  # `msmon board status --json` after the run
    assert status["state"] == "healthy" and status["directory"] == str(run.run_dir.parent)
    assert any(job["train_id"] == f"./{run.name}" and "loss/scalar" in job["plugins"]["scalar"]
               for job in board["jobs"])
    assert board["stop_code"] == 0 and "stopped the mindinsight board on port" in board["stop_output"]
    assert board["left_in_group"] == []


def test_runs_and_backup_config_show_the_run(canonical) -> None:
    from conftest import run_msmon

    run = canonical("completed_legacy")
    table = run_msmon("runs", str(run.run_dir.parent.parent), "--json")
    row = next(r for r in json.loads(table.stdout) if r["run"] == run.name)
    assert (row["project"], row["status"], row["last_step"]) == ("canonical", "completed", run.steps)
    assert isinstance(row["last_loss"], float)
    listing = run_msmon("backup-config", "list", str(run.config), env={"MSMON_HOME": str(run.config.parent / "home")})
    assert f"msmon run {run.name}" in listing.stdout, listing.stdout + listing.stderr


def test_the_board_beside_the_run_served_the_same_loss_values_as_metrics_jsonl(canonical) -> None:
    run = canonical("completed_legacy")
    expected = {row["step"]: row["loss"] for row in run.records()}
    served = {int(step): value for step, value in run.extra["board"]["loss"].items()}
    assert sorted(served) == sorted(expected)
    for step, value in expected.items():
        assert served[step] == pytest.approx(value, rel=1e-6)


def test_metrics_equal_the_values_mindformers_itself_logged(completed) -> None:
    """msmon's loss, grad norm and learning rate at each logged step are the values MFLossMonitor printed into
    mindformers' own log (both model paths)."""
    run_dir = completed.run_dir
    text = (run_dir / "logs" / "output" / "log" / "rank_0" / "info.log").read_text(encoding="utf-8", errors="replace")
    logged = {int(step): float(loss) for step, loss in MF_STEP_LINE.findall(text)}
    assert sorted(logged) == list(range(1, completed.steps + 1)), sorted(logged)[:5]
    rows = completed.records()
    for row in rows:  # mindformers prints 6 decimals
        assert row["loss"] == pytest.approx(logged[row["step"]], abs=5e-7), row["step"]
    printed = mindformers_step_lines(run_dir)
    for row in rows:  # grad norm and learning rate printed with 8 and 7 significant digits
        for name in ("grad_norm", "learning_rate"):
            assert row[name] == pytest.approx(printed[row["step"]][name], rel=2e-6, abs=2e-9), (row["step"], name)


def test_a_dense_model_records_no_loss_parts_and_checkpoints_stay_inside_the_run(completed) -> None:
    rows = completed.records()
    assert not any(key.startswith("loss_") and key not in ("loss_mean", "loss_scale") for row in rows for key in row)
    from msmon.runner.checkpoints import saved_checkpoints

    saved = saved_checkpoints(completed.run_dir)  # the quickstarts save 1.9's iteration_<step>/ directories
    assert sorted(step for step, _ in saved) == [100, 200], saved  # every 100 steps, in the run directory
    assert all(path.is_relative_to(completed.run_dir / "logs" / "output" / "checkpoint") for _, path in saved)


def test_the_live_panel_showed_on_the_terminal_and_the_framework_lines_stayed_in_the_log(canonical) -> None:
    run = canonical("completed_legacy")
    out = run.output
    assert "╭─ msmon" in out and f"step {run.steps}/{run.steps}" in out and "100.0%" in out
    assert "step:[" not in out and "ParallelConfig" not in out  # mindformers' INFO lines and dumps: not on screen
    assert "Training Over" not in out and "Training Over" in (run.run_dir / "logs" / "console.log").read_text()
    assert "heartbeat" in out and "dropped records 0" in out
    assert f"msmon: the framework's output is in {run.run_dir / 'logs' / 'console.log'}" in out
    assert not re.search(r"msmon: step \d+/\d+", out)  # the panel, no plain progress lines
    console = mindformers_step_lines(run.run_dir)
    assert sorted(console) == list(range(1, run.steps + 1))  # every step line still went to mindformers' log


def test_the_ending_says_what_happened_and_names_the_next_commands(canonical) -> None:
    run = canonical("completed_legacy")
    out = run.output
    assert "run completed (exit 0; run directory" in out
    assert f"{run.steps} of {run.steps} steps" in out and "loss " in out and "alerts: none" in out
    assert "msmon board start monitor_logs/canonical" in out  # (--report wrote the report: no command for it)
    assert "msmon status" not in out  # a completed run of one rank needs no look at its ranks


def test_plain_output_is_a_line_per_logged_step_and_the_framework_output_is_in_its_log(canonical) -> None:
    """Without a terminal msmon prints one plain line per logged step on stdout (verbose mode: its verbose line
    instead, never both); mindformers' output, every line of it, is in the run's console.log."""
    from helpers_training import parse_step_lines

    run = canonical("diverged_stop_legacy")
    last = run.records()[-1]["step"]
    assert not parse_step_lines(run.stdout + run.stderr)
    assert set(range(1, last + 1)) <= set(parse_step_lines((run.run_dir / "logs" / "console.log").read_text()))
    plain = [line for line in run.stdout.splitlines() if line.startswith("msmon: step ")]
    assert [int(line.split()[2].split("/")[0]) for line in plain] == [r["step"] for r in run.records()]
    assert plain[-1].startswith(f"msmon: step {last}/{run.steps}  loss ")
    assert "next:" in run.stderr and "╭" not in run.stdout and "\x1b[" not in run.stdout


def test_the_records_json_lines_are_complete(completed) -> None:
    text = (completed.run_dir / "metrics.jsonl").read_text()
    assert text.endswith("\n") and all(json.loads(line) for line in text.splitlines())
