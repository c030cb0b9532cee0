"""`msmon run` end to end: the real quickstart training as a subprocess, its run directory, a real MindInsight."""

from __future__ import annotations

import json
import math
import os
import re
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import run_msmon
from helpers_training import PROJECTS, QUICKSTARTS, mindformers_step_lines, write_quickstart_config

from msmon.compat import installed_versions

pytestmark = pytest.mark.compat_smoke

STEPS = 60
INTERVAL = 10
#: MFLossMonitor's line: ``{ Epoch:[  1/  1], step:[   10/   60], loss:[6.123456/6.5], ...`` (sink mode: ``loss: x``)
MF_STEP_LINE = re.compile(r"step:\[\s*(\d+)/\s*\d+\], loss:\s*\[?\s*([-+\w.]+)")


def _no_leftovers(marker: str) -> list[str]:
    """Command lines of live processes that mention ``marker``."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            line = " ".join(proc.info["cmdline"] or [])
            if marker in line and proc.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(line)
        except psutil.Error:
            continue
    return found


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - a board on 127.0.0.1
        return json.loads(response.read())


@pytest.fixture(scope="module", params=list(QUICKSTARTS))
def quickstart_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """One real `msmon run` of a quickstart (reduced steps; both model paths) with the board beside it, kept
    afterwards."""
    path = request.param
    root = tmp_path_factory.mktemp(f"e2e_{path}")
    config = write_quickstart_config(root, steps=STEPS, run_name="e2e_run", verbose=True, source=QUICKSTARTS[path])
    env = {"MSMON_HOME": str(root / "home"), "MSMON_CACHE_DIR": str(root / "cache")}
    try:
        result = run_msmon("run", str(config), "--board", "--port", "0", "--keep-board", cwd=root, env=env,
                           timeout=600)
        yield {"root": root, "config": config, "result": result, "path": path, "project": PROJECTS[path],
               "run_dir": root / "monitor_logs" / PROJECTS[path] / "e2e_run", "env": env}
    finally:
        _stop_kept_boards(root / "home")


def _stop_kept_boards(home: Path) -> None:
    from msmon.ops import board

    previous = os.environ.get("MSMON_HOME")
    os.environ["MSMON_HOME"] = str(home)
    try:
        for record, _state in board.board_status():
            board.stop_record(record)
    finally:
        if previous is None:
            os.environ.pop("MSMON_HOME", None)
        else:
            os.environ["MSMON_HOME"] = previous


@pytest.mark.training
@pytest.mark.board
def test_run_completes_with_metrics_for_every_logged_step(quickstart_run: dict) -> None:
    result = quickstart_run["result"]
    assert result.code == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in (quickstart_run["run_dir"] / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == list(range(INTERVAL, STEPS + 1, INTERVAL))
    for name in ("loss", "grad_norm", "learning_rate", "throughput", "global_step"):
        assert all(name in row for row in rows), name
    losses = [row["loss"] for row in rows]
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0] - 0.1, losses
    assert "run completed (exit 0" in result.stderr


@pytest.mark.training
@pytest.mark.board
def test_run_json_says_what_ran_and_how_it_ended(quickstart_run: dict) -> None:
    run_dir = quickstart_run["run_dir"]
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "completed" and info["exit_code"] == 0 and info["error"] is None
    assert info["last_step"] == STEPS
    assert info["run_name"] == "e2e_run" and info["project_name"] == quickstart_run["project"]
    assert info["run_dir"] == str(run_dir) and info["cwd"] == str(quickstart_run["root"])
    assert info["device_target"] == "CPU" and info["device_count"] == 1
    versions = installed_versions(["mindspore", "mindformers"])
    assert info["mindspore_version"] == versions["mindspore"] and info["mindformers_version"] == versions["mindformers"]
    assert info["python_version"].startswith("3.11")
    assert info["command"][:2] == ["msmon", "run"] and info["config_path"] == str(quickstart_run["config"])
    assert info["dropped_records"] == 0 and isinstance(info["alert_count"], int)
    assert info["start_time"] <= info["end_time"]
    assert set(info) >= {"host", "pid", "git_commit", "total_steps"}


@pytest.mark.training
@pytest.mark.board
def test_snapshot_is_the_config_as_written_and_nothing_leaks_into_the_cwd(quickstart_run: dict) -> None:
    run_dir, root = quickstart_run["run_dir"], quickstart_run["root"]
    assert (run_dir / "config.yaml").read_bytes() == quickstart_run["config"].read_bytes()
    assert "${msmon_dataset:" in (run_dir / "config.yaml").read_text()
    resolved = (run_dir / "monitor_config.resolved.yaml").read_text()
    assert "run_name: e2e_run" in resolved and "log_interval: 10" in resolved
    assert (run_dir / "logs" / "msmon.log").is_file()
    assert (run_dir / "logs" / "output" / "log" / "rank_0" / "info.log").is_file()
    assert not (root / "output").exists()  # mindformers' ./output went into the run directory
    assert sorted(p.name for p in root.iterdir()) == sorted(
        ["cache", "home", "monitor_config_backup", "monitor_logs", "quickstart.yaml"]
    )


@pytest.mark.training
@pytest.mark.board
def test_no_training_process_is_left_and_the_kept_board_is_recorded(quickstart_run: dict) -> None:
    assert _no_leftovers(str(quickstart_run["run_dir"])) == []
    assert "board kept running: http://127.0.0.1:" in quickstart_run["result"].stderr
    boards = json.loads((quickstart_run["root"] / "home" / "boards.json").read_text())
    assert boards, "the kept board is not in $MSMON_HOME/boards.json"


@pytest.mark.training
@pytest.mark.board
def test_the_board_of_the_run_serves_the_same_loss_values_as_metrics_jsonl(quickstart_run: dict) -> None:
    match = re.search(r"board: (http://127\.0\.0\.1:\d+/?)", quickstart_run["result"].stderr)
    assert match, quickstart_run["result"].stderr[-2000:]
    rows = [json.loads(line) for line in (quickstart_run["run_dir"] / "metrics.jsonl").read_text().splitlines()]
    expected = {row["step"]: row["loss"] for row in rows}
    base = match.group(1).rstrip("/") + "/v1/mindinsight/datavisual"
    served: dict[int, float] = {}
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and len(served) < len(expected):
        try:
            jobs = _get(f"{base}/train-jobs")["train_jobs"]
            train_id = next(job["train_id"] for job in jobs if job["train_id"].endswith("e2e_run"))
            query = urllib.parse.urlencode({"train_id": train_id, "tag": "loss/scalar"})
            data = _get(f"{base}/scalar/metadata?{query}")
            served = {int(m["step"]): float(m["value"]) for m in data.get("metadatas", [])}
        except (OSError, ValueError, KeyError, StopIteration):
            time.sleep(1)
    assert sorted(served) == sorted(expected)
    for step, value in expected.items():
        assert served[step] == pytest.approx(value, rel=1e-6)


@pytest.mark.training
@pytest.mark.board
def test_metrics_equal_the_values_mindformers_itself_logged(quickstart_run: dict) -> None:
    """msmon's loss, grad norm and learning rate at each logged step are the values MFLossMonitor printed into
    mindformers' own log (both model paths)."""
    run_dir = quickstart_run["run_dir"]
    text = (run_dir / "logs" / "output" / "log" / "rank_0" / "info.log").read_text(encoding="utf-8", errors="replace")
    logged = {int(step): float(loss) for step, loss in MF_STEP_LINE.findall(text)}
    assert sorted(logged) == list(range(1, STEPS + 1)), sorted(logged)[:5]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == list(range(INTERVAL, STEPS + 1, INTERVAL))
    for row in rows:  # mindformers prints 6 decimals
        assert row["loss"] == pytest.approx(logged[row["step"]], abs=5e-7), row["step"]
    printed = mindformers_step_lines(run_dir)
    for row in rows:  # grad norm and learning rate printed with 8 and 7 significant digits
        for name in ("grad_norm", "learning_rate"):
            assert row[name] == pytest.approx(printed[row["step"]][name], rel=2e-6, abs=2e-9), (row["step"], name)


@pytest.mark.training
@pytest.mark.board
def test_a_dense_model_records_no_loss_parts_and_checkpoints_stay_inside_the_run(quickstart_run: dict) -> None:
    rows = [json.loads(line) for line in (quickstart_run["run_dir"] / "metrics.jsonl").read_text().splitlines()]
    assert not any(key.startswith("loss_") and key != "loss_mean" for row in rows for key in row)
    checkpoints = list((quickstart_run["run_dir"] / "logs" / "output" / "checkpoint").rglob("*.safetensors"))
    # the mcore quickstart keeps the CheckpointMonitor its shipped config has: one save at the end, in the run
    assert len(checkpoints) == (1 if quickstart_run["path"] == "mcore" else 0), checkpoints
