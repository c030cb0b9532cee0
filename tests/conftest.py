"""Shared fixtures: run the real `msmon` command in a child process, and a snapshot of a directory tree."""

from __future__ import annotations

import hashlib
import os
import shutil
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


def require_tool(name: str, install: str) -> str:
    """The path of a program a test drives. Missing: the test is skipped on a developer's machine, but fails in
    CI (``CI=true``, set by .ci/run), where a skipped browser or tmux test would hide a broken check."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed ({install})"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


def require_immutable_files(directory: Path) -> None:
    """Skip (with the reason) unless ``chattr +i`` works here: it needs root, chattr, and a file system that
    supports the immutable attribute (ext4 does, tmpfs and overlayfs may not)."""
    if os.geteuid() != 0 or shutil.which("chattr") is None:
        pytest.skip("making a directory read-only for root needs root and chattr")
    probe = directory / ".immutable-probe"
    probe.write_text("x")
    made = subprocess.run(["chattr", "+i", str(probe)], capture_output=True)
    subprocess.run(["chattr", "-i", str(probe)], capture_output=True)
    probe.unlink()
    if made.returncode != 0:
        pytest.skip(f"this file system has no immutable attribute: {made.stderr.decode().strip()}")


@pytest.fixture
def msmon_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point msmon's per-user state (board registry) at a temporary directory."""
    home = tmp_path / "msmon_home"
    monkeypatch.setenv("MSMON_HOME", str(home))
    return home
