"""A long replay on two cores: the records go through the same detectors, a fixed share of them in a second process
that reads the file too (decoding a record costs a few microseconds, the detectors tens), and the alerts of both are
merged in the order one process would have raised them. Rate limits and restarts are per detector, so a share judges
exactly what it would judge beside the others."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from msmon.config.health import HealthSettings
from msmon.foreign import ConfigValue
from msmon.health.alert import Alert
from msmon.health.monitor import HealthMonitor
from msmon.health.probed_steps import ProbedSteps
from msmon.records import read_records
from msmon.util.split_read import parts_for

#: the second process's detectors: those whose alerts name the group that moved (msmon.health.groups.EXPLAINED: only
#: this process keeps the groups and first movers), about half of the time on a long run's records (bench_long_run.py)
SECOND_SHARE = frozenset({"grad_explosion", "loss_spike", "nonfinite"})

Raised = list[tuple[int, Alert]]  # (the index of the record that raised it, the alert)


def observe_records(monitor: HealthMonitor, metrics: Path, boundaries: Sequence[int]) -> tuple[int, Raised]:
    """Every record of ``metrics`` through ``monitor``, a restart marked where a later attempt starts (the steps of
    ``boundaries``, as live); the records read and the alerts raised, each with its record's index."""
    later = list(boundaries)
    raised: Raised = []
    count = 0
    previous: int | None = None
    for record in read_records(metrics):
        while later and later[0] < record["step"]:
            boundary = later.pop(0)
            if previous is not None and previous <= boundary:
                monitor.resumed()
        alerts = monitor.observe(record)
        if alerts:
            raised.extend((count, alert) for alert in alerts)
        previous = record["step"]
        count += 1
    return count, raised


class Share(NamedTuple):
    """What the second process needs to replay its share (picklable)."""

    metrics: Path
    run_dir: Path | None
    settings: HealthSettings
    config: dict[str, ConfigValue]
    total: int | None
    boundaries: list[int]
    names: frozenset[str]


def second_share(metrics: Path, names: Sequence[str]) -> frozenset[str]:
    """The detectors a second process replays: none for a file one core reads quickly or on one core."""
    share = SECOND_SHARE.intersection(names)
    return share if parts_for(metrics) > 1 and len(share) < len(names) else frozenset()


def replay_share(share: Share) -> Raised:
    """In the second process: the alerts its share of the detectors raises, each with its record's index."""
    probed = ProbedSteps(share.run_dir, live=False) if share.run_dir is not None else None
    monitor = HealthMonitor(share.settings, share.config, probed=probed)
    monitor.set_total_steps(share.total)
    monitor.share(share.names)
    return observe_records(monitor, share.metrics, share.boundaries)[1]


def replay_split(monitor: HealthMonitor, share: Share) -> tuple[int, Raised]:
    """``observe_records`` with ``share.names`` in a spawned process and the other detectors here, the alerts in
    the order one monitor would have raised them (by step, then record, then the detectors' order)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    order = [detector.name for detector in monitor.detectors]
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        theirs = pool.submit(replay_share, share)
        monitor.share(set(order) - share.names)
        count, raised = observe_records(monitor, share.metrics, share.boundaries)
        # a run still going: the second process may read records appended after this one's last
        merged = raised + [item for item in theirs.result() if item[0] < count]
    merged.sort(key=lambda item: (item[1].step, item[0], order.index(item[1].detector)))
    return count, merged
