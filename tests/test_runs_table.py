"""`msmon runs`: statuses (stale rule included), last loss, alerts, robustness to broken run directories."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from helpers_ranks import rank_heartbeat

from msmon.ops.runs import list_runs
from msmon.util.atomic import atomic_write_json

NOW = time.time()


def iso(seconds_ago: float) -> str:
    return (datetime.now().astimezone() - timedelta(seconds=seconds_ago)).isoformat()


def make_run(save: Path, project: str, run: str, status: str = "completed", started_ago: float = 3600,
             ended_ago: float | None = 60, heartbeat: dict[str, Any] | None = None, losses: tuple = (2.0, 1.5),
             alerts: int = 0, **extra: Any) -> Path:
    """A run directory as `msmon run` writes it (docs/architecture.md formats)."""
    path = save / project / run
    path.mkdir(parents=True)
    info = {"project_name": project, "run_name": run, "status": status, "start_time": iso(started_ago),
            "end_time": iso(ended_ago) if ended_ago is not None else None, "last_step": 10 * len(losses),
            "host": socket.gethostname(), "pid": os.getpid(), "alert_count": alerts, **extra}
    (path / "run.json").write_text(json.dumps(info))
    lines = [json.dumps({"step": 10 * (i + 1), "time": NOW, "loss": v}) for i, v in enumerate(losses)]
    (path / "metrics.jsonl").write_text("\n".join([*lines, json.dumps({"step": 99, "time": NOW})]) + "\n")
    (path / "alerts.jsonl").write_text("".join(json.dumps({"step": 1, "detector": "x"}) + "\n" for _ in range(alerts)))
    if heartbeat is not None:
        rank_heartbeat(path, heartbeat)
    return path


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture
def save(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path / "monitor_logs"


def by_run(save: Path, **kwargs: Any) -> dict[str, Any]:
    return {r.run: r for r in list_runs(save, **kwargs)}


def test_statuses_and_fields(save: Path) -> None:
    host = socket.gethostname()
    make_run(save, "p", "done", losses=(3.0, 2.5, 1.25), alerts=2)
    make_run(save, "p", "bad", status="failed", error="boom")
    make_run(save, "p", "stopped", status="stopped_by_monitor")
    make_run(save, "p", "ctrl_c", status="interrupted")
    make_run(save, "p", "live", status="running", started_ago=1, ended_ago=None,  # not before this process
             heartbeat={"step": 140, "time": time.time() - 2, "pid": os.getpid(), "rank": 0, "host": host})
    make_run(save, "q", "dead", status="running", ended_ago=None,
             heartbeat={"step": 20, "time": time.time() - 2, "pid": dead_pid(), "rank": 0, "host": host})
    make_run(save, "q", "remote_old", status="running", ended_ago=None, host="elsewhere",
             heartbeat={"step": 20, "time": time.time() - 3600, "pid": 1, "rank": 0, "host": "elsewhere"})
    make_run(save, "q", "remote_fresh", status="running", ended_ago=None, host="elsewhere",
             heartbeat={"step": 20, "time": time.time() - 5, "pid": 1, "rank": 0, "host": "elsewhere"})
    runs = by_run(save)
    assert {k: v.status for k, v in runs.items()} == {
        "done": "completed", "bad": "failed", "stopped": "stopped_by_monitor", "ctrl_c": "interrupted",
        "live": "running", "dead": "stale", "remote_old": "stale", "remote_fresh": "running",
    }
    done = runs["done"]
    assert (done.project, done.last_loss, done.last_step, done.alert_count) == ("p", 1.25, 99, 2)
    assert done.duration_s == pytest.approx(3540, abs=2)
    assert runs["live"].last_step == 140 and runs["live"].heartbeat_age_s == pytest.approx(2, abs=2)
    assert runs["live"].duration_s == pytest.approx(1, abs=3)
    assert by_run(save, stale_after_s=7200)["remote_old"].status == "running"


def test_reused_pid_is_not_the_run(save: Path) -> None:
    # our own pid is alive, but it started long after this run did: a reused pid, so the run is stale
    make_run(save, "p", "old", status="running", started_ago=10 * 86400, ended_ago=None,
             heartbeat={"step": 1, "time": time.time() - 9 * 86400, "pid": os.getpid(), "rank": 0,
                        "host": socket.gethostname()})
    assert by_run(save)["old"].status == "stale"


def test_half_written_and_missing_files_never_raise(save: Path) -> None:
    make_run(save, "p", "ok")
    torn = make_run(save, "p", "torn", status="running", ended_ago=None)
    (torn / "run.json").write_text('{"status": "runn')
    (torn / "heartbeats").mkdir()
    (torn / "heartbeats" / "rank_0.json").write_text("")
    with open(torn / "metrics.jsonl", "a") as handle:
        handle.write('{"step": 120, "loss": 0.')
    (save / "p" / "only_metrics").mkdir()
    (save / "p" / "only_metrics" / "metrics.jsonl").write_text('{"step": 5, "loss": NaN}\n')
    (save / "p" / "empty").mkdir()
    (save / "p" / "binary").mkdir()
    (save / "p" / "binary" / "run.json").write_bytes(b"\xff\x00\x01")
    (save / "p" / "list").mkdir()
    (save / "p" / "list" / "run.json").write_text("[1, 2]")
    runs = by_run(save)
    assert set(runs) == {"ok", "torn", "only_metrics", "binary", "list"}  # `empty` is not a run
    assert runs["torn"].status == "unknown" and "run.json unreadable" in runs["torn"].problems
    assert runs["torn"].last_loss == 1.5  # the last complete line with a loss
    assert runs["only_metrics"].status == "unknown" and runs["only_metrics"].last_step == 5
    assert runs["only_metrics"].to_json()["last_loss"] == "nan"
    result = subprocess.run([sys.executable, "-m", "msmon", "runs", str(save), "--json"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert {r["run"] for r in json.loads(result.stdout)} == set(runs)


def test_cli_table_and_errors(save: Path) -> None:
    make_run(save, "p", "done", losses=(0.5,), alerts=3)
    make_run(save, "p", "dead", status="running", ended_ago=None,
             heartbeat={"step": 20, "time": time.time() - 700, "pid": dead_pid(), "rank": 0,
                        "host": socket.gethostname()})
    env = {**os.environ, "NO_COLOR": "1"}
    result = subprocess.run([sys.executable, "-m", "msmon", "runs", str(save)], capture_output=True, text=True,
                            env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.strip().splitlines()
    assert header.split() == ["project", "run", "status", "start", "duration", "step", "loss", "alerts", "heartbeat",
                              "ranks", "profiles", "histograms"]
    assert rows[0].split()[:3] == ["p", "done", "completed"] and rows[0].split()[-6:] == ["0.5", "3", "-", "-", "-",
                                                                                         "-"]
    assert rows[1].split()[:3] == ["p", "dead", "stale"] and " 11m4" in rows[1]  # the heartbeat's age
    assert f"  rank 0 ({socket.gethostname()}) not responding 11m4" in rows[1]  # its one rank, 700 s silent
    missing = subprocess.run([sys.executable, "-m", "msmon", "runs", "nowhere"], capture_output=True, text=True,
                             timeout=60)
    assert missing.returncode == 1 and "nowhere: no such directory" in missing.stderr
    bad = subprocess.run([sys.executable, "-m", "msmon", "runs", str(save), "--stale-after", "soon"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "not a duration" in bad.stderr


def test_the_windows_of_histograms_are_listed(save: Path) -> None:
    """A run with histograms (a distributions probe, or the logs after an alert: distributions/<from>-<to>/rank_N)
    lists their windows beside the profiled ones, in the table and in --json."""
    run = make_run(save, "p", "probed", losses=(0.5,))
    for window in ("201-230", "11-40"):
        for rank in (0, 1):
            (run / "distributions" / window / f"rank_{rank}").mkdir(parents=True)
    (info,) = list_runs(save)
    assert info.distribution_windows == ["11-40", "201-230"] and info.profiles == []
    assert info.to_json()["distributions"] == ["distributions/11-40/rank_0", "distributions/11-40/rank_1",
                                               "distributions/201-230/rank_0", "distributions/201-230/rank_1"]
    env = {**os.environ, "NO_COLOR": "1"}
    result = subprocess.run([sys.executable, "-m", "msmon", "runs", str(save)], capture_output=True, text=True,
                            env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[1].split()[-3:] == ["-", "11-40,", "201-230"]


def test_runs_and_status_show_every_rank(save: Path, request: pytest.FixtureRequest) -> None:
    """The per-rank table: rank 1's heartbeat stopped 40 s ago while rank 0, alive (its heartbeat rewritten every
    half second, as a rank's thread does), waits in step 13."""
    run_dir = make_run(save, "p", "dp2", status="running", ended_ago=None)
    now = time.time()
    beats = {0: {"state": "training", "alive": now - 0.5, "begun": 13, "begun_time": now - 45, "ended": 12,
                 "ended_time": now - 45.5, "host": "elsewhere", "pid": 1},
             1: {"state": "training", "alive": now - 40, "begun": 13, "begun_time": now - 45, "ended": 12,
                 "ended_time": now - 45.5, "host": "elsewhere", "pid": 2}}
    (run_dir / "heartbeats").mkdir()
    for rank, beat in beats.items():
        (run_dir / "heartbeats" / f"rank_{rank}.json").write_text(json.dumps(beat))
    # the records end before the heartbeats' step (a newer record would name the last step that ended: its own)
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 10, "time": now - 50, "rank": 0, "loss": 2.0}) + "\n")
    env = {**os.environ, "NO_COLOR": "1"}
    alive, done = run_dir / "heartbeats" / "rank_0.json", threading.Event()

    def beat_as_a_live_rank_does() -> None:  # rank 0 stays responsive however slowly the commands start
        while not done.wait(0.5):
            atomic_write_json(alive, {**beats[0], "alive": time.time()})

    beating = threading.Thread(target=beat_as_a_live_rank_does, daemon=True)
    beating.start()
    request.addfinalizer(lambda: (done.set(), beating.join()))
    table = subprocess.run([sys.executable, "-m", "msmon", "runs", str(save)], capture_output=True, text=True,
                           env=env, timeout=60)
    assert table.returncode == 0, table.stderr
    assert "  2 ranks: 1 ok; rank 1 (elsewhere) not responding 4" in table.stdout.strip().splitlines()[1]  # 40 s
    status = subprocess.run([sys.executable, "-m", "msmon", "status", str(run_dir)], capture_output=True, text=True,
                            env=env, timeout=60)
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    assert lines[1].startswith("2 ranks on 1 machine: 1 in step 13; rank 1 on elsewhere not responding for 4")
    assert [line.split()[:2] for line in lines[3:5]] == [["0", "12"], ["1", "12"]]  # a few ranks: every one listed
    assert lines[3].split()[4:7] == ["in", "step", "13"] and "not responding" in lines[4]
    assert lines[5].startswith("no step has ended for ")
    assert "rank 1 is not responding (process stopped or frozen: no heartbeat for 4" in lines[6]
    data = json.loads(subprocess.run([sys.executable, "-m", "msmon", "status", str(run_dir), "--json"],
                                     capture_output=True, text=True, env=env, timeout=60).stdout)
    assert [r["state"] for r in data["ranks"]] == ["in step 13", "not responding"] and data["stuck"]["ranks"] == [1]
    assert data["summary"]["line"].startswith(lines[1][:-3]) and data["summary"]["outliers"][0]["ranks"] == [1]
    missing = subprocess.run([sys.executable, "-m", "msmon", "status", str(save)], capture_output=True, text=True,
                             env=env, timeout=60)
    assert missing.returncode == 1 and "not a run directory" in missing.stderr


def test_the_ending_names_the_previous_run_of_the_project_to_compare_with(tmp_path: Path) -> None:
    """The run of the same project that started last before this one (another project's newer run is not it)."""
    from msmon.ops.runs import previous_run
    from msmon.view.ending import NextCommands, next_lines
    from msmon.view.series import load_run

    save = tmp_path / "monitor_logs"
    make_run(save, "p", "first", started_ago=3000)
    make_run(save, "p", "second", started_ago=2000)
    make_run(save, "other", "newer", started_ago=1500)
    loud = make_run(save, "p", "loud", started_ago=1000)
    previous = previous_run(save, loud)
    assert previous == save / "p" / "second"
    lines = next_lines(load_run(loud), NextCommands(previous=previous), cwd=tmp_path)
    assert "  msmon compare monitor_logs/p/second monitor_logs/p/loud   # against the previous run" in lines
    assert previous_run(save, save / "p" / "first") is None
