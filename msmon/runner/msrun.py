"""The ``msrun`` command line a ``LaunchLayout`` becomes, and the config it must fit."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from msmon import layout
from msmon.errors import MsmonError
from msmon.foreign import ConfigValue
from msmon.launch_layout import LaunchLayout
from msmon.runner.launch_command import with_mindformers_yaml
from msmon.validate.launch import launch_findings

WORKER_MODULE = "msmon.runner.worker"


def check_config(training: dict[str, ConfigValue], launch: LaunchLayout) -> None:
    """The config must be a parallel one when it runs on more than one rank, and one that trains on several ranks
    of this device (the mcore models train on one CPU process only); a parallel layout must fit the ranks. The rules
    are validate's (msmon.validate.launch, MS026: `msmon validate --worker-num N` reports them all); the first
    stops the run."""
    for finding in launch_findings(training, launch.worker_num):
        raise MsmonError(finding.message, finding.hint)


def msrun_binary() -> list[str]:
    """MindSpore's launcher: ``msrun`` beside this Python, on PATH, or its module."""
    here = Path(sys.executable).parent / "msrun"
    found = str(here) if here.exists() else shutil.which("msrun")
    return [found] if found else [sys.executable, "-m", "mindspore.parallel.cluster.run"]


def rank_logs(run_dir: Path, node_rank: int | None) -> Path:
    """msrun's log directory on this machine: ``logs/ranks`` (node 0), ``logs/ranks/node_K`` (node K: msrun writes
    its own ``scheduler.log`` there too, which must not replace node 0's in a shared run directory)."""
    return run_dir / layout.RANK_LOGS / (f"node_{node_rank}" if node_rank else "")


def worker_command(launch: LaunchLayout, run_dir: Path, tail_rank: int = 0, *, command: Sequence[str] = (),
                   config: str = "") -> list[str]:
    """The command that starts the training on this machine: the worker, or msrun starting the ranks (msrun
    shows the log of ``tail_rank`` on the terminal: the rank that writes the metrics); ``command``: the user's own
    launch (msmon run CONFIG -- COMMAND), given the run directory's mindformers.yaml for ``config``."""
    if command:
        return with_mindformers_yaml(list(command), config, run_dir / layout.MINDFORMERS_YAML)
    if not launch.worker_num:
        return [sys.executable, "-m", WORKER_MODULE]
    argv = msrun_binary() + [
        f"--worker_num={launch.worker_num}",
        f"--local_worker_num={launch.local_worker_num or launch.worker_num}",
        f"--master_addr={launch.master_addr}",
        f"--master_port={launch.master_port}",
        f"--log_dir={rank_logs(run_dir, launch.node_rank)}",
        "--join=True",
        f"--tail_worker_log={tail_rank}",
    ]
    if launch.node_rank is not None:
        argv.append(f"--node_rank={launch.node_rank}")
    return argv + list(launch.msrun_args) + ["python", "-m", WORKER_MODULE]
