"""Shared fixtures: run the real `msmon` command in a child process, and a snapshot of a directory tree."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str


def run_msmon(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 120
) -> CliResult:
    """Run ``python -m msmon ARGS`` as a real child process."""
    full_env = {key: value for key, value in os.environ.items() if key != "MSMON_DEBUG"}
    full_env.update({"NO_COLOR": "1", **(env or {})})
    proc = subprocess.run(
        [sys.executable, "-m", "msmon", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def tree_snapshot(root: Path) -> dict[str, str]:
    """Relative path -> content hash (or 'dir') of everything under root."""
    snapshot: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_dir() and not path.is_symlink():
            snapshot[rel] = "dir"
        elif path.is_file():
            snapshot[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            snapshot[rel] = "other"
    return snapshot


@pytest.fixture
def msmon_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point msmon's per-user state (board registry) at a temporary directory."""
    home = tmp_path / "msmon_home"
    monkeypatch.setenv("MSMON_HOME", str(home))
    return home
