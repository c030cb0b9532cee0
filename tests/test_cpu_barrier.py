"""msmon's CPU barrier for resuming a multi-rank run (msmon/runner/cpu_barrier.py): when it applies, and that it
replaces what the installed mindformers calls. That it works is proven by training two ranks that restart from a
checkpoint (tests/test_resume.py); without it they fail with "Unsupported op [Barrier] on CPU"."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from msmon.runner import cpu_barrier

RESUMING = {"context": {"device_target": "CPU"}, "use_parallel": True, "resume_training": "llama_rank_0-1_50.ckpt"}


@pytest.mark.parametrize(("change", "needed"), [
    ({}, True),
    ({"resume_training": True}, True),
    ({"context": {"device_target": "Ascend"}}, False),
    ({"context": {}}, False),  # mindformers' default target is Ascend
    ({"use_parallel": False}, False),
    ({"resume_training": False}, False),
])
def test_it_applies_to_a_cpu_run_with_several_ranks_that_resumes(change: dict[str, Any], needed: bool) -> None:
    assert cpu_barrier.needed({**RESUMING, **change}) is needed


@pytest.mark.compat_smoke
def test_the_patch_table_names_what_the_installed_mindformers_calls_and_applying_it_replaces_them(
    tmp_path: Path,
) -> None:
    """In a child process (the swap is process-wide): each name is MindSpore's barrier, then msmon's, idempotently."""
    code = (
        "import importlib, mindformers\n"
        "from msmon.compat import CPU_BARRIER_PATCHES\n"
        "from msmon.runner import cpu_barrier\n"
        "patches = CPU_BARRIER_PATCHES[mindformers.__version__]\n"
        "def names():\n"
        "    return sorted(getattr(importlib.import_module(p.module), p.attribute).__qualname__ for p in patches)\n"
        "print('BEFORE', names())\n"
        f"config = {RESUMING!r}\n"
        "print('APPLIED', cpu_barrier.apply_if_needed(config), cpu_barrier.apply_if_needed(config))\n"
        "print('AFTER', names())\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "LOCAL_DEFAULT_PATH": str(tmp_path / "mindformers")})
    assert "BEFORE ['barrier', 'barrier']" in proc.stdout, proc.stderr[-2000:]
    assert "APPLIED True True" in proc.stdout and "AFTER ['allreduce_barrier', 'allreduce_barrier']" in proc.stdout
