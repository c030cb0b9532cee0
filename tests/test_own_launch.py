"""`msmon run CONFIG -- COMMAND`: the user's own launch, monitored without a line of it changing.

tests/launches/train_with_mindformers.py trains as users' scripts do (MindFormerConfig(path), the context,
Trainer(config).train(); no msmon import). Under `msmon run CONFIG -- python script.py --config CONFIG` it gives the
records and the health alert of the native form's canonical run of the same config (the dead network stopped by
`dead_series`, exit 4), MindInsight scalars equal to its records, and msmon's loss is mindformers' printed loss.
A COMMAND that cannot start is refused before anything is created; one that exits at once or trains no Trainer
ends with a one-line error, exit 3 and a final run.json, nothing left running.
"""

from __future__ import annotations

import json
import math
import re
import signal
import sys
import time
from pathlib import Path

import pytest
import yaml
from canonical import QUICKSTARTS, STALL, registered
from engine_support import summary_scalars
from helpers_ranks import DATA_PARALLEL, RankRun, processes_of
from helpers_training import parse_step_lines, write_quickstart_config
from launch import Launched, msmon_env, records

from msmon.runner.injected import ACTIVE_LINE
from msmon.util.net import free_port

SCRIPT = Path(__file__).resolve().parent / "launches" / "train_with_mindformers.py"


@pytest.mark.training
def test_a_users_script_under_msmon_gives_the_native_records_alerts_and_printed_loss(canonical, tmp_path: Path
                                                                                     ) -> None:
    native = canonical("diverged_stop_legacy")
    save_dir = tmp_path / "monitor_logs"
    overrides = [f"monitor_config.save_dir={save_dir}", "monitor_config.run_name=own",
                 "monitor_config.monitor_type=[file,mindinsight]", "monitor_config.health.alerts.webhook_url=null",
                 "monitor_config.health.alerts.command=null"]  # the canonical run's hooks stay its own
    run = Launched.start(tmp_path, "run", str(native.config), *overrides, "--plain", "--",
                         sys.executable, str(SCRIPT), "--config", str(native.config),
                         env=msmon_env(tmp_path), cwd=tmp_path)
    assert run.finish() == 4, run.stderr[-3000:]
    run_dir = save_dir / native.run_dir.parent.name / "own"
    info = json.loads((run_dir / "run.json").read_text())
    assert (info["launch"], info["status"], info["exit_code"]) == ("command", "stopped_by_monitor", 4)
    assert info["command"][-4:] == [sys.executable, str(SCRIPT), "--config", str(native.config)]
    launched = next(line for line in (run_dir / "logs" / "msmon.log").read_text().splitlines() if "launching" in line)
    assert launched.endswith(f"{SCRIPT} --config {run_dir / 'mindformers.yaml'}")  # CONFIG swapped
    assert ACTIVE_LINE in (run_dir / "logs" / "msmon.log").read_text()
    alerts, expected = records(run_dir, "alerts.jsonl"), native.alerts()
    assert [(a["detector"], a["step"]) for a in alerts] == [(a["detector"], a["step"]) for a in expected]
    rows = records(run_dir)
    last = alerts[0]["step"]
    native_rows = {r["step"]: r for r in native.records() if r["step"] <= last}
    assert [r["step"] for r in rows if r["step"] <= last] == sorted(native_rows)
    for row in rows:
        if row["step"] <= last:
            assert row["loss"] == pytest.approx(native_rows[row["step"]]["loss"], abs=1e-6)
    # mindformers' own log stays where the user's launch puts it (./output), not in the run directory
    printed = parse_step_lines((tmp_path / "output" / "log" / "rank_0" / "info.log").read_text(errors="replace"))
    scalars = summary_scalars(run_dir)
    for row in rows:
        assert row["loss"] == pytest.approx(printed[row["step"]]["loss"], abs=1e-5)
        assert scalars[row["step"]]["loss"] == pytest.approx(row["loss"], rel=1e-6)
    assert processes_of(run_dir) == []


@pytest.mark.training
def test_the_mcore_quickstart_under_a_script_with_its_own_config_copy_records_mindformers_printed_loss(
        tmp_path: Path) -> None:
    """The mcore (Qwen3) path, COMMAND naming no CONFIG (the script's own copy, msmon's keys in it): the Trainer still
    gets a config without them (mindformers refuses an unknown monitor_config key) and the user's file is not
    touched; the hook puts msmon's CPU stand-ins in place before the user's Trainer builds its network, as the
    native form does; msmon's loss is the loss mindformers printed."""
    config = write_quickstart_config(tmp_path, steps=20, run_name="mcore", log_interval=5, monitor_type=["file"],
                                     source=QUICKSTARTS["mcore"])
    exported = tmp_path / "exported.yaml"
    assert Launched.start(tmp_path, "export", str(config), "-o", str(exported), name="export").finish() == 0
    data = yaml.safe_load(config.read_text())
    loader = data["train_dataset"]["data_loader"]
    loader["dataset_dir"] = yaml.safe_load(exported.read_text())["train_dataset"]["data_loader"]["dataset_dir"]
    copy = tmp_path / "own_copy.yaml"
    copy.write_text(yaml.safe_dump(data))
    before = copy.read_text()
    assert "log_interval" in data["monitor_config"]  # msmon's keys are in the script's config
    run = Launched.start(tmp_path, "run", str(config), "--plain", "--", sys.executable, str(SCRIPT), "--config",
                         str(copy), env=msmon_env(tmp_path), cwd=tmp_path)
    assert run.finish() == 0, run.stderr[-3000:]
    assert copy.read_text() == before
    rows = records(tmp_path / "monitor_logs" / "quickstart_qwen3" / "mcore")
    printed = parse_step_lines((tmp_path / "output" / "log" / "rank_0" / "info.log").read_text(errors="replace"))
    assert [r["step"] for r in rows] == [5, 10, 15, 20]
    for row in rows:
        assert row["loss"] == pytest.approx(printed[row["step"]]["loss"], abs=1e-5)


@pytest.mark.parametrize(("command", "says"), [
    (["no-such-program-3f1"], "error: command not found: no-such-program-3f1"),
    ([str(SCRIPT)], f"error: command not executable: {SCRIPT}"),
])
def test_a_command_that_cannot_start_is_refused_before_anything_is_created(tmp_path: Path, command: list[str],
                                                                           says: str) -> None:
    config = write_quickstart_config(tmp_path, steps=10, run_name="never")
    run = Launched.start(tmp_path, "run", str(config), "--", *command, env=msmon_env(tmp_path), cwd=tmp_path)
    assert run.finish() == 1
    assert run.stderr.strip().splitlines()[-1].startswith(says), run.stderr
    assert not (tmp_path / "monitor_logs").exists()


@pytest.mark.parametrize(("command", "says"), [
    ([sys.executable, "-c", "raise SystemExit(7)"], "exited with code 7 and no process it started trained"),
    ([sys.executable, "-c", "print('no trainer here')"], "exited with code 0 and no process it started trained"),
])
def test_a_command_that_trains_no_trainer_fails_with_one_line_and_a_final_run_json(
    tmp_path: Path, command: list[str], says: str
) -> None:
    config = write_quickstart_config(tmp_path, steps=10, run_name="idle")
    run = Launched.start(tmp_path, "run", str(config), "--", *command, env=msmon_env(tmp_path), cwd=tmp_path)
    assert run.finish() == 3
    assert says in run.stderr and "Traceback" not in run.stderr
    run_dir = tmp_path / "monitor_logs" / "quickstart" / "idle"
    info = json.loads((run_dir / "run.json").read_text())
    assert (info["status"], info["exit_code"], info["launch"]) == ("failed", 3, "command")
    assert says in info["error"] and info["end_time"] is not None
    assert processes_of(run_dir) == []


@pytest.mark.parametrize(("args", "says"), [
    (["--"], "nothing after `--`"),
    (["--worker-num", "2", "--", sys.executable, "x.py"], "--worker-num and --msrun-arg describe msmon's own launch"),
])
def test_usage_errors_of_the_separator(tmp_path: Path, args: list[str], says: str) -> None:
    config = write_quickstart_config(tmp_path, steps=10, run_name="empty")
    run = Launched.start(tmp_path, "run", str(config), *args, env=msmon_env(tmp_path), cwd=tmp_path)
    assert run.finish() == 2 and says in run.stderr
    assert not (tmp_path / "monitor_logs").exists()


@pytest.mark.training
def test_an_msrun_command_has_every_rank_watched_and_sigint_ends_everything(tmp_path: Path) -> None:
    """`msmon run CONFIG -- msrun --worker_num=2 ... script.py --config CONFIG` on CPU, the ranks known from their
    heartbeats only. Rank 1's loss turns NaN at step 12 (named at its logging step 15, rank 0 stays finite), then rank
    1 waits in a callback at step 20 while rank 0 waits in the collective: one stall alert with rank 1's frame and
    stack file. SIGINT: exit 130, every rank interrupted, run.json final, nothing left; the ending names
    `msmon status`. (A rank frozen with SIGSTOP: test_run_ranks.py, on the same watcher.)"""
    release = tmp_path / "release"
    sleeper = registered("SleepOnRank", rank=1, step=20, seconds=300.0, release=str(release))
    command = [str(Path(sys.executable).parent / "msrun"), "--worker_num=2", "--local_worker_num=2",
               f"--master_port={free_port('127.0.0.1')}", f"--log_dir={tmp_path / 'msrun_logs'}", "--join=True",
               str(SCRIPT), "--config", str(tmp_path / "quickstart.yaml")]
    run = RankRun.start(tmp_path, steps=400, health={"stall": STALL}, flags=[*DATA_PARALLEL, "--", *command],
                        callbacks=[registered("NanLossOnRank", rank=1, step=12), sleeper])
    try:
        raised = run.wait_for(lambda: any(a["detector"] == "stall" for a in run.alerts()), timeout_s=400)
        sent = time.monotonic()
        run.proc.send_signal(signal.SIGINT)
        release.write_text("")
        assert run.finish(150) == 130, run.stderr[-3000:]
        print(f"measured: SIGINT to exit {time.monotonic() - sent:.1f} s")  # docs/run.md (pytest -s)
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    nonfinite, stall = run.alerts()
    assert nonfinite["detector"] == "nonfinite" and nonfinite["message"].startswith("rank 1: loss is NaN")
    assert nonfinite["values"]["rank"] == 1 and nonfinite["step"] == 15  # rank 1's first logging step with it
    assert "HEALTH ALERT [critical] step 15 nonfinite: rank 1: loss is NaN" in run.stderr
    assert all(math.isfinite(r["loss"]) for r in records(run.run_dir))  # rank 0 stayed finite
    assert stall["detector"] == "stall" and stall["step"] == 20 and stall["values"]["stuck_ranks"] == [1]
    assert "rank 1 is still in step 20 (others ended it" in stall["message"]
    assert raised - stall["values"]["last_step_time"] <= STALL["timeout_s"] + 5.0
    frame = stall["values"]["frame"]
    assert "rank_callbacks.py" in frame and frame.endswith("in on_train_step_end")
    assert stall["values"]["stack_file"] == "stacks/rank_1.txt"
    stack = (run.run_dir / "stacks" / "rank_1.txt").read_text()
    assert "on_train_step_end" in stack and "rank_callbacks.py" in stack
    info = json.loads((run.run_dir / "run.json").read_text())
    assert (info["status"], info["exit_code"], info["launch"], info["device_count"]) == ("interrupted", 130,
                                                                                         "command", 2)
    assert info["end_time"] is not None and info["alert_count"] == 2
    for rank in (0, 1):
        assert json.loads((run.run_dir / "logs" / f"rank_{rank}.result.json").read_text())["status"] == "interrupted"
    assert re.search(r"^\s+msmon status \S+", run.stderr, re.M), run.stderr[-2000:]  # the ending's next command
    assert processes_of(run.run_dir) == []
