"""What the reference_drift detector costs: the band's build from two long references, and the detector's time per
logged record beside the default detectors' (the health monitor's ``observe``, measured side by side in one run).

Two references of ``--steps`` steps (default 1,000,000; a falling loss with batch noise and a grad norm near 1,
their own noise phase each) are built in memory as ReferenceCurves (loading them from disk is
bench_reference_load.py's); the band is built once and timed; then ``--records`` records (default 20,000) of a
third curve go through a HealthMonitor without and with the reference, in alternating rounds. Usage:
python bench/bench_reference_drift.py [--steps N] [--records N] [--rounds N]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from array import array
from pathlib import Path

from msmon.config.health import HealthSettings, ReferenceDriftSettings
from msmon.health.monitor import HealthMonitor
from msmon.reference.band import build_band
from msmon.reference.curve import ReferenceCurve, ReferenceKind


def point(step: int, phase: float) -> tuple[float, float]:
    """(loss, grad norm) of a plausible long run."""
    return 1.5 + 5.5 * math.exp(-step / 2e5) + 0.05 * math.sin(0.9 * step + phase), 1.0 + 0.1 * math.sin(0.3 * step
                                                                                                       + phase)


def reference(steps: int, phase: float) -> ReferenceCurve:
    loss, norm = array("d"), array("d")
    for step in range(1, steps + 1):
        a, b = point(step, phase)
        loss.append(a)
        norm.append(b)
    return ReferenceCurve(Path(f"ref{phase:g}"), ReferenceKind.TABLE, array("q", range(1, steps + 1)),
                          {"loss": loss, "grad_norm": norm})


def per_record_us(monitor: HealthMonitor, records: list[dict]) -> float:
    began = time.perf_counter()
    for record in records:
        monitor.observe(record)
    return (time.perf_counter() - began) / len(records) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    references = [reference(args.steps, 0.0), reference(args.steps, 1.0)]
    began = time.perf_counter()
    band = build_band(references, ReferenceDriftSettings())
    built = time.perf_counter() - began
    records = []
    for step in range(1, args.records + 1):
        loss, norm = point(step, 2.0)
        records.append({"step": step, "time": float(step), "loss": loss, "grad_norm": norm})
    plain, judged = [], []
    for _ in range(args.rounds):
        plain.append(per_record_us(HealthMonitor(HealthSettings()), records))
        monitor = HealthMonitor(HealthSettings(), reference=band)
        judged.append(per_record_us(monitor, records))
        assert not [a for a in monitor.alerts if a.detector == "reference_drift"], "a run inside its band alerted"
    base, with_ref = statistics.median(plain), statistics.median(judged)
    print(f"band of 2 references x {args.steps:,} steps built in {built:.2f} s")
    print(f"health monitor per record: {base:.1f} us without a reference, {with_ref:.1f} us with it "
          f"(reference_drift: +{with_ref - base:.1f} us, x{with_ref / base:.2f}); medians of {args.rounds} rounds of "
          f"{args.records:,} records")
    print("at log_interval 1 and a 100 ms step that is "
          f"{(with_ref - base) / 1e5 * 100:.4f}% of the step time")


if __name__ == "__main__":
    main()
