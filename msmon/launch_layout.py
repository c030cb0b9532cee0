"""How ``msmon run`` launches the training: ``LaunchLayout``, its distributed flags as one value, and their usage
checks. ``msmon run`` turns it into the msrun command line (msmon.runner.msrun); ``msmon validate --worker-num``
checks a config against it (MS026)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from msmon.errors import ExitCode, MsmonError

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
    def spans_machines(self) -> bool:
        """The ranks run on several machines (``--local-worker-num`` below ``--worker-num``)."""
        return bool(self.worker_num) and (self.local_worker_num or self.world_size) < self.world_size

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
