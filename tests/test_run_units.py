"""Unit tests of the runner's logic: run directory, secrets, run.json, result aggregation, flag checks."""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path

import pytest
from helpers_checkpoints import iteration_tree
from helpers_training import write_quickstart_config

from msmon.errors import MsmonError
from msmon.launch_layout import LaunchLayout
from msmon.runner import msrun, results, rundir, runinfo
from msmon.runner.plan import RunRequest, prepare
from msmon.runner.protocol import ViewOptions, read_results
from msmon.runner.supervise import Supervisor
from msmon.status import RunStatus
from msmon.util.internal_errors import InternalErrors

REPO = Path(__file__).resolve().parents[1]


def test_only_one_of_many_concurrent_creators_gets_the_run_directory(tmp_path: Path) -> None:
    target = tmp_path / "save" / "project" / "run"
    outcomes: list[object] = []
    barrier = threading.Barrier(8)

    def create() -> None:
        barrier.wait()
        try:
            outcomes.append(rundir.create_run_dir(target))
        except MsmonError as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=create) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes.count(True) == 1
    assert sum(isinstance(o, MsmonError) and "already exists" in o.message for o in outcomes) == 7
    assert (target / "logs").is_dir()
    assert rundir.create_run_dir(target, resume=True) is False


def test_redact_keeps_environment_interpolations_and_masks_url_passwords() -> None:
    raw = {"token": "${oc.env:TOKEN}", "uri": "http://bob:${oc.env:PW}@host:5000", "name": "r_${now:%Y}",
           "plain": "https://alice:hunter2@example.org/x", "nested": {"k": "${env:K,1}"}, "list": ["${oc.env:A}", 3]}
    resolved = {"token": "s3cret", "uri": "http://bob:pw@host:5000", "name": "r_2026",
                "plain": "https://alice:hunter2@example.org/x", "nested": {"k": "v"}, "list": ["a", 3]}
    assert rundir.redact(resolved, raw) == {
        "token": "${oc.env:TOKEN}", "uri": "http://bob:${oc.env:PW}@host:5000", "name": "r_2026",
        "plain": "https://alice:***@example.org/x", "nested": {"k": "${env:K,1}"}, "list": ["${oc.env:A}", 3],
    }


def test_no_resolved_secret_reaches_the_run_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "tok-5b1f0c9e"
    monkeypatch.setenv("MSMON_TEST_SECRET", secret)
    monkeypatch.chdir(tmp_path)
    config = write_quickstart_config(
        tmp_path, steps=10, run_name="secret", monitor_type=["file", "mlflow"],
        mlflow={"tracking_uri": "http://bob:${oc.env:MSMON_TEST_SECRET}@127.0.0.1:5999"},
    )
    command = ["msmon", "run", str(config), "x.uri=http://eve:pass-9d2@h:1/"]
    result, plan = prepare(RunRequest(config=str(config), command=command))
    assert plan is not None, [f.message for f in result.findings]
    assert plan.settings.mlflow.tracking_uri == f"http://bob:{secret}@127.0.0.1:5999"  # resolved in memory
    run = Supervisor(plan, say=lambda line: None, view=ViewOptions())
    run.create()
    run.finish(RunStatus.COMPLETED, results.RankResults())
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert plan.run_dir / "monitor_config.resolved.yaml" in files
    for path in files:
        text = path.read_text(errors="replace")
        assert secret not in text and "pass-9d2" not in text, path
    info = json.loads((plan.run_dir / "run.json").read_text())
    assert info["command"][-1] == "x.uri=http://eve:***@h:1/"
    assert info["status"] == "completed" and info["exit_code"] == 0


def test_run_json_end_fields_and_status_check(tmp_path: Path) -> None:
    start = runinfo.started(
        config_path="c.yaml", project_name="p", run_name="r", run_dir=Path("/x/p/r"), command=["msmon"],
        device_target="CPU", device_count=1, total_steps=10, cwd=REPO, pid=1,
    )
    assert start.status is RunStatus.RUNNING and start.end_time is None
    assert start.git_commit is not None and len(start.git_commit) == 40
    _results(tmp_path, {"rank": 0, "status": "failed", "last_step": 5, "dropped_records": 2, "alert_count": 1,
                        "internal_errors": 1, "first_internal_error": "writer tick: E"})
    end = runinfo.finished(start, results.RankResults.read(tmp_path), status=RunStatus.FAILED, exit_code=3,
                           watcher_alerts=0, error="ValueError: x", internal=InternalErrors(), attempt_last_step=None)
    assert (end.status, end.exit_code, end.last_step, end.error) == ("failed", 3, 5, "ValueError: x")
    assert (end.internal_errors, end.first_internal_error) == (1, "writer tick: E")
    assert end.end_time is not None and start.start_time is not None and end.end_time >= start.start_time
    written = json.loads(json.dumps(end.to_json()))
    assert written["status"] == "failed" and "note" not in written and "rollbacks" not in written
    assert list(written)[:3] == ["msmon_version", "mindspore_version", "mindformers_version"]
    assert {"framework_warnings", "framework_errors", "backends", "records_lost"} <= set(written)
    assert "framework_warnings" not in start.to_json()  # written once the run ended


def test_git_commit_is_none_outside_a_repository(tmp_path: Path) -> None:
    assert runinfo.git_commit(tmp_path) is None




def _results(run_dir: Path, *rows: dict) -> None:
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    for row in rows:
        (run_dir / "logs" / f"rank_{row['rank']}.result.json").write_text(json.dumps(row))


@pytest.mark.parametrize(
    ("rows", "code", "expected"),
    [
        ([{"rank": 0, "status": "completed"}, {"rank": 1, "status": "completed"}], 0, ("completed", None)),
        ([{"rank": 0, "status": "completed"}, {"rank": 1, "status": "failed", "error": "E: x"}], 1,
         ("failed", "rank 1: E: x")),
        ([{"rank": 0, "status": "stopped_by_monitor", "error": "nonfinite"}, {"rank": 1, "status": "interrupted"}],
         0, ("stopped_by_monitor", "nonfinite")),
        ([{"rank": 0, "status": "completed"}], 1, ("failed", None)),
        ([{"rank": 0, "status": "completed"}], 0, ("failed", None)),
        # msrun of a second node on the scheduler's host exits 1 after its ranks completed: their results decide
        ([{"rank": 0, "status": "completed"}, {"rank": 1, "status": "completed"}], 1, ("completed", None)),
    ],
)
def test_rank_results_decide_the_run_status(tmp_path: Path, rows: list[dict], code: int, expected: tuple) -> None:
    _results(tmp_path, *rows)
    result = results.decide(read_results(tmp_path), returncode=code, ranks_here=[0, 1], distributed=True,
                            stop_requested=False, where=tmp_path)
    assert result.status == expected[0]
    if expected[1] is not None:
        assert result.error == expected[1]
    else:
        assert result.error is None or "without a result of rank 1" in result.error


def test_a_users_launch_that_trained_nothing_fails_unless_it_was_stopped(tmp_path: Path) -> None:
    kwargs = {"returncode": 0, "ranks_here": [], "distributed": False, "where": tmp_path, "untrained": "python"}
    failed = results.decide({}, stop_requested=False, **kwargs)
    assert failed.status is RunStatus.FAILED and failed.error.startswith("python exited with code 0 and no process")
    assert results.decide({}, stop_requested=True, **kwargs).status is RunStatus.INTERRUPTED


def test_a_training_process_killed_by_a_signal_says_which_through_the_ending(tmp_path: Path) -> None:
    """The signal that ended a training process without a result is typed (RunResult.killed_by), not read back
    from the error text: the run's Ending carries it to the chat's end message."""
    from msmon.runner.lifecycle import Lifecycle

    kwargs = {"ranks_here": [0], "distributed": False, "where": tmp_path, "stop_requested": False}
    killed = results.decide({}, returncode=-signal.SIGKILL, **kwargs)
    assert killed.status is RunStatus.FAILED and killed.killed_by == signal.SIGKILL and "code -9" in killed.error
    assert results.decide({}, returncode=1, **kwargs).killed_by is None  # a crash is no kill
    life = Lifecycle(max_restarts=0)
    life.begin_attempt()
    life.attempt_ended(killed, monitor_stop=None, progressed=True)
    assert life.ending().killed_by == signal.SIGKILL


def test_a_rank_that_began_a_step_an_ended_rank_never_takes_part_in_is_stranded() -> None:
    """After a stop, rank 1 ended at step 41 (its result written); rank 0 began step 42 and waits in its collective
    for rank 1: stranded (told to flush and exit). A rank still ending step 41 (saving its checkpoint), a rank that
    ended the step it began, and a heartbeat without a step are not; nothing is while no rank has ended."""
    from msmon.ops.ranks import rank_states
    from msmon.runner.training_process import stranded

    ended = {1: results.RankResult(1, RunStatus.INTERRUPTED, last_step=41)}
    beats = {0: {"begun": 42, "ended": 41}, 1: {"begun": 41, "ended": 41}, 2: {"begun": 41, "ended": 40},
             3: {"begun": 42, "ended": 42}, 4: {"state": "starting"}}
    states = rank_states(beats, 0.0)
    assert stranded(states, ended) == [0]
    assert stranded(states, {}) == []
    assert stranded(states, {1: results.RankResult(1, RunStatus.INTERRUPTED)}) == []  # it ended before a step


def test_totals_add_up_over_ranks(tmp_path: Path) -> None:
    _results(tmp_path, {"rank": 0, "status": "completed", "last_step": 40, "dropped_records": 2, "alert_count": 1},
             {"rank": 1, "status": "completed", "last_step": 40, "dropped_records": 0, "alert_count": 0,
              "internal_errors": 2, "first_internal_error": "writer tick: TypeError: x"})
    summed = results.totals(read_results(tmp_path))
    assert (summed.last_step, summed.dropped_records, summed.alert_count) == (40, 2, 1)
    assert summed.internal_errors == InternalErrors(2, "writer tick: TypeError: x")


def test_worker_commands() -> None:
    assert msrun.worker_command(LaunchLayout(), Path("/r"))[-2:] == ["-m", "msmon.runner.worker"]
    argv = msrun.worker_command(LaunchLayout(worker_num=8, local_worker_num=4, node_rank=1, master_addr="10.0.0.1"),
                                Path("/r"))
    assert "--worker_num=8" in argv and "--local_worker_num=4" in argv and "--node_rank=1" in argv
    assert "--master_addr=10.0.0.1" in argv and "--log_dir=/r/logs/ranks/node_1" in argv  # node 1's scheduler.log
    assert "--tail_worker_log=0" in argv
    argv = msrun.worker_command(LaunchLayout(worker_num=8), Path("/r"), tail_rank=6)
    assert "--log_dir=/r/logs/ranks" in argv and "--tail_worker_log=6" in argv
    assert argv[-3:] == ["python", "-m", "msmon.runner.worker"]
    passed = ("--bind_core=True", "--cluster_time_out=7200")
    argv = msrun.worker_command(LaunchLayout(worker_num=2, msrun_args=passed), Path("/r"))
    assert argv[-5:] == [*passed, "python", "-m", "msmon.runner.worker"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"worker_num": 0}, "at least 1"),
        ({"worker_num": 2, "local_worker_num": 3}, "between 1 and"),
        ({"worker_num": 4, "local_worker_num": 2}, "needs --node-rank"),
        ({"local_worker_num": 2}, "needs --worker-num"),
        ({"msrun_args": ("--bind_core=True",)}, "--msrun-arg needs --worker-num"),
        ({"worker_num": 2, "msrun_args": ("bind_core=True",)}, "is not an msrun flag"),
        ({"worker_num": 2, "msrun_args": ("--master_port=9000",)}, "--master_port is set by --master-port"),
        ({"worker_num": 2, "msrun_args": ("--log_dir=/tmp/x",)}, "--log_dir is set by msmon's logs/ranks"),
    ],
)
def test_flag_checks(kwargs: dict, message: str) -> None:
    with pytest.raises(MsmonError, match=message) as info:
        LaunchLayout(**kwargs).check()
    assert info.value.exit_code == 2


def test_node_ranks_above_zero_join_the_run_directory() -> None:
    node = [RunRequest(config="c", launch_layout=LaunchLayout(8, 4, node_rank=rank)) for rank in (1, 0)]
    assert [request.run_json for request in node] == ["run.node1.json", "run.json"]
    assert node[0].launch_layout.ranks_here == [4, 5, 6, 7] and node[1].launch_layout.ranks_here == [0, 1, 2, 3]
    assert RunRequest(config="c").run_json == "run.json"


def test_resume_reuses_the_run_directory_and_lists_the_attempts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = write_quickstart_config(tmp_path, steps=10, run_name="again")
    _, plan = prepare(RunRequest(config=str(config)))
    first = Supervisor(plan, say=lambda line: None, view=ViewOptions())
    first.create()
    first.finish(RunStatus.FAILED, results.RankResults(), error="E: boom")
    (plan.run_dir / "metrics.jsonl").write_text('{"step": 10}\n')
    refused, none = prepare(RunRequest(config=str(config)))
    assert none is None and any(f.code == "MS103" for f in refused.findings)
    with pytest.raises(MsmonError, match="already exists"):  # the atomic mkdir, should validation race
        Supervisor(plan, say=lambda line: None, view=ViewOptions()).create()
    iteration_tree(plan.run_dir, [10])  # the quickstart saves 1.9's layout
    result, resumed = prepare(RunRequest(config=str(config), resume=True))
    assert resumed is not None, [f.message for f in result.findings]
    second = Supervisor(resumed, say=lambda line: None, view=ViewOptions())
    second.create()
    second.finish(RunStatus.COMPLETED, results.RankResults())
    info = json.loads((plan.run_dir / "run.json").read_text())
    assert [(a["status"], a["error"]) for a in info["attempts"]] == [("failed", "E: boom"), ("completed", None)]
    assert info["status"] == "completed"
    assert (plan.run_dir / "metrics.jsonl").read_text() == '{"step": 10}\n'


def test_a_process_ended_by_exit_now_joins_its_threads_runs_its_atexit_handlers_and_flushes(tmp_path: Path) -> None:
    """A real child: a non-daemon thread still writing, an atexit handler and buffered output all finish before
    the exit code is the one given (the training process's end, msmon.util.procs.exit_now); an idle thread pool
    (its workers are non-daemon threads that wait for work) does not hold the process."""
    import subprocess
    import sys

    script = f"""
import atexit, concurrent.futures, threading, time
from pathlib import Path
from msmon.util.procs import exit_now
out = Path({str(tmp_path)!r})
pool = concurrent.futures.ThreadPoolExecutor(2)
pool.submit(int).result()
def late():  # still running when exit_now begins: it writes once the main thread has begun the exit
    while threading.main_thread().is_alive():
        time.sleep(0.01)
    (out / "thread").write_text("joined")
threading.Thread(target=late).start()
atexit.register(lambda: (out / "atexit").write_text("ran"))
print("buffered", end="")
exit_now(7)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (7, "buffered"), done.stderr
    assert (tmp_path / "thread").read_text() == "joined" and (tmp_path / "atexit").read_text() == "ran"
