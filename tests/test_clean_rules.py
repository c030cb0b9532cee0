"""`msmon clean`: age and keep-last rules, running runs kept, symlinks out of the save_dir untouched."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from helpers_ranks import rank_heartbeat

from msmon.errors import MsmonError
from msmon.ops.clean import clean
from msmon.util.durations import format_duration, parse_duration

DAY = 86400.0


def make_run(save: Path, project: str, run: str, ended_days: float | None, status: str = "completed",
             heartbeat: dict | None = None, size: int = 1000, active_days: float | None = None) -> Path:
    """A run directory (docs/architecture.md formats) that ended ``ended_days`` ago, its files last
    written ``active_days`` ago (default: at its end)."""
    path = save / project / run
    (path / "logs").mkdir(parents=True)
    now = datetime.now().astimezone()
    end = now - timedelta(days=ended_days) if ended_days is not None else None
    start = (end or now) - timedelta(hours=1)
    info = {"project_name": project, "run_name": run, "status": status, "start_time": start.isoformat(),
            "end_time": end.isoformat() if end else None, "host": socket.gethostname(), "pid": os.getpid()}
    (path / "run.json").write_text(json.dumps(info))
    (path / "logs" / "msmon.log").write_bytes(b"x" * size)
    if heartbeat is not None:
        rank_heartbeat(path, heartbeat)
    stamp = (now - timedelta(days=active_days)).timestamp() if active_days is not None else (end or now).timestamp()
    for file in [path, *path.rglob("*")]:
        os.utime(file, (stamp, stamp), follow_symlinks=False)
    return path


@pytest.fixture
def save(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path / "monitor_logs"


def names(entries) -> set[str]:
    return {f"{e.info.project}/{e.info.run}" for e in entries}


def test_durations() -> None:
    assert [parse_duration(t) for t in ("3d", "12h", "30m", "45s", "1w", "1.5h")] == [
        3 * DAY, 43200, 1800, 45, 7 * DAY, 5400]
    for bad in ("3", "d", "3x", "-1d", ""):
        with pytest.raises(MsmonError):
            parse_duration(bad)
    assert [format_duration(s) for s in (5, 65, 3720, 2 * DAY + 7200, None)] == ["5s", "1m05s", "1h02m", "2d02h", "-"]


def test_age_rule_and_dry_run(save: Path) -> None:
    old = make_run(save, "p", "old", ended_days=5, size=2_000_000)
    make_run(save, "p", "recent", ended_days=1)
    unfinished = make_run(save, "q", "crashed", ended_days=None, status="failed", active_days=10)  # by file age

    dry = clean(save, 3 * DAY, dry_run=True)
    assert names(dry.removed) == {"p/old", "q/crashed"} and old.exists() and unfinished.exists()
    assert dry.freed_bytes >= 2_000_000

    result = clean(save, 3 * DAY)
    assert names(result.removed) == {"p/old", "q/crashed"}
    assert not old.exists() and not unfinished.exists() and not (save / "q").exists()
    assert (save / "p" / "recent" / "run.json").exists()


def test_keep_last_per_project(save: Path) -> None:
    for day in (10, 20, 30, 40):
        make_run(save, "a", f"r{day}", ended_days=day)
    make_run(save, "b", "only", ended_days=50)
    result = clean(save, 3 * DAY, keep_last=2)
    assert names(result.removed) == {"a/r30", "a/r40"}
    assert {e.reason for e in result.kept} == {"among the last 2 of its project"}
    assert sorted(p.name for p in (save / "a").iterdir()) == ["r10", "r20"] and (save / "b" / "only").exists()


def test_running_run_is_kept_but_a_stale_one_goes(save: Path) -> None:
    beat = {"step": 5, "time": time.time() - 10 * DAY, "pid": os.getpid(), "rank": 0, "host": "elsewhere"}
    stale = make_run(save, "p", "stale", ended_days=None, status="running", heartbeat=beat, active_days=10)
    # old files but a fresh heartbeat (the rank heartbeat thread writes it): kept
    fresh = make_run(save, "p", "live", ended_days=None, status="running", active_days=10,
                     heartbeat={**beat, "time": time.time() - 5})
    result = clean(save, 3 * DAY)
    assert names(result.removed) == {"p/stale"} and not stale.exists()
    assert [e.reason for e in result.kept] == ["running (fresh heartbeat)"] and fresh.exists()


def test_symlinks_out_of_the_save_dir_are_untouched(save: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    victim = make_run(outside, "x", "looks_old", ended_days=30)  # an old run, but not under the save_dir
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    make_run(save, "p", "old", ended_days=30)
    (save / "p" / "old" / "link_to_file").symlink_to(precious)
    (save / "p" / "old" / "link_to_dir").symlink_to(outside, target_is_directory=True)
    (save / "linked_project").symlink_to(outside / "x", target_is_directory=True)
    (save / "p" / "linked_run").symlink_to(victim, target_is_directory=True)

    result = clean(save, DAY)
    assert names(result.removed) == {"p/old"}
    assert victim.exists() and (victim / "run.json").exists() and precious.read_text() == "keep me"
    assert (save / "linked_project").is_symlink() and (save / "p" / "linked_run").is_symlink()
    assert not (save / "p" / "old").exists()


def test_save_dir_that_is_itself_a_run_is_never_removed(tmp_path: Path) -> None:
    run = make_run(tmp_path, "p", "r", ended_days=30)
    result = clean(run, DAY)
    assert result.removed == [] and run.exists()


def test_cli(save: Path) -> None:
    make_run(save, "p", "old", ended_days=5, size=3_000_000)
    make_run(save, "p", "new", ended_days=0.1)
    cmd = [sys.executable, "-m", "msmon", "clean", str(save), "--older-than", "3d"]
    dry = subprocess.run([*cmd, "--dry-run"], capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    assert "would remove p/old  3.0 MB" in dry.stdout and "would free 3.0 MB from 1 run(s)" in dry.stdout
    assert (save / "p" / "old").exists()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "freed 3.0 MB from 1 run(s)" in done.stdout
    assert not (save / "p" / "old").exists() and (save / "p" / "new").exists()
    bad = subprocess.run([*cmd[:-1], "3 days"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "not a duration" in bad.stderr
    missing = subprocess.run([sys.executable, "-m", "msmon", "clean", "nowhere", "--older-than", "1d"],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and "no such directory" in missing.stderr


def test_profiles_only_removes_the_old_runs_profiles_and_keeps_the_runs(save: Path) -> None:
    """`msmon clean --profiles`: the profiles/ of the runs past the limit go (the heavy part), the runs stay;
    `msmon runs` lists each run's profiled windows before and after."""
    from conftest import run_msmon

    from msmon.ops.runs import list_runs

    old = make_run(save, "p", "old", ended_days=5)
    recent = make_run(save, "p", "recent", ended_days=1)
    bare = make_run(save, "p", "bare", ended_days=9)
    for run in (old, recent):
        for window in ("61-65", "23-27"):
            (run / "profiles" / window / "rank_0").mkdir(parents=True)
        (run / "profiles" / "61-65" / "rank_0" / "trace_view.json").write_bytes(b"x" * 500_000)
    listed = {info.run: info for info in list_runs(save)}
    assert listed["old"].profile_windows == ["23-27", "61-65"] and listed["bare"].profiles == []
    assert listed["old"].to_json()["profiles"] == ["profiles/23-27/rank_0", "profiles/61-65/rank_0"]
    table = run_msmon("runs", str(save))
    assert "profiles" in table.stdout and "23-27, 61-65" in table.stdout, table.stdout

    dry = clean(save, 3 * DAY, dry_run=True, profiles_only=True)
    assert names(dry.removed) == {"p/old"} and dry.freed_bytes == 500_000 and (old / "profiles").exists()
    said = run_msmon("clean", str(save), "--older-than", "3d", "--profiles")
    assert said.code == 0 and "removed the profiles of p/old  0.5 MB" in said.stdout, said.stdout
    assert "bare" not in said.stdout  # no profiles: nothing to say
    assert not (old / "profiles").exists() and (old / "run.json").exists() and bare.exists()
    assert (recent / "profiles" / "61-65" / "rank_0" / "trace_view.json").exists()
    assert {info.run: info.profiles for info in list_runs(save)}["old"] == []
