"""The test session's own tools (tests/conftest.py, tests/shared_session.py): its report, its servers' end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import shared_session
from conftest import CPU_BY_TEST, workers_idle


def test_a_worker_is_idle_between_its_tests_and_after_its_last_one(tmp_path: Path) -> None:
    tests = [("gw0", 100.0, 110.0), ("gw0", 112.5, 150.0), ("gw1", 100.0, 190.0), ("gw0", 150.0, 160.0)]
    (tmp_path / CPU_BY_TEST).write_text("".join(
        json.dumps({"file": "t.py", "test": "t", "cpu_s": 1.0, "worker": worker, "started": start, "ended": end}) + "\n"
        for worker, start, end in tests))
    assert workers_idle(tmp_path, session_end=200.0) == {"gw0": (2.5, 40.0), "gw1": (0.0, 10.0)}


def test_no_record_no_idle(tmp_path: Path) -> None:
    assert workers_idle(tmp_path, session_end=200.0) == {}


class Server:
    """A child in a process group of its own, reaped by a thread of the test (while a zombie of it is left, its
    group still takes signals)."""

    def __init__(self, code: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", f"import signal, time\n{code}\nprint('ready', flush=True)\n"
                                      "time.sleep(600)"], stdout=subprocess.PIPE, text=True, start_new_session=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline() == "ready\n"
        self.reaper = threading.Thread(target=self.proc.wait, daemon=True)
        self.reaper.start()

    def returncode(self) -> int | None:
        self.reaper.join(60)
        return self.proc.returncode


def test_every_group_ends_and_one_deaf_to_sigterm_is_killed_after_the_grace() -> None:
    polite, deaf = Server(""), Server("signal.signal(signal.SIGTERM, signal.SIG_IGN)")
    shared_session.stop_groups([polite.proc.pid, deaf.proc.pid], grace_s=2.0)
    assert [polite.returncode(), deaf.returncode()] == [-signal.SIGTERM, -signal.SIGKILL]


def test_the_sessions_own_group_is_never_stopped() -> None:
    with pytest.raises(RuntimeError, match="the test session's own"):
        shared_session.stop_groups([os.getpgrp()])
