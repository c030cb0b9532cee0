"""The typed boundary between `msmon run` and its ranks, the one status-to-exit-code map, and msmon's own errors:
never silent, counted from a rank's result up to run.json and the ending."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from engine_support import settings
from helpers_training import write_quickstart_config

from msmon.config.loader import QUICKSTARTS_DIR
from msmon.engine.session import MonitorSession
from msmon.errors import ExitCode
from msmon.runner.plan import RunRequest, prepare
from msmon.runner.protocol import (
    SPEC_ENV,
    BackendAccounting,
    RankResult,
    RankSpec,
    SpecError,
    ViewOptions,
    read_results,
    write_result,
)
from msmon.runner.results import RankResults
from msmon.runner.supervise import Supervisor
from msmon.status import Attempt, RunStatus, exit_code, rank_exit_code
from msmon.util import internal_errors
from msmon.validate.validator import validate_config
from msmon.view.ending import summary_lines
from msmon.view.series import load_run


@pytest.fixture(autouse=True)
def fresh_counts() -> None:
    internal_errors.forget()


@pytest.mark.parametrize("config", sorted(QUICKSTARTS_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_a_spec_crosses_the_environment_unchanged(config: Path) -> None:
    resolved = validate_config(config).settings
    spec = RankSpec(Path("/runs/p/r"), resolved, Attempt(3, 40), world_size=2, writer_rank=1, node_rank=0,
                    view=ViewOptions(plain=True, total_steps=400))
    env = spec.to_env()
    assert list(env) == [SPEC_ENV]
    assert RankSpec.from_env(env) == spec
    machine = dataclasses.replace(spec, heartbeat_dir=Path("/scratch/hb/ab-node1"))  # several machines
    assert RankSpec.from_env(machine.to_env()) == machine


@pytest.mark.parametrize(("value", "says"), [
    (None, "is not set"), ("{", "not a spec of this msmon"), ('{"run_dir": "/x"}', "not a spec of this msmon"),
])
def test_a_missing_or_foreign_spec_is_refused(value: str | None, says: str) -> None:
    with pytest.raises(SpecError, match=says):
        RankSpec.from_env({} if value is None else {SPEC_ENV: value})


def test_a_worker_without_a_spec_exits_2_with_one_line() -> None:
    env = {k: v for k, v in os.environ.items() if k != SPEC_ENV}
    done = subprocess.run([sys.executable, "-m", "msmon.runner.worker"], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == ExitCode.USAGE
    assert done.stderr.strip().splitlines() == [f"msmon worker: {SPEC_ENV} is not set (this process is started by "
                                                "`msmon run`)"]


def test_a_result_file_round_trips_and_a_foreign_one_is_skipped(tmp_path: Path) -> None:
    result = RankResult(1, RunStatus.STOPPED_BY_MONITOR, "stall", last_step=30, dropped_records=2, alert_count=1,
                        pid=7, accounting=BackendAccounting({"file": {"written": 3}}, 0, ("mlflow",)),
                        internal_errors=internal_errors.InternalErrors(2, "writer tick: TypeError: x"))
    write_result(tmp_path, result)
    (tmp_path / "logs" / "rank_2.result.json").write_text(json.dumps({"rank": 2, "status": "done"}))
    assert read_results(tmp_path) == {1: result}


def test_each_status_has_one_exit_code() -> None:
    assert [exit_code(s) for s in RunStatus if s is not RunStatus.RUNNING] == [0, 3, 130, 4]
    assert exit_code(RunStatus.INTERRUPTED, 15) == ExitCode.INTERRUPTED_SIGTERM
    assert [rank_exit_code(s) for s in (RunStatus.FAILED, RunStatus.INTERRUPTED)] == [3, 0]
    with pytest.raises(ValueError):
        exit_code(RunStatus.RUNNING)
    assert RunStatus.parse("completed") is RunStatus.COMPLETED and RunStatus.parse("done") is None


def test_a_broken_part_of_the_session_warns_once_with_its_traceback_and_is_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    s = settings(tmp_path)
    session = MonitorSession(s, s.run_dir())
    session.disk_guard.interval_s = 0.0

    def broken() -> str | None:
        raise TypeError("unsupported operand type(s) for -: 'NoneType' and 'int'")

    session.disk_guard.check = broken  # type: ignore[method-assign]
    caplog.set_level(logging.INFO, logger="msmon")
    session.start()
    deadline = time.monotonic() + 60
    while internal_errors.seen().count < 2 and time.monotonic() < deadline:  # the writer's cycles, again and again
        session.writer.put({"step": 1, "time": time.time(), "loss": 1.0})
        time.sleep(0.1)
    session.close(RunStatus.COMPLETED)
    seen = internal_errors.seen()
    assert seen.count >= 2 and seen.first is not None and seen.first.startswith("listener DiskGuard.on_status")
    said = "internal error in listener DiskGuard.on_status"
    lines = [r for r in caplog.records if said in r.getMessage() and not getattr(r, "file_only", False)]
    assert [r.levelno for r in lines] == [logging.WARNING]  # once, however often it failed
    tracebacks = [r for r in caplog.records if getattr(r, "file_only", False)]
    assert len(tracebacks) == 1 and "Traceback" in tracebacks[0].getMessage()
    assert "TypeError: unsupported operand" in tracebacks[0].getMessage()


def test_run_json_and_the_ending_count_the_ranks_internal_errors(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = write_quickstart_config(tmp_path, steps=10, run_name="counted")
    _, plan = prepare(RunRequest(config=str(config)))
    assert plan is not None
    run = Supervisor(plan, say=lambda line: None, view=ViewOptions())
    run.create()
    write_result(plan.run_dir, RankResult(0, RunStatus.COMPLETED, last_step=10, internal_errors=(
        internal_errors.InternalErrors(3, "listener LiveView.on_record: KeyError: 'loss'"))))
    internal_errors.report("the rank watcher", RuntimeError("boom"))
    run.finish(RunStatus.COMPLETED, RankResults.read(plan.run_dir))  # the attempt's results, read once
    info = json.loads((plan.run_dir / "run.json").read_text())
    assert (info["internal_errors"], info["first_internal_error"]) == (4, "the rank watcher: RuntimeError: boom")
    assert info["attempts"][-1]["internal_errors"] == 4
    ending = "\n".join(summary_lines(load_run(plan.run_dir)))
    assert "msmon internal errors: 4" in ending and "the rank watcher: RuntimeError: boom" in ending


def test_a_spec_is_frozen() -> None:
    spec = RankSpec(Path("/r"), settings(Path("/s")), Attempt(1))
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.world_size = 2  # type: ignore[misc]
