"""The training child of ``msmon run``: start it, wait for it, forward stop requests, leave no process behind.

The training always runs in a child (``python -m msmon.runner.worker``) in its own session, so the
``msmon run`` process never imports MindSpore: it sees the user's real signal (MindSpore turns SIGINT into
SIGTERM inside a training process), forwards exactly one stop request per signal, and can always clean up.
With ``--worker-num N`` the child is MindSpore's ``msrun``, which starts every rank (msmon's callback in
each; rank 0 writes the metrics unless ``writer.per_rank``) and writes each rank's log to
``<run dir>/logs/ranks/``. Every rank leaves ``logs/rank_<r>.result.json``; the parent writes ``run.json``.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from msmon import layout
from msmon.ops.ranks import RankState, rank_states, read_heartbeats
from msmon.runner import results
from msmon.runner.launch_command import INJECT_DIR
from msmon.runner.msrun import WORKER_MODULE, rank_logs, worker_command
from msmon.runner.plan import RunRequest
from msmon.runner.protocol import RankSpec, clear_results, read_results
from msmon.status import RunStatus
from msmon.util.procs import alive

logger = logging.getLogger("msmon")

STOP_GRACE_S = 60.0  # after a stop request the training is killed when it has not ended within this
SCHEDULER_GRACE_S = 3.0  # after a stop request and every rank's end, msrun's own end is waited for this long
FORCE_GRACE_S = 10.0  # after a second signal (the ranks exit by themselves within 8 s) what is left is killed
POLL_S = 0.2


def stranded(states: list[RankState], ended: dict[int, results.RankResult]) -> list[int]:
    """The ranks still running (``states``: as their heartbeats show them) that began a step after the last step any
    rank of ``ended`` (the results written) ended: a rank stops at a step end, so the collectives of that step wait
    for a peer that will never join them."""
    last = max((r.last_step for r in ended.values() if r.last_step is not None), default=None)
    if last is None:
        return []
    return [s.rank for s in states if s.rank not in ended and s.begun > last and s.ended != s.begun]


class TrainingProcess:
    """One attempt's training child in its own session, driven by the supervisor: ``start``, ``waiting`` on each
    poll, ``request_stop`` / ``force_stop``, ``close`` (nothing left running), ``decide`` (the attempt's status)."""

    def __init__(self, request: RunRequest, spec: RankSpec) -> None:
        self.request = request
        self.launch = request.launch_layout
        self.spec = spec
        self.run_dir = spec.run_dir
        self.process: subprocess.Popen[bytes] | None = None
        self.known: dict[int, psutil.Process] = {}
        self.stop_requested_at: float | None = None
        self.ranks_seen = False  # msrun started a rank of this attempt (a rank's end can then be told)
        self.ranks_ended_at: float | None = None
        self.forced: set[int] = set()  # the ranks told to flush and exit now (stranded in a step, `_force_stranded`)
        self.program = ""  # what was launched (the first word of its command line)

    @property
    def distributed(self) -> bool:
        return self.launch.distributed

    @property
    def command(self) -> bool:
        """`msmon run CONFIG -- COMMAND`: the user's launch, its ranks known by the heartbeats they write."""
        return bool(self.request.launch)

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.spec.to_env())
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        if self.command:  # msmon's sitecustomize first; mindformers' outputs stay where the user's launch puts them
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(INJECT_DIR), env.get("PYTHONPATH")]))
        else:
            env["LOCAL_DEFAULT_PATH"] = str(self.run_dir / layout.FRAMEWORK_OUTPUT)
        # MindSpore writes a failed compile's analyze_fail.ir under $MS_OM_PATH/rank_N/om and saved graphs under
        # MS_DEV_SAVE_GRAPHS_PATH, both relative to the working directory by default: the run directory instead
        env.setdefault("MS_OM_PATH", str(self.run_dir / layout.LOGS))
        env.setdefault("MS_DEV_SAVE_GRAPHS_PATH", str(self.run_dir / layout.GRAPHS))
        return env

    def start(self) -> results.RunResult | None:
        """Start the child (the results an earlier attempt left removed first); a failed result when it cannot
        start."""
        argv = worker_command(self.launch, self.run_dir, self.spec.writer_rank, command=self.request.launch,
                              config=self.request.config)
        if not self.launch.joins_run:
            clear_results(self.run_dir)
        logger.info("msmon: launching %s", " ".join(argv))
        try:
            self.process = subprocess.Popen(argv, env=self._env(), start_new_session=True)  # noqa: S603 - checked
        except OSError as exc:  # the program went away since the pre-flight check
            return results.RunResult(RunStatus.FAILED, f"cannot start {argv[0]}: {exc.strerror or exc}")
        self.program = argv[0]
        return None

    def waiting(self) -> bool:
        """One poll of the wait: False once the child ended, or the time a stop request gave it is over."""
        if self.process is None or self.process.poll() is not None:
            return False
        self._remember_children()
        if self.distributed and self.stop_requested_at is None and self._monitor_stopped():
            logger.warning("msmon: a rank was stopped by the monitor: stopping the other ranks")
            self.request_stop()
        if self.stop_requested_at is not None and (self.distributed or self.command):
            self._force_stranded()
        if self.stop_requested_at is not None and time.monotonic() - self.stop_requested_at > STOP_GRACE_S:
            logger.warning("msmon: the training did not stop within %.0f s: killing it", STOP_GRACE_S)
            return False
        return not self._only_scheduler_left()

    def _only_scheduler_left(self) -> bool:
        """After a stop request, every rank msrun started here has ended (its result written) and msrun has not
        ended within SCHEDULER_GRACE_S: its scheduler waits out MindSpore's node timeout (about 30 s) for ranks that
        stopped without finalizing the cluster, a wait with nothing left to save (`close` then ends msrun)."""
        if not self.distributed or self.command:
            return False
        if self.stop_requested_at is None:  # the ranks looked for until msrun started one, then not on every poll
            self.ranks_seen = self.ranks_seen or bool(self.workers())
            return False
        ranks = self.workers()
        self.ranks_seen = self.ranks_seen or bool(ranks)
        if not self.ranks_seen or ranks:
            return False
        now = time.monotonic()
        if self.ranks_ended_at is None:
            self.ranks_ended_at = now
        if now - self.ranks_ended_at < SCHEDULER_GRACE_S:
            return False
        logger.info("msmon: every rank has ended; msrun's scheduler is not waited for")
        return True

    def close(self) -> None:
        """Leave no process of this attempt behind."""
        self._kill_leftovers()

    def decide(self, ranks: results.RankResults) -> results.RunResult:
        """The attempt's status from its ranks' results (read once it ended) and how the child exited."""
        if self.process is None:
            raise RuntimeError("the training process was never started")
        where = rank_logs(self.run_dir, self.launch.node_rank) if self.distributed else self.run_dir / layout.MSMON_LOG
        reported = read_heartbeats(self.run_dir) if self.command else {}  # the ranks of a user's launch
        here = sorted(reported) if self.command and not self.launch.worker_num else self.launch.ranks_here
        return results.decide(
            ranks.by_rank, returncode=self.process.returncode, ranks_here=here,
            distributed=self.distributed, stop_requested=self.stop_requested_at is not None, where=where,
            untrained=self.program if self.command and not reported else None,
        )

    def _force_stranded(self) -> None:
        """After a stop request: each rank of this machine that began a step a rank which already ended will never
        take part in is told to flush and exit now (``layout.rank_force_request``); else it would wait in that
        step's collective until the framework's timeout (about 30 s on CPU, HCCL's 1,800 s by default on Ascend),
        and STOP_GRACE_S would kill it unflushed, without a result."""
        found = stranded(rank_states(read_heartbeats(self.run_dir), time.time()), read_results(self.run_dir))
        live = self.ranks() if found else {}
        for rank in found:
            if rank not in live or rank in self.forced:
                continue
            self.forced.add(rank)
            logger.warning("msmon: rank %d began a step a rank that ended will never take part in: it is told to "
                           "flush and exit now", rank)
            layout.rank_force_request(self.run_dir, rank).touch()

    def _monitor_stopped(self) -> bool:
        return any(r.status is RunStatus.STOPPED_BY_MONITOR for r in read_results(self.run_dir).values())

    def _remember_children(self) -> None:
        if self.process is None:
            return
        try:
            top = psutil.Process(self.process.pid)
            family = [top, *top.children(recursive=True)]
        except psutil.Error:
            return
        for proc in family:
            self.known.setdefault(proc.pid, proc)

    def _reporting(self) -> dict[int, psutil.Process]:
        """The live processes of this launch that wrote a rank heartbeat, by rank (`-- COMMAND`)."""
        found = {}
        for rank, beat in read_heartbeats(self.run_dir).items():
            pid = beat.get("pid")
            proc = self.known.get(pid) if isinstance(pid, int) else None
            if proc is not None and alive(proc):
                found[rank] = proc
        return found

    def workers(self) -> list[psutil.Process]:
        """The live training processes: the worker child, or msrun's ranks (not msrun, not its scheduler)."""
        self._remember_children()
        if self.command:
            return list(self._reporting().values())
        if not self.distributed:
            return [p for p in self.known.values() if self.process and p.pid == self.process.pid and alive(p)]
        found = []
        for proc in self.known.values():
            try:
                if alive(proc) and WORKER_MODULE in proc.cmdline() and proc.environ().get("MS_ROLE") == "MS_WORKER":
                    found.append(proc)
            except psutil.Error:
                continue
        return found

    def ranks(self) -> dict[int, psutil.Process]:
        """This machine's live training processes by global rank (``RANK_ID``, as msrun exported it)."""
        if self.command:
            self._remember_children()
            return self._reporting()
        if not self.distributed:
            return dict(enumerate(self.workers()[:1]))
        found = {}
        for proc in self.workers():
            try:
                found[int(proc.environ().get("RANK_ID", ""))] = proc
            except (psutil.Error, ValueError):
                continue
        return found

    def _signal_workers(self) -> None:
        """SIGTERM each rank, and SIGCONT to a stopped one (SIGSTOP, a debugger) so that it can act on it."""
        for proc in self.workers():
            try:
                proc.send_signal(signal.SIGTERM)
                if proc.status() == psutil.STATUS_STOPPED:
                    proc.send_signal(signal.SIGCONT)
            except psutil.Error:
                continue

    def request_stop(self) -> None:
        """Ask every rank to stop at its next step end (one SIGTERM each); a launch of the user's whose processes
        train no Trainer yet gets SIGTERM in its process group (nothing of msmon's to flush there)."""
        if self.stop_requested_at is None:
            self.stop_requested_at = time.monotonic()
        if self.command and not self.workers() and self.process is not None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
            except OSError:
                pass
            return
        self._signal_workers()

    def force_stop(self) -> None:
        """Second signal: the ranks flush and exit now; whatever remains after a grace period is killed."""
        self._signal_workers()
        psutil.wait_procs(self.workers(), timeout=FORCE_GRACE_S)
        self._kill_leftovers()

    def _kill_leftovers(self) -> None:
        """Kill the child's process group and every descendant seen (msrun's ranks run in their own sessions)."""
        self._remember_children()
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except OSError:
                pass
        procs = [p for p in self.known.values() if alive(p)]
        for proc in procs:
            try:
                proc.kill()
            except psutil.Error:
                continue
        psutil.wait_procs(procs, timeout=5)
        if self.process is not None:
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
