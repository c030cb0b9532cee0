"""Overhead of msmon's callback on the real tiny mindformers Trainer (CPU), measured side by side.

    .venv/bin/python bench/bench_callback_overhead.py [--steps 400] [--block 20]

Every run is one real Trainer run (``--steps`` steps) in its own child process; step time = wall
time between consecutive step ends (msmon's own call at the earlier one included), the first
``2 x --block`` steps (graph compile) left out.
Two measurements, printed side by side:
  gated   in one process msmon's callback is switched on and off in alternating blocks of
          ``--block`` steps (same process, same compiled graph); each "on" block's median step
          time over the mean of the "off" blocks on either side of it; the verdict is the median of
          every round's blocks pooled, printed beside each round's own median and their spread;
  runs    separate processes, interleaved ``--rounds`` times: baseline (no msmon at all) and each
          scenario with msmon on for every step (writer threads, backends and all):
          each run's median step time over the mean of its round's baselines before and after it, the
          median over the rounds. On a shared machine separate runs differ by far more than 1% (the
          baseline runs are printed): the verdict uses the gated ratio. Each run also gives its process's
          CPU time per step (every thread, from the warm-up's end to the last step). Each round runs a
          baseline before the scenarios and a second one after them ("control"); the "process CPU" line pairs
          each run with the mean of the two (a machine that drifts over the round cancels out, as in the gated
          blocks; target <= 1.02) and prints beside it the ratio to the baseline before it alone; the control
          line (after / before) shows what two identical processes differ by. Each run also measures the CPU
          that other processes used beside it (/proc/stat less its own): a pair with more than DISTURBED_MS per
          step is left out of the verdict and named, as long as 5 pairs remain. The "by thread" line splits the
          CPU per step by thread name (/proc: MindSpore's ActorThread / KernelThread, and "python": the
          training thread and msmon's).
Scenarios and targets:
  core      5 core metrics, file + mindinsight, log_interval 10 (the defaults: flight recorder on,
            layer_grad_norm off)                                       target <= 1.01
  layers    core + layer_grad_norm, log_interval 10                    target <= 1.02
  profileaction  core + the writing rank's health detectors, throughput_drop and slow_step with action: profile
            configured and never triggered (the baseline profile, 5 steps after step 20, taken once)  target <= 1.01
  moerouting  the MoE quickstart (quickstart-moe.yaml: 2 MoE layers, 4 experts, top-2) with core + moe_routing; its
            gate switches the routing records alone (msmon's callback on in every block; msmon.engine.routing.enable
            on and off a step before the block: an on block pays 9 of its 10 steps' adds of the routers' shares and
            the read at its logging step, an off block 1 add)
            target <= 1.01 (gated only: its separate runs would have no MoE baseline)
  ranks2    the same on 2 data-parallel ranks through msrun (real AllReduce): rank 0 writes, rank 1 reads its
            loss/grad_norm at its logging steps for its heartbeat; each rank gated in the same blocks
            (one row per rank)                                        target <= 1.01 on every rank
  all       every backend (file, mindinsight, tensorboard, mlflow server), log_interval 1   <= 1.03
  blocking  file + a backend blocking 2 s per write, log_interval 1   <= 1.02, bounded memory
  idle      core's session and backends without the callback: what msmon's threads alone cost (runs only)
  fileonly  core with the file backend alone (one backend thread)
  filemem   core with the file backend and the tests' in-memory backend (two backend threads, no MindInsight)
  perbackend  core with one worker thread per backend, as msmon ran its backends before they shared one (#29)
The callback's own cost (microseconds per call) is timed on non-logging and logging steps, and at step begin
(one monotonic read: the heartbeat's "step begun"). Every rank's heartbeat thread rewrites heartbeats/rank_N.json
once a second in the on and the off blocks alike: one write's cost is timed and printed as a share of a second.
``layers`` also changes the compiled train step (runner_wrapper.local_norm: each gradient's squared sum is
computed and returned). Its gated run therefore switches the train step too: a second wrapper cell without
local_norm, on the same network and optimizer, runs the "off" blocks (MindSpore's Model calls
``model._train_network`` at every step; the gate repoints it), so each "on" block pays msmon's callback and the
local_norm graph, each "off" block neither.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]  # this checkout's msmon, whichever one the venv installed

PROCESS_CPU_TARGET = 1.02  # whole processes alternated: CPU per step with msmon over without
DISTURBED_MS = 1.0  # other processes' CPU per step beside a run above which its pair is left out of the verdict
RSS_TARGET_MB = 100  # whole processes alternated: the host memory msmon adds to a rank
CORE = ["loss", "grad_norm", "learning_rate", "throughput", "global_step"]
SCENARIOS: dict[str, dict[str, Any]] = {
    "core": {"monitor_type": ["file", "mindinsight"], "log_interval": 10, "target": 1.01},
    "layers": {"monitor_type": ["file", "mindinsight"], "log_interval": 10, "target": 1.02,
               "metrics": [*CORE, "layer_grad_norm"]},
    "ranks2": {"monitor_type": ["file", "mindinsight"], "log_interval": 10, "target": 1.01, "ranks": 2},
    "all": {"monitor_type": ["file", "mindinsight", "tensorboard", "mlflow"], "log_interval": 1, "target": 1.03},
    "blocking": {"monitor_type": ["file", "blocking"], "log_interval": 1, "target": 1.02, "queue_size": 100},
    "idle": {"monitor_type": ["file", "mindinsight"], "log_interval": 10, "target": 1.01, "callback": False},
    "fileonly": {"monitor_type": ["file"], "log_interval": 10, "target": 1.01},
    "filemem": {"monitor_type": ["file", "memory"], "log_interval": 10, "target": 1.01},
    "perbackend": {"monitor_type": ["file", "mindinsight"], "log_interval": 10, "target": 1.01,
                   "thread_per_backend": True},
    "profileaction": {"monitor_type": ["file", "mindinsight"], "log_interval": 10, "target": 1.01,
                      "health": {"throughput_drop": {"action": "profile"}, "slow_step": {"enabled": True,
                                                                                          "action": "profile"}}},
    "moerouting": {"monitor_type": ["file", "mindinsight"], "log_interval": 10, "target": 1.01,
                   "source": "quickstart-moe.yaml", "metrics": [*CORE, "moe_routing"], "gate": "routing"},
}


def child(scenario: str, steps: int, block: int, workdir: Path, mlflow_uri: str | None, gated: bool) -> dict[str, Any]:
    """One real Trainer run (scenario ``none``: without msmon); returns the measurements."""
    import psutil
    from engine_support import FAKES, BlockingBackend
    from helpers_training import quickstart_parts, training_yaml, write_quickstart_config

    from msmon.config.coerce import build
    from msmon.config.loader import QUICKSTARTS_DIR
    from msmon.config.mindformers_yaml import fit_checkpoint_section
    from msmon.config.schema import MonitorSettings
    from msmon.engine.backends import register_backend
    from msmon.engine.session import MonitorSession
    from msmon.runner.trainer import import_framework, train

    for cls in FAKES:
        register_backend(cls)
    BlockingBackend.delay = 2.0
    spec = SCENARIOS.get(scenario, SCENARIOS["core"])
    world = int(spec.get("ranks", 1))
    rank = int(os.environ.get("RANK_ID", "0")) if world > 1 else 0
    workdir = workdir / f"rank_{rank}" if world > 1 else workdir
    workdir.mkdir(parents=True, exist_ok=True)
    os.chdir(workdir)
    import_framework(workdir / "logs")  # before msmon's session, as msmon run's ranks and its launch hook do
    parallel = {"use_parallel": True, "parallel_config.data_parallel": world, "parallel.full_batch": False}
    path = write_quickstart_config(
        workdir, steps=steps, log_interval=spec["log_interval"], monitor_type=spec["monitor_type"], verbose=False,
        track_metrics=spec.get("metrics", CORE), mlflow={"tracking_uri": mlflow_uri},
        writer={"queue_size": spec.get("queue_size", 1000)}, overrides=parallel if world > 1 else None,
        **({"health": spec["health"]} if "health" in spec else {}),
        **({"source": QUICKSTARTS_DIR / spec["source"]} if "source" in spec else {}),
    )
    training, monitor = quickstart_parts(path)
    fit_checkpoint_section(training)  # as msmon hands it over: no checkpoint: section on data-parallel ranks
    settings, _ = build(MonitorSettings, monitor, "monitor_config")
    settings = replace(settings, monitor_type=spec["monitor_type"])  # "blocking" is a registered test backend
    if spec.get("thread_per_backend"):
        import msmon.engine.session as session_module
        from msmon.engine.backend_thread import BackendThread

        def thread_per_backend(backends: list[Any], queue_size: int) -> list[BackendThread]:
            return [BackendThread(f"msmon-{backend.name}", [backend], queue_size) for backend in backends]

        session_module.backend_threads = thread_per_backend
    session = None
    if scenario != "none":
        session = MonitorSession(settings, settings.run_dir(), config=training, rank=rank, world_size=world).start()
        if "health" in spec:  # the writing rank's detectors, as msmon run's worker attaches them
            from msmon.health import attach

            attach(session, settings, settings.run_dir(), training, stall=False)
    inner = session.callback() if session is not None and spec.get("callback", True) else None
    routing_gate = inner is not None and spec.get("gate") == "routing"  # msmon on throughout, the routing gated
    adds: list[float] = []  # seconds of each step's adds of the routers' shares (the routing's per-step cost)
    if routing_gate:
        from msmon.engine import routing

        add_shares = routing.add_shares

        def timed_add_shares(model: Any, top_k: int) -> None:
            begun = time.perf_counter()
            add_shares(model, top_k)
            adds.append(time.perf_counter() - begun)

        routing.add_shares = timed_add_shares  # the tap looks it up at every call
    interval = spec["log_interval"]
    block = max(block, interval)  # every "on" block starts with a logging step
    process = psutil.Process()
    from mindspore.train import Callback

    class Gate(Callback):
        def __init__(self) -> None:
            super().__init__()
            self.last: float | None = None
            self.was_on = False
            self.routing_on = True  # the callback's on_train_begin enables the routing records
            self.on: list[float] = []
            self.off: list[float] = []
            self.cost_log: list[float] = []
            self.cost_plain: list[float] = []
            self.cost_begin: list[float] = []
            self.rss: list[float] = []
            self.blocks: dict[int, list[float]] = {}
            self.cells: dict[bool, Any] = {}
            self.model: Any = None
            self.graphs: set[tuple[bool, int]] = set()  # (local_norm cell ran, outputs returned)
            self.cpu: dict[int, float] = {}  # step -> the process's CPU seconds (every thread) at its end
            self.tasks: dict[int, dict[str, float]] = {}  # at the warm-up's end and the last step: task_cpu()
            self.machine: dict[int, tuple[float, float]] = {}  # the same steps: (the machine's busy CPU, the run's)

        def on_train_begin(self, run_context: Any) -> None:
            self.threads_at_begin = msmon_thread_cpu()
            if inner is not None:
                inner.on_train_begin(run_context)
            if gated and scenario == "layers":
                self.model, self.cells = train_step_pair(run_context.original_args().train_network)

        def on_train_step_begin(self, run_context: Any) -> None:
            if self.was_on or routing_gate:
                started = time.perf_counter()
                inner.on_train_step_begin(run_context)
                self.cost_begin.append(time.perf_counter() - started)

        def on_train_step_end(self, run_context: Any) -> None:
            now = time.perf_counter()
            step = run_context.original_args().cur_step_num
            if self.last is not None and step > 2 * block:  # skip the graph compile and warm-up
                (self.on if self.was_on else self.off).append(now - self.last)
                self.blocks.setdefault((step - 1) // block, []).append(now - self.last)
            self.was_on = inner is not None and (not gated or (step // block) % 2 == 1)
            if routing_gate:  # a step early: the on block's first (logging) step reads a window, its last adds none
                routing_on = not gated or ((step + 1) // block) % 2 == 1
                if routing_on != self.routing_on:
                    self.routing_on = routing_on
                    routing.enable(routing_on)
            if self.cells:  # an interval holds one msmon call and the next step: both on, or both off
                outputs = run_context.original_args().net_outputs
                self.graphs.add((self.model._train_network is self.cells[True], len(outputs)))
                self.model._train_network = self.cells[self.was_on]
            if self.was_on or routing_gate:
                started = time.perf_counter()
                inner.on_train_step_end(run_context)
                cost = time.perf_counter() - started
                if self.was_on:
                    (self.cost_log if step % interval == 0 else self.cost_plain).append(cost)
            if step % 50 == 0:
                self.rss.append(process.memory_info().rss / 2**20)
            if step >= 2 * block:
                self.cpu[step] = time.process_time()
            if step == 2 * block or step == steps:
                self.tasks[step] = task_cpu()
                self.machine[step] = (machine_busy_s(), time.process_time())
            self.last = now  # the next interval holds this step's msmon call: its own time counts too

    gate = Gate()
    started = time.monotonic()
    train(training_yaml(training, workdir), [gate], workdir / "logs")
    train_s = time.monotonic() - started
    threads = {name: cpu - gate.threads_at_begin.get(name, 0.0) for name, cpu in msmon_thread_cpu().items()}
    beat_us = None
    if session is not None:  # the heartbeat thread's write, once a second in every block
        writes = []
        for _ in range(20):
            begun = time.perf_counter()
            session.rank_heartbeat.write()
            writes.append(time.perf_counter() - begun)
        beat_us = statistics.median(writes) * 1e6
    summary = session.close("completed") if session is not None else None
    pairs = block_ratios({b: statistics.median(times) for b, times in gate.blocks.items() if len(times) > 2})
    return {
        "pair_ratio": statistics.median(pairs) if pairs else None, "pair_ratios": pairs,
        "scenario": scenario, "gated": gated, "rank": rank,
        "cost_begin_us": statistics.median(gate.cost_begin) * 1e6 if gate.cost_begin else None,
        "heartbeat_write_us": beat_us,
        "on_ms": statistics.median(gate.on) * 1e3 if gate.on else None,
        "off_ms": statistics.median(gate.off) * 1e3 if gate.off else None,
        "n_on": len(gate.on), "n_off": len(gate.off),
        "cost_plain_us": statistics.median(gate.cost_plain) * 1e6 if gate.cost_plain else None,
        "cost_log_us": statistics.median(gate.cost_log) * 1e6 if gate.cost_log else None,
        "rss_mb": gate.rss, "train_s": train_s, "dropped": summary.dropped_records if summary else 0,
        "written": {name: b["written"] for name, b in summary.backends.items()} if summary else {},
        "graphs": sorted(gate.graphs),
        "threads_cpu_s": threads, "steps_on": len(gate.cost_plain) + len(gate.cost_log), "logged": len(gate.cost_log),
        "callback_cpu_s": sum(gate.cost_plain) + sum(gate.cost_log) + sum(gate.cost_begin),
        "process_cpu_ms": process_cpu_per_step(gate.cpu),
        "tasks_cpu_ms": tasks_per_step(gate.tasks),
        "others_cpu_ms": others_per_step(gate.machine),
        "routing_add_us": statistics.median(adds) * 1e6 if adds else None,
    }


def process_cpu_per_step(cpu: dict[int, float]) -> float | None:
    """The whole process's CPU milliseconds per step (every thread: MindSpore's, msmon's), from the end of the
    warm-up to the last step."""
    if len(cpu) < 2:
        return None
    first, last = min(cpu), max(cpu)
    return (cpu[last] - cpu[first]) / (last - first) * 1e3


def task_cpu() -> dict[str, float]:
    """CPU seconds of every thread of this process (MindSpore's native ones too, from /proc), summed by thread name
    with its digits dropped (``RuntimeN``)."""
    import re

    tick = os.sysconf("SC_CLK_TCK")
    found: dict[str, float] = {}
    for stat in Path("/proc/self/task").glob("*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the thread ended meanwhile
            continue
        name = re.sub(r"\d+", "N", text[text.index("(") + 1 : text.rindex(")")])
        fields = text[text.rindex(")") + 2 :].split()
        found[name] = found.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick  # utime + stime
    return found


def machine_busy_s() -> float:
    """CPU seconds the whole machine has been busy (every process, every core: /proc/stat less idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def others_per_step(machine: dict[int, tuple[float, float]]) -> float | None:
    """The CPU milliseconds per step that other processes (and the hypervisor's steal) used beside this run, between
    the two samples: above a millisecond or so the machine was not idle and the run's CPU is not comparable."""
    if len(machine) < 2:
        return None
    (first, (busy0, own0)), (last, (busy1, own1)) = sorted(machine.items())
    return max(0.0, (busy1 - busy0) - (own1 - own0)) / (last - first) * 1e3


def tasks_per_step(tasks: dict[int, dict[str, float]]) -> dict[str, float]:
    """Each thread name's CPU milliseconds per step between the two ``task_cpu`` samples."""
    if len(tasks) < 2:
        return {}
    (first, begin), (last, end) = sorted(tasks.items())
    return {name: (cpu - begin.get(name, 0.0)) / (last - first) * 1e3 for name, cpu in end.items()}


def block_ratios(medians: dict[int, float]) -> list[float]:
    """Each "on" block's median step time (odd blocks) over the mean of the "off" blocks on either side of it: a
    steady drift of a shared machine cancels out (against the block before alone it would count as overhead)."""
    ratios = []
    for block, on in sorted(medians.items()):
        off = [medians[b] for b in (block - 1, block + 1) if b in medians]
        if block % 2 == 1 and off:
            ratios.append(on / statistics.mean(off))
    return ratios


def msmon_thread_cpu() -> dict[str, float]:
    """CPU seconds each of msmon's threads has used so far (its own CPU clock: not the machine's noise)."""
    import threading

    found = {}
    for thread in threading.enumerate():
        if thread.name.startswith("msmon") and thread.ident is not None:
            try:
                found[thread.name] = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
            except OSError:  # the thread ended meanwhile
                continue
    return found


def train_step_pair(cell: Any) -> tuple[Any, dict[bool, Any]]:
    """The Model running ``cell`` (a wrapper with local_norm on) and {True: cell, False: the same wrapper class
    without local_norm on the same network and optimizer}."""
    import gc

    from mindspore.train import Model

    model = next(o for o in gc.get_objects() if isinstance(o, Model) and o._train_network is cell)
    plain = type(cell)(cell.network, cell.optimizer, use_clip_grad=cell.use_clip_grad, scale_sense=1.0,
                       max_grad_norm=float(cell.clip_grad_norm.clip_norm.asnumpy()[0]), local_norm=False)
    plain.set_train(True)
    return model, {True: cell, False: plain}


def start_mlflow(directory: Path) -> Any:
    from engine_support import MlflowServer

    return MlflowServer(directory)


def run_child(args: argparse.Namespace, scenario: str, gated: bool, workdir: Path, mlflow: str | None) -> list[dict]:
    """One run: one result, or one per rank (``ranks`` scenarios run through msrun)."""
    workdir.mkdir(parents=True)
    cmd = [sys.executable, __file__, "--child", scenario, "--steps", str(args.steps), "--block", str(args.block),
           "--workdir", str(workdir)] + (["--gated"] if gated else []) + (["--mlflow", mlflow] if mlflow else [])
    ranks = int(SCENARIOS.get(scenario, {}).get("ranks", 1))
    env = dict(os.environ)
    if ranks > 1:  # msrun starts `python SCRIPT ARGS` per rank (and once more as its scheduler)
        from msmon.runner.msrun import msrun_binary
        from msmon.util.net import free_port

        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        cmd = msrun_binary() + [f"--worker_num={ranks}", f"--local_worker_num={ranks}", "--join=True",
                                f"--master_port={free_port('127.0.0.1')}", f"--log_dir={workdir / 'msrun'}",
                                "python", *cmd[1:]]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    out = proc.stdout if ranks == 1 else "".join(p.read_text() for p in sorted((workdir / "msrun").glob("worker_*")))
    lines = [x for x in out.splitlines() if x.startswith("RESULT ")]
    if proc.returncode != 0 or len(lines) < ranks:
        raise RuntimeError(f"{scenario}: failed\n{proc.stderr[-3000:]}")
    return sorted((json.loads(line[7:]) for line in lines), key=lambda r: r["rank"])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--block", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", default=None)
    parser.add_argument("--gated", action="store_true")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--mlflow", default=None)
    parser.add_argument("--only", nargs="*", default=list(SCENARIOS))
    args = parser.parse_args()
    from helpers_training import BATCH_SIZE

    from msmon.config.datasets import DATASETS

    most = DATASETS["quickstart"].samples // BATCH_SIZE
    if args.steps > most:
        parser.error(f"--steps {args.steps}: the quickstart's dataset holds {most} steps; use --rounds for more blocks")
    if args.child and os.environ.get("MS_ROLE") == "MS_SCHED":  # msrun's scheduler: serve the cluster, nothing else
        from mindspore.communication import init

        init()
        return 0
    if args.child:
        result = child(args.child, args.steps, args.block, Path(args.workdir), args.mlflow, args.gated)
        print("RESULT " + json.dumps(result))
        return 0
    gated: dict[str, list[dict[str, Any]]] = {name: [] for name in args.only}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in ["none", *args.only]}
    control: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="msmon_bench_") as tmp:
        server = start_mlflow(Path(tmp) / "mlflow") if "all" in args.only else None
        url = server.url if server is not None else None
        try:
            for round_ in range(args.rounds):
                for scenario in args.only:
                    if not SCENARIOS[scenario].get("callback", True):
                        continue  # nothing to gate
                    workdir = Path(tmp) / f"gated_{scenario}_{round_}"
                    gated[scenario].extend(run_child(args, scenario, True, workdir, url))
                for scenario in runs:
                    if SCENARIOS.get(scenario, {}).get("ranks", 1) > 1 or "gate" in SCENARIOS.get(scenario, {}):
                        continue  # separate multi-rank runs differ by more than the effect; no MoE baseline: gated
                    runs[scenario].extend(run_child(args, scenario, False, Path(tmp) / f"{scenario}_{round_}", url))
                # a second run without msmon in each round: what two identical processes differ by (the control)
                control.extend(run_child(args, "none", False, Path(tmp) / f"control_{round_}", url))
        finally:
            if server is not None:
                server.stop()
    base = statistics.median(r["off_ms"] for r in runs["none"])
    each = ", ".join(f"{r['off_ms']:.2f}" for r in runs["none"])
    print(f"steps {args.steps}, block {args.block}, rounds {args.rounds}; baseline median step {base:.2f} ms ({each})")
    print(f"{'scenario':9} {'gated':>6} {'runs':>6} {'target':>6}  {'non-log us':>10} {'log us':>8} {'begin us':>8} "
          f"{'beat us':>7}  {'RSS MB':>11}  dropped  written  gated ratio per round")
    for scenario in args.only:
        for rank in sorted({g["rank"] for g in gated[scenario]}):
            print(row(scenario, [g for g in gated[scenario] if g["rank"] == rank], runs.get(scenario), runs["none"],
                      control))
    for scenario in args.only:
        if runs.get(scenario):
            if SCENARIOS[scenario].get("callback", True):
                print(cpu_line(scenario, runs[scenario]))
            print(process_cpu_line(scenario, runs[scenario], runs["none"], control))
            print(task_line(scenario, runs[scenario], runs["none"]))
            print(rss_line(scenario, runs[scenario], runs["none"]))
    print(process_cpu_line("control", control, runs["none"], target=None).replace(
        "on / off", "after / before, no msmon in either"))
    return 0


def process_cpu_line(scenario: str, runs: list[dict[str, Any]], before: list[dict[str, Any]],
                     after: list[dict[str, Any]] | None = None, target: float | None = PROCESS_CPU_TARGET) -> str:
    """Whole processes alternated: each run's CPU per step (every thread) over the round's baseline runs (the mean of
    the one before and the one after it when given; the one before alone beside it). A pair in which another
    process used more than DISTURBED_MS per step beside any of its runs is left out of the verdict (named), as long
    as 5 pairs remain. ``target`` None: a line without a verdict (the control: the noise floor)."""
    def cpu(run: dict[str, Any]) -> float:
        return float(run["process_cpu_ms"])

    def others(*group: dict[str, Any]) -> float:
        return max(float(r.get("others_cpu_ms") or 0.0) for r in group)

    alone = [cpu(on) / cpu(off) for on, off in zip(runs, before, strict=True)]
    if after is not None:
        pairs = [(cpu(on) / ((cpu(off) + cpu(next_)) / 2), others(on, off, next_))
                 for on, off, next_ in zip(runs, before, after, strict=True)]
    else:
        pairs = [(ratio, others(on, off)) for ratio, on, off in zip(alone, runs, before, strict=True)]
    quiet = [ratio for ratio, busy in pairs if busy <= DISTURBED_MS]
    counted = quiet if len(quiet) >= 5 else [ratio for ratio, _ in pairs]
    left_out = [f"{ratio:.3f} ({busy:.1f} ms)" for ratio, busy in pairs if busy > DISTURBED_MS]
    ratio = statistics.median(counted)
    verdict = "the noise floor" if target is None else f"target <={target}: {'ok' if ratio <= target else 'MISSED'}"
    base = statistics.median(cpu(r) for r in before)
    against = "the mean of the baselines before and after" if after is not None else "the baseline before"
    beside = f"; against the one before alone {statistics.median(alone):.3f}" if after is not None else ""
    quartiles = statistics.quantiles(counted, n=4) if len(counted) >= 2 else [ratio, ratio, ratio]
    busy = [b for _, b in pairs]
    dropped = ", ".join(left_out) or "none"
    if left_out and counted is not quiet:
        dropped = f"none, fewer than 5 pairs would remain (disturbed: {dropped})"
    machine = (f"; other processes beside the runs: median {statistics.median(busy):.2f}, max {max(busy):.2f} ms per "
               f"step; left out (> {DISTURBED_MS} ms): {dropped}")
    each = " ".join(f"{p:.3f}" for p, _ in pairs)
    return (f"{scenario} process CPU per step, on / off, {len(counted)} pairs against {against}: {ratio:.3f} "
            f"(quartiles {quartiles[0]:.3f}-{quartiles[2]:.3f}; pairs {each}{beside}; "
            f"baseline {base:.1f} ms per step{machine}), {verdict}")


def task_line(scenario: str, runs: list[dict[str, Any]], baseline: list[dict[str, Any]]) -> str:
    """Where the process CPU goes: each thread name's CPU per step, on and off (medians over the rounds), the
    largest differences first."""
    names = {name for r in [*runs, *baseline] for name in r["tasks_cpu_ms"]}

    def median_of(group: list[dict[str, Any]], name: str) -> float:
        return statistics.median(r["tasks_cpu_ms"].get(name, 0.0) for r in group)

    rows = sorted(((median_of(runs, n), median_of(baseline, n), n) for n in names), key=lambda t: -abs(t[0] - t[1]))
    each = ", ".join(f"{name} {on:.2f}/{off:.2f}" for on, off, name in rows if max(on, off) >= 0.01)
    return f"{scenario} CPU ms per step by thread, on/off (medians): {each}"


def rss_line(scenario: str, runs: list[dict[str, Any]], baseline: list[dict[str, Any]]) -> str:
    """Whole processes alternated: the host memory msmon adds (each run's largest RSS sample minus the baseline
    run's of its round; every 50 steps)."""
    added = [max(on["rss_mb"]) - max(off["rss_mb"]) for on, off in zip(runs, baseline, strict=True)]
    verdict = "ok" if statistics.median(added) <= RSS_TARGET_MB else "MISSED"
    each = " ".join(f"{mb:+.0f}" for mb in added)
    return (f"{scenario} host memory msmon adds per process (RSS on - off), {len(added)} pairs: "
            f"{statistics.median(added):+.0f} MB (pairs {each}), target <={RSS_TARGET_MB} MB: {verdict}")


def cpu_line(scenario: str, runs: list[dict[str, Any]]) -> str:
    """CPU seconds msmon used in the runs with monitoring on for every step (median over the rounds): its threads
    and the callback on the training thread, per 1,000 steps and per logged record, and each thread's share."""
    def per(key: Any, unit: str) -> float:
        return statistics.median(key(r) / max(1, r[unit]) for r in runs)

    threads = per(lambda r: sum(r["threads_cpu_s"].values()), "steps_on") * 1e6
    callback = per(lambda r: r["callback_cpu_s"], "steps_on") * 1e6
    record = per(lambda r: sum(r["threads_cpu_s"].values()) + r["callback_cpu_s"], "logged") * 1e3
    names = sorted({name for r in runs for name in r["threads_cpu_s"]})
    shares = {name: per(lambda r, n=name: r["threads_cpu_s"].get(n, 0.0), "steps_on") * 1e6 for name in names}
    each = ", ".join(f"{name.removeprefix('msmon-')} {ms:.0f}" for name, ms in shares.items())
    return (f"{scenario} CPU per 1,000 steps: threads {threads:.0f} ms + callback {callback:.0f} ms; per logged record "
            f"{record:.2f} ms (threads, ms per 1,000 steps: {each})")


def row(scenario: str, gated: list[dict[str, Any]], runs: list[dict[str, Any]] | None, before: list[dict[str, Any]],
        after: list[dict[str, Any]]) -> str:
    """One scenario (one rank of it) side by side: gated ratio, separate-run ratio (each run's median step time over
    the mean of its round's baselines before and after it, the median over the rounds), costs, memory,
    accounting."""
    name = f"{scenario}/r{gated[0]['rank']}" if SCENARIOS[scenario].get("ranks", 1) > 1 else scenario
    gated_ratio = statistics.median(r for g in gated for r in g["pair_ratios"])  # every round's blocks pooled
    run_ratio = statistics.median(on["on_ms"] / ((off["off_ms"] + next_["off_ms"]) / 2)
                                  for on, off, next_ in zip(runs, before, after, strict=True)) if runs else float("nan")
    target = SCENARIOS[scenario]["target"]
    rss_values = [value for x in gated for value in x["rss_mb"]]
    rss = f"{min(rss_values):.0f}->{max(rss_values):.0f}"
    verdict = "ok" if gated_ratio <= target else "MISSED"  # runs: only as good as the machine's quiet
    if scenario == "layers" and any(x["graphs"] != [[False, 5], [True, 7]] for x in gated):
        verdict = f"NOT GATED {[x['graphs'] for x in gated]}"  # the swap must change the train step

    def median_of(key: str) -> float:
        values = [x[key] for x in gated if x.get(key) is not None]
        return statistics.median(values) if values else float("nan")

    costs = (f"{median_of('cost_plain_us'):10.1f} {median_of('cost_log_us'):8.1f} {median_of('cost_begin_us'):8.2f} "
             f"{median_of('heartbeat_write_us'):7.0f}")
    ratios = [g["pair_ratio"] for g in gated]
    blocks = sum(len(g["pair_ratios"]) for g in gated)
    pairs = " ".join(f"{r:.3f}" for r in ratios) + f" (spread {max(ratios) - min(ratios):.3f}; {blocks} blocks)"
    adds = (f"; the routers' shares added in {median_of('routing_add_us'):.0f} us a step, steps "
            f"{median_of('off_ms'):.1f} ms off") if gated[0].get("routing_add_us") is not None else ""
    return (f"{name:9} {gated_ratio:6.3f} {run_ratio:6.3f} {'<=' + str(target):>6}  {costs}  {rss:>11}  "
            f"{gated[0]['dropped']:7d}  {gated[0]['written']}  {pairs}  {verdict}{adds}")


if __name__ == "__main__":
    sys.exit(main())
