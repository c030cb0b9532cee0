"""The launch layout of ``msmon run`` (``LaunchLayout``: its distributed flags as one value) and the ``msrun``
command line it becomes."""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msmon import layout
from msmon.errors import ExitCode, MsmonError
from msmon.runner.launch_command import with_mindformers_yaml
from msmon.validate.launch import launch_findings

WORKER_MODULE = "msmon.runner.worker"
#: msrun's flags msmon sets itself from its own options (or must set: the rank logs, joining, the tailed rank).
OWNED_MSRUN_FLAGS = {
    "worker_num": "--worker-num", "local_worker_num": "--local-worker-num", "master_addr": "--master-addr",
    "master_port": "--master-port", "node_rank": "--node-rank", "log_dir": "msmon's logs/ranks", "join": "msmon",
    "tail_worker_log": "msmon (the writing rank)",
}
_MSRUN_FLAG = re.compile(r"--([a-z][a-z0-9_]*)(=.*)?")


@dataclass(frozen=True)
class LaunchLayout:
    """How the training is launched on this machine: the ranks in total (``worker_num``; None: one process, no
    msrun) and on this machine, msrun's master, this machine's index in a multi-machine run, msrun's own flags."""

    worker_num: int | None = None
    local_worker_num: int | None = None
    master_addr: str = "127.0.0.1"
    master_port: int = 8118
    node_rank: int | None = None
    msrun_args: tuple[str, ...] = ()  # msrun's own flags, passed through (--bind_core=True)

    @property
    def world_size(self) -> int:
        return self.worker_num or 1

    @property
    def distributed(self) -> bool:
        """The ranks are started by msrun."""
        return bool(self.worker_num)

    @property
    def joins_run(self) -> bool:
        """A machine other than node 0 of a multi-machine run: node 0 creates the run directory."""
        return self.node_rank not in (None, 0)

    @property
    def ranks_here(self) -> list[int]:
        """The global ranks this machine runs (msrun numbers node K's ranks from K x its local ranks)."""
        local = self.local_worker_num or self.world_size
        first = (self.node_rank or 0) * local if local < self.world_size else 0
        return list(range(first, first + local))

    def check(self) -> None:
        """Usage errors of the distributed flags (exit 2)."""
        self._check_msrun_args()
        if self.worker_num is None:
            extra = [flag for flag, value in (("--local-worker-num", self.local_worker_num),
                                              ("--node-rank", self.node_rank)) if value is not None]
            if extra:
                raise MsmonError(f"{', '.join(extra)} needs --worker-num", "add --worker-num N", ExitCode.USAGE)
            return
        if self.worker_num < 1:
            raise MsmonError("--worker-num must be at least 1", "e.g. --worker-num 2", ExitCode.USAGE)
        local = self.local_worker_num or self.worker_num
        if not 1 <= local <= self.worker_num:
            raise MsmonError(
                f"--local-worker-num {local} must be between 1 and --worker-num {self.worker_num}",
                "ranks on this machine <= ranks in total", ExitCode.USAGE,
            )
        if local < self.worker_num and self.node_rank is None:
            raise MsmonError(
                "a multi-machine run (--local-worker-num < --worker-num) needs --node-rank",
                "give each machine its index: --node-rank 0 on the master, 1, 2, ... on the others", ExitCode.USAGE,
            )

    def _check_msrun_args(self) -> None:
        """``--msrun-arg``: msrun's own flags (``--bind_core=True``), never one msmon sets itself (exit 2)."""
        for arg in self.msrun_args:
            match = _MSRUN_FLAG.fullmatch(arg)
            if match is None:
                raise MsmonError(f"--msrun-arg {arg!r} is not an msrun flag", "write it as msrun takes it, e.g. "
                                 "--msrun-arg=--bind_core=True or --msrun-arg=--cluster_time_out=7200",
                                 ExitCode.USAGE)
            owner = OWNED_MSRUN_FLAGS.get(match.group(1))
            if owner is not None:
                raise MsmonError(f"--msrun-arg {arg}: msrun's --{match.group(1)} is set by {owner}",
                                 f"use {owner}" if owner.startswith("--") else "leave it to msmon", ExitCode.USAGE)
        if self.msrun_args and not self.worker_num:
            raise MsmonError("--msrun-arg needs --worker-num (msmon starts msrun only for ranks)",
                             "add --worker-num N", ExitCode.USAGE)


def check_config(training: dict[str, Any], launch: LaunchLayout) -> None:
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
