"""Real MindInsight 2.3.1 and TensorBoard started by `msmon board`, queried, listed, stopped, no process left."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
import shared_session

from msmon.errors import ExitCode

pytestmark = pytest.mark.board
MSMON = [sys.executable, "-m", "msmon"]


def write_summary(run_dir: Path) -> None:
    """A real MindSpore summary with a few loss scalars (MindInsight lists it as a train job)."""
    import numpy as np
    from mindspore import Tensor
    from mindspore.train.summary import SummaryRecord

    run_dir.mkdir(parents=True, exist_ok=True)
    with SummaryRecord(str(run_dir)) as record:
        for step in range(1, 6):
            record.add_value("scalar", "loss", Tensor(np.array(2.0 / step, dtype=np.float32)))
            record.record(step)


@pytest.fixture(scope="module")
def save_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("boards")
    write_summary(root / "monitor_logs" / "proj" / "run1")
    return root


@pytest.fixture
def env(save_dir: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.chdir(save_dir)
    monkeypatch.setenv("MSMON_HOME", str(save_dir / "home"))
    monkeypatch.setenv("NO_COLOR", "1")
    return dict(os.environ)


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def leftovers(pgid: int) -> list[psutil.Process]:
    """Live processes still in the board's process group."""
    left = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                left.append(proc)
        except (OSError, psutil.Error):
            continue
    return left


def test_mindinsight_detach_query_status_stop(env: dict[str, str], save_dir: Path) -> None:
    run = lambda *a: subprocess.run([*MSMON, *a], env=env, capture_output=True, text=True, timeout=120)  # noqa: E731
    started = run("board", "start", "--port", "0", "--detach")  # PATH defaults to ./monitor_logs
    assert started.returncode == 0, started.stderr
    url = re.search(r"http://127\.0\.0\.1:\d+/", started.stdout).group(0)
    port = int(url.rsplit(":", 1)[1].strip("/"))
    (record,) = json.loads(run("board", "status", "--json").stdout)
    pgid = record["pgid"]
    try:
        assert record["port"] == port and record["state"] == "healthy"
        assert record["directory"] == str(save_dir / "monitor_logs" / "proj")  # MindInsight scans one level deep
        assert "gunicorn" in " ".join(psutil.Process(record["pid"]).cmdline())
        deadline = time.monotonic() + 60
        while True:
            jobs = get_json(f"{url}v1/mindinsight/datavisual/train-jobs")
            if jobs["total"] or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert [j["train_id"] for j in jobs["train_jobs"]] == ["./run1"]
        assert "loss/scalar" in jobs["train_jobs"][0]["plugins"]["scalar"]
        assert "healthy" in run("board", "status").stdout
    finally:
        stopped = run("board", "stop", "--port", str(port))
    assert stopped.returncode == 0, stopped.stderr
    assert "stopped the mindinsight board" in stopped.stdout
    assert leftovers(pgid) == []
    assert not [c for c in psutil.net_connections("inet") if c.laddr and c.laddr.port == port and c.status == "LISTEN"]
    assert json.loads(run("board", "status", "--json").stdout) == []


@pytest.mark.parametrize(
    ("backend", "api", "sig", "code"),
    [
        ("mindinsight", "v1/mindinsight/datavisual/train-jobs", signal.SIGINT, ExitCode.OK),
        ("tensorboard", "data/logdir", signal.SIGTERM, ExitCode.INTERRUPTED_SIGTERM),
    ],
)
def test_foreground_board_stops_on_signal(env: dict[str, str], backend: str, api: str, sig: int, code: int) -> None:
    proc = subprocess.Popen(
        [*MSMON, "board", "start", "monitor_logs", "--port", "0", "--backend", backend],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    pgid = None
    try:
        lines: list[str] = []
        while not any("Ctrl-C" in ln for ln in lines):
            line = proc.stdout.readline()
            assert line, "msmon board start ended before the board answered"
            lines.append(line)
        text = "".join(lines)
        url = re.search(r"http://127\.0\.0\.1:\d+/", text).group(0)
        pgid = os.getpgid(int(re.search(r"pid (\d+)", text).group(1)))
        assert get_json(url + api) is not None
        proc.send_signal(sig)
        assert proc.wait(timeout=120) == code
        assert leftovers(pgid) == []
    finally:  # pass or fail, nothing of the board outlives the test
        proc.kill()
        proc.wait()
        if pgid is not None and leftovers(pgid):
            shared_session.stop_group(pgid)
