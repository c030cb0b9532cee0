"""The distributions probe without training: a histogram's counts, non-finite values and quantiles against numpy; the
files it writes read back by TensorBoard's own reader (EventAccumulator) and MindInsight's own histogram API
(DataManager + HistogramProcessor); and one rank's runner taking a ``distributions`` request at a logging step and
writing the histograms of real MindSpore Parameters and of their update at the next N logging steps."""

from __future__ import annotations

import json
import math
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from msmon import layout
from msmon.engine.probe.distribution_files import DistributionFiles
from msmon.engine.probe.histograms import BINS, QUANTILES, histogram
from msmon.engine.probe.runner import ProbeRunner
from msmon.probe import (
    ProbeKind,
    ProbeMark,
    ProbeState,
    new_request,
    read_marks,
    read_request,
    write_mark,
    write_request,
)


def test_a_histogram_counts_every_value_and_keeps_non_finite_ones_apart() -> None:
    values = np.concatenate([np.random.default_rng(3).standard_normal(10_000), [np.nan, np.inf, -np.inf, -np.inf]])
    found = histogram(values.astype(np.float32))
    finite = values[np.isfinite(values)].astype(np.float32).astype(np.float64)
    assert (found.count, found.nan, found.pos_inf, found.neg_inf) == (10_004, 1, 1, 2)
    assert sum(found.counts) == 10_000 and len(found.counts) == BINS and len(found.edges) == BINS + 1
    assert (found.minimum, found.maximum) == (finite.min(), finite.max()) == (found.edges[0], found.edges[-1])
    assert found.quantiles == pytest.approx(list(np.quantile(finite, QUANTILES)))
    assert found.squares == pytest.approx(float(np.sum(finite ** 2)))
    assert list(found.counts) == list(np.histogram(finite, bins=BINS)[0])
    empty = histogram(np.array([np.nan]))
    assert empty.count == empty.nan == 1 and empty.counts == () and math.isnan(empty.minimum)
    assert histogram(np.zeros(4)).counts[BINS // 2] == 4  # all equal: one bucket around the value


def write_two_steps(directory: Path) -> dict[int, dict[str, object]]:
    rng = np.random.default_rng(5)
    written = {}
    files = DistributionFiles(directory)
    for step in (10, 20):
        written[step] = {"weights/layers.0": histogram(rng.standard_normal(2000) * step),
                         "updates/layers.0": histogram(rng.standard_normal(500) * 1e-3)}
        files.write(step, written[step])
    files.close()
    return written


def test_tensorboards_own_reader_returns_the_histograms_msmon_wrote(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    written = write_two_steps(tmp_path)
    events = EventAccumulator(str(tmp_path), size_guidance={"histograms": 0})
    events.Reload()
    assert sorted(events.Tags()["histograms"]) == ["updates/layers.0", "weights/layers.0"]
    for tag in ("weights/layers.0", "updates/layers.0"):
        read = events.Histograms(tag)
        assert [e.step for e in read] == [10, 20]
        for event in read:
            mine, value = written[event.step][tag], event.histogram_value
            assert list(value.bucket) == list(mine.counts) and value.num == sum(mine.counts)
            assert list(value.bucket_limit) == pytest.approx(list(mine.edges[1:]))
            assert (value.min, value.max) == (mine.minimum, mine.maximum)
            assert (value.sum, value.sum_squares) == pytest.approx((mine.total, mine.squares))


def test_mindinsights_own_histogram_api_returns_the_histograms_msmon_wrote(tmp_path: Path) -> None:
    from mindinsight.datavisual.processors.histogram_processor import HistogramProcessor

    written = write_two_steps(tmp_path)
    manager = mindinsight_loaded(tmp_path)
    assert sorted(manager.get_train_job_by_plugin("./", "histogram")["tags"]) == [
        "updates/layers.0/histogram", "weights/layers.0/histogram"]
    for tag in ("weights/layers.0", "updates/layers.0"):
        read = HistogramProcessor(manager).get_histograms("./", f"{tag}/histogram")["histograms"]
        assert [h["step"] for h in read] == [10, 20]
        low = min(written[step][tag].minimum for step in (10, 20))
        high = max(written[step][tag].maximum for step in (10, 20))
        for found in read:  # the page's buckets: msmon's re-sampled over the range of every step (aligned)
            mine, buckets = written[found["step"]][tag], found["buckets"]
            assert buckets[0][0] == pytest.approx(low) and buckets[-1][0] + buckets[-1][1] == pytest.approx(high)
            assert sum(mine.counts) <= sum(count for _, _, count in buckets) <= sum(mine.counts) + len(buckets)
        for tensor in manager.list_tensors("./", f"{tag}/histogram"):  # what it loaded: msmon's figures as written
            mine = written[tensor.step][tag]
            container = tensor.value
            assert (container.min, container.max, container.count) == (mine.minimum, mine.maximum, mine.count)
            assert container.histogram.original_buckets_count == BINS
    for step, values in summary_histograms(tmp_path).items():  # MindInsight's own Event proto: every field
        for tag, parsed in values.items():
            mine = written[step][tag]
            assert [(b.left, b.width, b.count) for b in parsed.buckets] == [
                (left, right - left, count) for left, right, count in zip(mine.edges, mine.edges[1:], mine.counts,
                                                                           strict=False)]
            assert (parsed.min, parsed.max, parsed.count, parsed.nan_count) == (mine.minimum, mine.maximum, 2000 if
                                                                                tag.startswith("w") else 500, 0)
            assert parsed.sum == pytest.approx(mine.total)


def mindinsight_loaded(directory: Path) -> Any:
    """MindInsight's own DataManager with ``directory`` loaded as its summary base (the train job ``./``)."""
    from mindinsight.datavisual.data_transform.data_manager import DataManager

    manager = DataManager(str(directory))
    # two threads, the detail cache's and the brief cache's (the train jobs' tags): with reload_interval 0 each loads
    # once and ends. The status turns DONE when the first has ended, while the second may still be loading
    for thread in manager.start_load_data(reload_interval=0):
        thread.join(timeout=120)
    return manager


def mindinsight_steps(directory: Path, tag: str) -> list[int]:
    """The steps MindInsight's histogram API returns for ``tag`` of the summary file in ``directory``."""
    from mindinsight.datavisual.processors.histogram_processor import HistogramProcessor

    read = HistogramProcessor(mindinsight_loaded(directory)).get_histograms("./", f"{tag}/histogram")
    return [h["step"] for h in read["histograms"]]


def summary_histograms(directory: Path) -> dict[int, dict[str, object]]:
    """step -> {tag: Summary.Histogram} parsed from the MindSpore summary file with MindInsight's own Event proto."""
    import struct

    from mindinsight.datavisual.proto_files import mindinsight_summary_pb2

    (path,) = directory.glob("*.summary.*")
    data, offset, result = path.read_bytes(), 0, {}
    while offset < len(data):
        (length,) = struct.unpack("<Q", data[offset: offset + 8])
        event = mindinsight_summary_pb2.Event()
        event.ParseFromString(data[offset + 12: offset + 12 + length])
        offset += 12 + length + 4
        if event.HasField("summary"):
            result[event.step] = {value.tag: value.histogram for value in event.summary.value}
    return result


def test_a_distributions_request_writes_weights_and_updates_at_the_next_logs(tmp_path: Path) -> None:
    from mindspore import Parameter, Tensor, ops
    from test_probe_units import drive

    names = ["model.layers.0.attention.wq.weight", "model.layers.1.attention.wq.weight", "lm_head.weight"]
    params = [Parameter(Tensor(np.full((4, 4), i + 1.0, np.float32)), name=n) for i, n in enumerate(names)]
    runner = ProbeRunner(tmp_path, 0, None, interval=5)
    runner.network = types.SimpleNamespace(weights=params)
    request = new_request(ProbeKind.DISTRIBUTIONS, 2, None)
    write_request(tmp_path, request)
    drive(runner, range(1, 31), 5, train=lambda _: ops.assign(params[0], params[0] + 0.5))  # block 0 moves by 0.5
    (mark,) = read_marks(tmp_path, request.id).values()
    assert mark.state is ProbeState.DONE and (mark.first_step, mark.last_step) == (6, 15)
    text = (tmp_path / mark.output / layout.DISTRIBUTIONS_FILE).read_text()
    lines = [json.loads(line) for line in text.splitlines()]
    assert [line["step"] for line in lines] == [10, 15]
    tags = sorted(lines[0]["histograms"])
    groups = ("layers.0", "layers.1", "head")
    assert tags == sorted(f"{kind}/{group}" for kind in ("weights", "updates") for group in groups)
    update = lines[0]["histograms"]["updates/layers.0"]
    assert update["min"] == update["max"] == 0.5 and update["count"] == 16  # the logging step's own update
    assert lines[1]["histograms"]["weights/head"]["quantiles"]["0.5"] == 3.0
    assert lines[1]["histograms"]["updates/head"]["max"] == 0.0
    assert "histograms of weights and updates of 3 group(s) at logging step(s) 10, 15" in mark.message


def alert(detector: str, step: int) -> Any:
    from msmon.health.alert import Alert

    return Alert(None, step, detector, "warning", "grew", {}, "alert")


def test_an_alert_a_layer_group_explains_asks_for_histograms_of_the_next_logs(tmp_path: Path) -> None:
    from msmon.health.probe_trigger import DistributionsOnAlert

    sink = DistributionsOnAlert(tmp_path, 3, world_size=2)
    sink.handle(alert("throughput_drop", 50))
    assert read_request(tmp_path) is None
    sink.handle(alert("grad_explosion", 60))
    first = read_request(tmp_path)
    assert first is not None and (first.kind, first.steps, first.ranks) == (ProbeKind.DISTRIBUTIONS, 3, None)
    sink.handle(alert("loss_spike", 70))  # rank 0 and 1 have not taken it: no second request
    assert read_request(tmp_path) == first
    for rank in (0, 1):
        write_mark(tmp_path, ProbeMark(first.id, first.kind, rank, ProbeState.DONE, 71, 100))
    sink.handle(alert("nonfinite", 110))
    second = read_request(tmp_path)
    assert second is not None and second.id != first.id and second.kind is ProbeKind.DISTRIBUTIONS


def test_the_health_sinks_ask_for_histograms_unless_told_not_to(tmp_path: Path) -> None:
    from engine_support import settings

    from msmon.config.health import AlertSettings, HealthSettings
    from msmon.health import make_sinks
    from msmon.health.probe_trigger import DistributionsOnAlert

    session = types.SimpleNamespace(probes=types.SimpleNamespace(run_dir=tmp_path), world_size=1)
    on = make_sinks(settings(tmp_path), tmp_path, session)
    off = make_sinks(settings(tmp_path, health=HealthSettings(alerts=AlertSettings(distributions_logs=0))), tmp_path,
                     session)
    assert [type(s) for s in on if isinstance(s, DistributionsOnAlert)] == [DistributionsOnAlert]
    assert not [s for s in off if isinstance(s, DistributionsOnAlert)]
    assert not [s for s in make_sinks(settings(tmp_path), tmp_path, None) if isinstance(s, DistributionsOnAlert)]
