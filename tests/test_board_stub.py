"""Board failure outcomes and bookkeeping with stub board binaries (`#!/bin/sh` scripts on PATH)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from msmon.errors import ExitCode, MsmonError

MSMON = [sys.executable, "-m", "msmon"]

# Serves the health paths of both backends with python's http.server on 127.0.0.1 whatever --host says.
SERVING = """#!/bin/sh
printf '%s\\n' "$@" > "$STUB_ARGS"
port=""
while [ $# -gt 0 ]; do case "$1" in --port) port="$2"; shift;; esac; shift; done
cd "$STUB_ROOT" && exec "$STUB_PYTHON" -m http.server --bind 127.0.0.1 "$port"
"""
EXITS = """#!/bin/sh
echo "stub: cannot open the summary base dir" >&2
exit 3
"""
SILENT = """#!/bin/sh
echo $$ > "$STUB_PIDFILE"
echo "stub: loading forever"
exec sleep 120
"""


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "stubroot"
    for rel in ("v1/mindinsight/datavisual/train-jobs", "data/logdir"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("{}")
    (tmp_path / "bin").mkdir()
    (tmp_path / "logs" / "proj" / "run1").mkdir(parents=True)
    values = {
        "MSMON_HOME": str(tmp_path / "home"),
        "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "STUB_ROOT": str(root),
        "STUB_ARGS": str(tmp_path / "args.txt"),
        "STUB_PIDFILE": str(tmp_path / "stub.pid"),
        "STUB_PYTHON": sys.executable,
        "NO_COLOR": "1",
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return dict(os.environ)


def stub(env: dict[str, str], name: str, script: str) -> None:
    path = Path(env["PATH"].split(os.pathsep)[0]) / name
    path.write_text(script)
    path.chmod(0o755)


def msmon(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MSMON, *args], env=env, capture_output=True, text=True, timeout=timeout)


def records(env: dict[str, str]) -> list[dict]:
    path = Path(env["MSMON_HOME"]) / "boards.json"
    return json.loads(path.read_text())["boards"] if path.exists() else []


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_child_exits_at_once(env: dict[str, str]) -> None:
    stub(env, "mindinsight", EXITS)
    result = msmon(env, "board", "start", "logs", "--port", str(free_port()))
    assert result.returncode == ExitCode.BOARD_FAILED
    assert "mindinsight exited early with code 3" in result.stderr
    assert "stub: cannot open the summary base dir" in result.stderr  # the log tail
    assert "see its log:" in result.stderr
    assert "Traceback" not in result.stderr


def test_child_never_answers_is_stopped(env: dict[str, str]) -> None:
    stub(env, "mindinsight", SILENT)
    started = time.monotonic()
    result = msmon(env, "board", "start", "logs", "--port", str(free_port()), "--timeout", "3")
    assert result.returncode == ExitCode.BOARD_FAILED
    assert time.monotonic() - started < 30
    assert "did not answer" in result.stderr and "it was stopped" in result.stderr
    assert "stub: loading forever" in result.stderr
    pid = int(Path(env["STUB_PIDFILE"]).read_text())
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert records(env) == []


def test_port_taken(env: dict[str, str]) -> None:
    stub(env, "mindinsight", SERVING)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = msmon(env, "board", "start", "logs", "--port", str(port))
    assert result.returncode == ExitCode.BOARD_FAILED
    assert f"port {port} on 127.0.0.1 is busy" in result.stderr
    assert "--port 0" in result.stderr
    assert not Path(env["STUB_ARGS"]).exists()  # never launched


def test_directory_missing(env: dict[str, str]) -> None:
    stub(env, "mindinsight", SERVING)
    result = msmon(env, "board", "start", "nowhere", "--port", "0")
    assert result.returncode == ExitCode.BOARD_FAILED
    assert "nowhere does not exist" in result.stderr and "msmon run" in result.stderr


def test_binary_missing_names_the_install_command(env: dict[str, str], tmp_path: Path, monkeypatch) -> None:
    from msmon.ops.board import start_board

    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))
    cases = (("mindinsight", "pip install mindinsight==2.3.1"), ("tensorboard", "pip install tensorboard"))
    for backend, install in cases:
        with pytest.raises(MsmonError) as info:
            start_board(tmp_path / "logs", port=0, backend=backend)
        assert info.value.exit_code == ExitCode.BOARD_FAILED
        assert f"{backend} is not installed" in info.value.message and install in info.value.hint


def test_detach_status_then_stop_after_the_process_is_gone(env: dict[str, str]) -> None:
    stub(env, "mindinsight", SERVING)
    result = msmon(env, "board", "start", "logs", "--port", "0", "--detach")
    assert result.returncode == 0, result.stderr
    port = int(re.search(r"http://127\.0\.0\.1:(\d+)/", result.stdout).group(1))
    (record,) = records(env)
    assert record["port"] == port and record["backend"] == "mindinsight"
    assert record["directory"] == str(Path("logs").resolve())
    assert psutil.Process(record["pid"]).cmdline()[1:3] == ["-m", "http.server"]  # the server, not a wrapper
    status = json.loads(msmon(env, "board", "status", "--json").stdout)
    assert [(s["port"], s["state"]) for s in status] == [(port, "healthy")]
    assert "healthy" in msmon(env, "board", "status").stdout

    again = msmon(env, "board", "start", "logs", "--port", str(port), "--detach")
    assert again.returncode == 0 and "already running" in again.stdout

    os.killpg(record["pgid"], signal.SIGKILL)
    psutil.wait_procs([psutil.Process(record["pid"])], timeout=5)
    status = json.loads(msmon(env, "board", "status", "--json").stdout)
    assert [s["state"] for s in status] == ["gone"]
    stopped = msmon(env, "board", "stop", "--port", str(port))
    assert stopped.returncode == 0, stopped.stderr
    assert "already gone" in stopped.stdout
    assert records(env) == []
    assert msmon(env, "board", "stop", "--port", str(port)).returncode == ExitCode.BOARD_FAILED


def test_stop_all_and_ambiguous_stop(env: dict[str, str]) -> None:
    stub(env, "mindinsight", SERVING)
    for _ in range(2):
        assert msmon(env, "board", "start", "logs", "--port", "0", "--detach").returncode == 0
    pids = [r["pid"] for r in records(env)]
    assert msmon(env, "board", "stop").returncode == ExitCode.USAGE
    result = msmon(env, "board", "stop", "--all")
    assert result.returncode == 0 and result.stdout.count("stopped the mindinsight board") == 2
    assert records(env) == []
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)


def test_a_corrupt_board_record_is_reported_and_kept_never_taken_for_no_board(env: dict[str, str]) -> None:
    """A cut or hand-edited $MSMON_HOME/boards.json: status, stop and a detached start each fail with one line
    naming the file and the fix (exit 1), nothing starts, and the file is left as it was (its boards may run)."""
    stub(env, "mindinsight", SERVING)
    state = Path(env["MSMON_HOME"]) / "boards.json"
    state.parent.mkdir(parents=True, exist_ok=True)
    for corrupt in ('{"boards": [{"backend": "mindinsight", "pid"', '{"boards": {"port": 8080}}'):
        state.write_text(corrupt)
        for args in (["board", "status"], ["board", "stop", "--all"],
                     ["board", "start", "logs", "--port", "0", "--detach"]):
            result = msmon(env, *args)
            assert result.returncode == ExitCode.INVALID, (args, result.stderr)
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1 and f"{state} is unreadable" in lines[0] and "delete it" in lines[0], lines
            assert "Traceback" not in result.stderr and state.read_text() == corrupt
        assert not Path(env["STUB_PIDFILE"]).exists()  # no board was started
    state.write_text('{"boards": []}')
    assert msmon(env, "board", "status").returncode == 0  # the control: a readable file


def test_non_loopback_host(env: dict[str, str]) -> None:
    stub(env, "tensorboard", SERVING)
    result = msmon(env, "board", "start", "logs", "--backend", "tensorboard", "--host", "0.0.0.0", "--port", "0",
                   "--detach")
    try:
        assert result.returncode == 0, result.stderr
        assert "no authentication" in result.stderr
        args = Path(env["STUB_ARGS"]).read_text().splitlines()
        assert args[args.index("--host") + 1] == "0.0.0.0"
        assert args[args.index("--logdir") + 1] == str(Path("logs").resolve())
    finally:
        msmon(env, "board", "stop", "--all")
    refused = msmon(env, "board", "start", "logs", "--host", "0.0.0.0", "--port", "0")
    assert refused.returncode == ExitCode.BOARD_FAILED and "always binds 127.0.0.1" in refused.stderr


def test_no_shell_string_from_user_input(env: dict[str, str], tmp_path: Path) -> None:
    stub(env, "mindinsight", SERVING)
    odd = tmp_path / "a dir; touch pwned $(touch pwned2)"
    odd.mkdir()
    result = msmon(env, "board", "start", str(odd), "--port", "0", "--detach")
    try:
        assert result.returncode == 0, result.stderr
        args = Path(env["STUB_ARGS"]).read_text().splitlines()
        assert args[args.index("--summary-base-dir") + 1] == str(odd)
        assert not list(tmp_path.rglob("pwned*"))
    finally:
        msmon(env, "board", "stop", "--all")


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 0), (signal.SIGTERM, ExitCode.INTERRUPTED_SIGTERM)])
def test_foreground_stops_the_child_on_signal(env: dict[str, str], sig: int, code: int) -> None:
    stub(env, "mindinsight", SERVING)
    proc, pid = foreground(env)
    try:
        proc.send_signal(sig)
        assert proc.wait(timeout=120) == code
        assert "stopped" in proc.stdout.read()
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        assert records(env) == []  # a foreground board is never recorded
    finally:
        end_foreground(proc, pid)


def foreground(env: dict[str, str]) -> tuple[subprocess.Popen[str], int]:
    """`msmon board start logs` in the foreground, once it printed the board's pid and "press Ctrl-C"."""
    proc = subprocess.Popen([*MSMON, "board", "start", "logs", "--port", "0"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    lines: list[str] = []
    while not any("Ctrl-C" in ln for ln in lines):
        line = proc.stdout.readline()
        if not line:
            proc.kill()
            raise AssertionError(f"msmon board start ended before the board answered: {''.join(lines)}")
        lines.append(line)
    return proc, int(re.search(r"pid (\d+)", "".join(lines)).group(1))


def end_foreground(proc: subprocess.Popen[str], pid: int) -> None:
    """Pass or fail: msmon and every process of the board are gone after the test."""
    proc.kill()
    proc.wait()
    try:
        os.killpg(os.getpgid(pid), signal.SIGKILL)
    except OSError:
        pass


#: A board whose server ignores SIGINT (only SIGKILL ends it) and says when the stop began.
STUBBORN = """#!/bin/sh
port=""
while [ $# -gt 0 ]; do case "$1" in --port) port="$2"; shift;; esac; shift; done
cd "$STUB_ROOT" && exec "$STUB_PYTHON" -c '
import http.server, os, signal, sys
signal.signal(signal.SIGINT, lambda *_: open(os.environ["STUB_PIDFILE"], "w").write("stopping"))
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), http.server.SimpleHTTPRequestHandler).serve_forever()
' "$port"
"""


def test_a_second_signal_while_the_board_stops_still_stops_it(env: dict[str, str]) -> None:
    """SIGTERM, then another SIGTERM while msmon is stopping a board that ignores SIGINT: msmon still ends the board
    (SIGKILL after the grace period) and exits 143 (a signal handler that raised would have left it running)."""
    stub(env, "mindinsight", STUBBORN)
    proc, pid = foreground(env)
    stopping = Path(env["STUB_PIDFILE"])
    try:
        proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 120
        while not stopping.exists():  # the board got msmon's SIGINT: the stop is under way
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == ExitCode.INTERRUPTED_SIGTERM
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    finally:
        end_foreground(proc, pid)


def test_board_dir_from_config_and_project_level(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from msmon.ops.board_dir import resolve_board_dir

    monkeypatch.chdir(tmp_path)
    run = tmp_path / "saves" / "proj" / "run1"
    run.mkdir(parents=True)
    config = tmp_path / "train.yaml"
    config.write_text("monitor_config:\n  save_dir: ./saves\n  project_name: proj\n")
    assert resolve_board_dir(config, "mindinsight") == (tmp_path / "saves" / "proj").resolve()
    assert resolve_board_dir(config, "tensorboard") == (tmp_path / "saves" / "proj").resolve()
    # a save_dir whose summaries sit two levels down: MindInsight is pointed at the project level
    assert resolve_board_dir(tmp_path / "saves", "mindinsight") == (tmp_path / "saves").resolve()
    (run / "events.out.events.summary.1796004295.0.host_MS").write_bytes(b"x")
    assert resolve_board_dir(tmp_path / "saves", "mindinsight") == (tmp_path / "saves" / "proj").resolve()
    assert resolve_board_dir(tmp_path / "saves", "tensorboard") == (tmp_path / "saves").resolve()
    # a run that has only started (run.json, no summary yet) already points MindInsight at the newest project
    new_run = tmp_path / "saves" / "newproj" / "run2"
    new_run.mkdir(parents=True)
    (new_run / "run.json").write_text("{}")
    os.utime(new_run.parent, (time.time() + 10, time.time() + 10))
    assert resolve_board_dir(tmp_path / "saves", "mindinsight") == new_run.parent.resolve()
    with pytest.raises(MsmonError) as info:
        resolve_board_dir(tmp_path / "train.yml", "mindinsight")
    assert info.value.exit_code == ExitCode.BOARD_FAILED
