"""The git commit a run started from (run.json and the MLflow / lineage tags show the same value)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def git_commit(directory: Path) -> str | None:
    """HEAD of the git repository holding ``directory``, or None."""
    try:
        out = subprocess.run(  # noqa: S603 - a fixed argv, no shell
            ["git", "-C", str(directory), "rev-parse", "HEAD"],  # noqa: S607 - the user's git, found on PATH
            capture_output=True, text=True, timeout=5, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    return commit if out.returncode == 0 and len(commit) == 40 else None
