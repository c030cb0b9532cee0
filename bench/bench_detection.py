"""Detection-quality benchmark of msmon's health detectors (the same HealthMonitor `msmon replay` runs).

    .venv/bin/python bench/bench_detection.py

Labelled traces: the clean real quickstart traces of bench/traces/ (several learning rates and seeds,
recorded by bench/record_traces.py), the same traces with ordinary +15% loss bumps or 10% of the
records lost (all must stay quiet),
the real dead run (lr 1e4), and every clean trace with one injected fault: NaN, Inf, a loss spike,
1%/step grad-norm growth (loss untouched), flat lines, zero grad, LR faults, throughput drops to 60%, 50% and
30% and a
time gap. Each runs at log_interval 1 and 10: the traces hold every step, so the interval-10 records
carry grad_norm_mean/grad_norm_max/loss_mean exactly as the live callback computes them (interval 10
with single values, as in files written before those keys, is printed too). Grad-norm growth is
injected twice: as a level that climbs 1%/step (the run's own trend replaced, its noise kept: the
target) and as x1.01^step on top of the run's own trend, which in several traces falls by about as
much. Prints recall, false
alarms and detection delay in steps, the article's night (growth from step 300, loss blow-up at
800) on the 1000-step trace, then the live stall check's delay (msmon run's parent over a rank
heartbeat) against timeout + 2 s.
"""

from __future__ import annotations

import math
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from msmon.config.health import HealthSettings, StallSettings  # noqa: E402
from msmon.engine.record import StepProgress, interval_stats  # noqa: E402
from msmon.health.alert import Alert  # noqa: E402
from msmon.health.monitor import HealthMonitor  # noqa: E402
from msmon.records import read_records  # noqa: E402

TRACES = ROOT / "bench" / "traces"
START = 150  # fault onset step
Record = dict[str, object]
Inject = Callable[[list[Record]], list[Record]]


def quickstart_config(records: list[Record]) -> dict:
    """The quickstart's lr_schedule and vocabulary (msmon/config/quickstarts/quickstart.yaml), as the trace's run had
    them."""
    peak = max(float(r["learning_rate"]) for r in records)
    return {"lr_schedule": {"type": "CosineWithWarmUpLR", "learning_rate": peak, "lr_end": 5e-4,
                            "warmup_ratio": 0.05, "total_steps": int(records[-1]["step"])},
            "model": {"model_config": {"vocab_size": 1000}}}


def run(records: list[Record], config: dict, settings: HealthSettings | None = None) -> list[Alert]:
    monitor = HealthMonitor(settings or HealthSettings(), config)
    for record in records:
        monitor.observe(dict(record))
    return monitor.alerts


def each(records: list[Record], change: Callable[[Record], None], start: int = START) -> list[Record]:
    out = [dict(r) for r in records]
    for r in out:
        if int(r["step"]) >= start:
            change(r)
    return out


def once(records: list[Record], change: Callable[[Record], None], start: int = START) -> list[Record]:
    out = [dict(r) for r in records]
    for r in out:
        if int(r["step"]) >= start:
            change(r)
            break
    return out


def spike(factor: float) -> Inject:
    def inject(records: list[Record]) -> list[Record]:
        return [{**r, "loss": float(r["loss"]) * factor} if START <= int(r["step"]) < START + 30 else dict(r)
                for r in records]

    return inject


def growth(records: list[Record]) -> list[Record]:
    """grad_norm x 1.01^(step - START): 1%/step on top of the run's own trend (which may fall)."""
    return each(records, lambda r: r.update(grad_norm=float(r["grad_norm"]) * 1.01 ** (int(r["step"]) - START)))


def level(records: list[Record], half: int = 25) -> dict[int, float]:
    """The run's own grad_norm level per step: the median over +-``half`` steps."""
    norms = [(int(r["step"]), float(r["grad_norm"])) for r in records]
    return {s: statistics.median(g for t, g in norms if abs(t - s) <= half) for s, _ in norms}


def detrended(start: int = START) -> Inject:
    """The observed grad_norm level grows exactly 1%/step from ``start`` (the run's own trend removed,
    its noise kept)."""

    def inject(records: list[Record]) -> list[Record]:
        own = level(records)
        base = own[min(own, key=lambda s: abs(s - start))]
        return each(records, lambda r: r.update(grad_norm=float(r["grad_norm"]) * base / own[int(r["step"])]
                                                * 1.01 ** (int(r["step"]) - start)), start)

    return inject


def flat(records: list[Record]) -> list[Record]:
    frozen = next(float(r["loss"]) for r in records if int(r["step"]) >= START)
    return each(records, lambda r: r.update(loss=frozen))


def frozen_lr(records: list[Record]) -> list[Record]:
    value = next(float(r["learning_rate"]) for r in records if int(r["step"]) >= START)
    return each(records, lambda r: r.update(learning_rate=value))


def gap(records: list[Record]) -> list[Record]:
    return each(records, lambda r: r.update(time=float(r["time"]) + 120.0))


def slower(factor: float) -> Inject:
    return lambda rs: each(rs, lambda r: r.update(throughput=float(r["throughput"]) * factor))


#: Reported, not a target: on the batch-2 quickstart the loss of one step is up to 3x the next one's.
HARD: dict[str, tuple[str, Inject]] = {
    "loss spike x3 (30 steps)": ("loss_spike", spike(3)),
}
FAULTS: dict[str, tuple[str, Inject]] = {
    "nan loss": ("nonfinite", lambda rs: once(rs, lambda r: r.update(loss=math.nan))),
    "inf grad_norm": ("nonfinite", lambda rs: once(rs, lambda r: r.update(grad_norm=math.inf))),
    "loss spike x4 (30 steps)": ("loss_spike", spike(4)),
    "grad_norm level +1%/step": ("grad_explosion", detrended()),
    "grad_norm x1.01^step": ("grad_explosion", growth),
    "flat loss": ("dead_series", flat),
    "zero grad_norm": ("dead_series", lambda rs: each(rs, lambda r: r.update(grad_norm=0.0))),
    "negative lr": ("learning_rate", lambda rs: once(rs, lambda r: r.update(learning_rate=-1e-3))),
    "lr above peak (x3)": ("learning_rate", lambda rs: each(rs, lambda r: r.update(
        learning_rate=float(r["learning_rate"]) * 3))),
    "lr frozen": ("learning_rate", frozen_lr),
    "lr zero": ("learning_rate", lambda rs: each(rs, lambda r: r.update(learning_rate=0.0))),
    "throughput x0.6": ("throughput_drop", slower(0.6)),  # issue 13: a lasting drop to <= 60% is reported
    "throughput x0.5": ("throughput_drop", slower(0.5)),
    "throughput x0.3": ("throughput_drop", slower(0.3)),
    "time gap 120 s": ("stall", gap),
}


def lossy(records: list[Record], seed: int) -> list[Record]:
    """10% of the logged records lost at random (a robustness check: decisions must not hang on one point)."""
    rng = random.Random(seed)
    return [dict(r) for r in records if rng.random() > 0.1]


def bumps(records: list[Record]) -> list[Record]:
    """Ordinary +15% loss bumps of 5 steps every 40 steps (a healthy run does this)."""
    return [{**r, "loss": float(r["loss"]) * 1.15} if int(r["step"]) % 40 < 5 else dict(r) for r in records]


@dataclass
class Tally:
    cases: int = 0
    found: int = 0
    delays: list[int] = field(default_factory=list)
    early: int = 0  # alerts of any detector before the fault started
    other: set[str] = field(default_factory=set)

    def row(self, name: str, expected: str) -> str:
        delay = f"{statistics.median(self.delays):>5.0f} {max(self.delays):>5}" if self.delays else "    -     -"
        also = ",".join(sorted(self.other)) or "-"
        return f"{name:<26}{expected:<16}{self.found:>3}/{self.cases:<4}{delay}  {self.early:>5}  {also}"


def subsample(records: list[Record], interval: int) -> list[Record]:
    """The records of a run at ``interval`` without interval statistics (files written before them)."""
    return [r for r in records if int(r["step"]) % interval == 0]


def logged(records: list[Record], interval: int) -> list[Record]:
    """The records the live callback writes at ``interval``: each logging step's own values plus
    ``grad_norm_mean``/``grad_norm_max``/``loss_mean`` over the steps since the previous log (the
    traces hold every step: recorded at log_interval 1)."""
    if interval == 1:
        return [dict(r) for r in records]
    out: list[Record] = []
    window: list[Record] = []
    for r in records:
        window.append(r)
        if int(r["step"]) % interval == 0:
            record = dict(r)
            for name in ("grad_norm", "loss"):
                mean, peak = interval_stats([float(w[name]) for w in window], finite_mean=name == "grad_norm")
                record[f"{name}_mean"] = mean
                if name == "grad_norm":
                    record["grad_norm_max"] = peak
            out.append(record)
            window = []
    return out


#: How a run's records are formed: (label, interval, builder); the old mode is reported, not a target.
MODES: list[tuple[str, int, Callable[[list[Record], int], list[Record]]]] = [
    ("log_interval 1", 1, logged),
    ("log_interval 10, interval means", 10, logged),
    ("log_interval 10, single values (older files)", 10, subsample),
]


def article(records: list[Record]) -> list[Record]:
    """The seed article's night: the grad norm level climbs 1%/step from step 300 while the loss
    still falls, then the loss blows up (x4) from step 800."""
    return [{**r, "loss": float(r["loss"]) * 4} if int(r["step"]) >= 800 else r for r in detrended(300)(records)]


def stall_delay() -> tuple[float, float]:
    """The live stall check of ``msmon run``: a real rank heartbeat thread (its file rewritten every 0.2 s) over the
    session's step progress, steps of ~20 ms for 1.5 s, then a hang; the parent's RankWatcher polled as the
    supervising loop polls it. (delay, timeout) in s."""
    import tempfile

    import psutil

    from msmon.compat import PipelineLayout
    from msmon.config.schema import MonitorSettings
    from msmon.engine.rank_heartbeat import RankHeartbeat
    from msmon.runner.rank_watch import RankWatcher

    settings = MonitorSettings(health=HealthSettings(stall=StallSettings(floor_s=1.0, poll_s=0.2)))
    with tempfile.TemporaryDirectory() as run_dir:
        progress = StepProgress()  # the session's own progress, updated as the callback does
        heartbeat = RankHeartbeat(Path(run_dir), progress, 0, interval_s=0.2)
        watcher = RankWatcher(Path(run_dir), settings, {}, pipeline=PipelineLayout(1), writer_rank=0, node_rank=None)
        local = {0: psutil.Process()}  # this process is rank 0
        monitor = watcher.monitor
        assert monitor is not None
        monitor.sinks = []
        heartbeat.start()
        for step in range(1, 76):  # what the callback does at each step's begin and end (log_interval 1)
            progress.begun_step, progress.begun_monotonic = step, time.monotonic()
            time.sleep(3.0 if step == 1 else 0.02)  # step 1: compilation, ignored by the calibration
            now = time.monotonic()
            progress.add_step_seconds(now - (progress.last_end_monotonic or progress.begun_monotonic))
            progress.last_end_monotonic, progress.last_step = now, step
            watcher.poll(local)
        hung = time.monotonic()
        deadline = hung + 30
        while not monitor.alerts and time.monotonic() < deadline:
            watcher.poll(local)
            time.sleep(0.02)
        delay = time.monotonic() - hung
        heartbeat.stop("completed")
        watcher.close()
    timeout = monitor.alerts[0].values["timeout_s"] if monitor.alerts else math.nan
    return delay, timeout


def main() -> int:
    clean = {p.name: list(read_records(p)) for p in sorted(TRACES.glob("clean_*.jsonl"))}
    dead = {p.name: list(read_records(p)) for p in sorted(TRACES.glob("dead_*.jsonl"))}
    if not clean:
        print("no clean traces in bench/traces: run bench/record_traces.py first")
        return 1
    misses: list[str] = []
    print(f"{len(clean)} clean real traces ({', '.join(clean)}), fault onset at step {START}\n")
    print(f"{'trace set':<26}{'expected':<16}{'found':<8}{'delay med/max (steps)':<0}  early  other detectors")
    for mode, interval, form in MODES:
        target = form is logged
        print(f"-- {mode}" + ("" if target else " (reported: the grad growth delay is not a target here)"))
        quiet = Tally()
        for records in clean.values():
            for rs in (form(records, interval), form(bumps(records), interval),
                       lossy(form(records, interval), 0), lossy(form(records, interval), 1)):
                alerts = run(rs, quickstart_config(records))
                quiet.cases += 1
                quiet.early += len(alerts)
                quiet.other.update(a.detector for a in alerts)
        print(f"{'clean, +15% bumps, lossy':<26}{'(none)':<16}{'':>8}{'':>12}  {quiet.early:>5}  "
              f"{','.join(sorted(quiet.other)) or '-'}")
        if quiet.early:
            misses.append(f"{quiet.early} alerts on clean traces at {mode}")
        for fault, (expected, inject) in (FAULTS | HARD).items():
            tally = Tally()
            for records in clean.values():
                rs = form(inject(records), interval)
                alerts = run(rs, quickstart_config(records))
                tally.cases += 1
                hits = [a for a in alerts if a.detector == expected and a.step >= START]
                tally.early += sum(1 for a in alerts if a.step < START)
                tally.other.update(a.detector for a in alerts if a.detector != expected)
                if hits:
                    tally.found += 1
                    tally.delays.append(hits[0].step - START)
            print(tally.row(fault, expected) + ("  (reported, not a target)" if fault in HARD else ""))
            if fault not in HARD and (tally.found < tally.cases or tally.early):
                misses.append(f"{fault} found {tally.found}/{tally.cases} at {mode}")
            if target and fault == "grad_norm level +1%/step" and tally.delays and max(tally.delays) > 100:
                misses.append(f"grad growth found after {max(tally.delays)} steps at {mode}")
        for records in dead.values():
            rs = form(records, interval)
            alerts = run(rs, quickstart_config(records) | {"lr_schedule": {}})
            first = next((a for a in alerts if a.detector == "dead_series"), None)
            found = first is not None
            if not found:
                misses.append("the real dead run was not found")
            logs = sum(1 for r in rs if first and int(r["step"]) <= first.step)
            print(f"{'real dead run (lr 1e4)':<26}{'dead_series':<16}{int(found):>3}/1   "
                  f"at step {first.step if first else '-'} = log {logs}")
            # the blow-up (steps 3-4) is logged at interval 1 only; at interval 10 the logged losses sit at ln(1000)
            chance = next((a for a in alerts if a.detector == "chance_level"), None)
            if chance is None and interval == 1:
                misses.append("the real dead run's blow-up was not found worse than chance")
            chance_logs = sum(1 for r in rs if chance and int(r["step"]) <= chance.step)
            print(f"{'real dead run (lr 1e4)':<26}{'chance_level':<16}{int(chance is not None):>3}/1   "
                  f"at step {chance.step if chance else '-'} = log {chance_logs}"
                  + ("" if interval == 1 else "  (reported: its logged losses are at chance level)"))
    long = next((rs for name, rs in clean.items() if "long" in name), None)
    if long is not None:
        print("\nthe article's night on the 1000-step trace (grad growth from step 300, loss blow-up at 800):")
        for mode, interval, form in MODES:
            alerts = run(form(article(long), interval), quickstart_config(long))
            grad = next((a.step for a in alerts if a.detector == "grad_explosion"), None)
            spike = next((a.step for a in alerts if a.detector == "loss_spike"), None)
            lead = f"{spike - grad} steps before the loss spike alert" if grad and spike else "-"
            print(f"  {mode:<46}: grad_explosion at step {grad}, loss_spike at step {spike}: {lead}")
            if grad is None or grad >= 800:
                misses.append(f"the article's growth not caught before the loss blew up at {mode}")
    delay, timeout = stall_delay()
    within = delay <= timeout + 2.0
    if not within:
        misses.append("stall found later than timeout + 2 s")
    print(f"\nlive stall check: alert {delay:.2f} s after the last step end; calibrated timeout {timeout:.2f} s; "
          f"target <= timeout + 2 s: {'yes' if within else 'NO'}")
    print("\ntargets: every fault found, zero alerts on clean traces, grad growth within 100 steps, "
          "stall within timeout + 2 s")
    print("all met" if not misses else "missed: " + "; ".join(misses))
    return 0 if not misses else 1


if __name__ == "__main__":
    sys.exit(main())
