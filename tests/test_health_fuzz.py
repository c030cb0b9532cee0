"""Property tests: no record crashes a detector; no input line crashes the replay reader."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from msmon.config.health import HealthSettings
from msmon.errors import MsmonError
from msmon.health.monitor import HealthMonitor
from msmon.records import parse_record

METRICS = ["loss", "grad_norm", "learning_rate", "throughput", "samples_per_s", "step_time_ms", "overflow"]
values = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**6, 10**6), st.booleans(),
                   st.none(), st.text(max_size=5))
records = st.lists(
    st.fixed_dictionaries({"step": st.integers(-5, 10**6)},
                          optional={"time": st.one_of(st.floats(allow_nan=True), st.integers()),
                                    **dict.fromkeys(METRICS, values)}),
    max_size=80,
)


@settings(max_examples=150, deadline=None)
@given(records)
def test_no_record_breaks_a_detector(batch):
    monitor = HealthMonitor(HealthSettings())
    count = len(monitor.detectors)
    for record in batch:
        monitor.observe(record)
    assert len(monitor.detectors) == count  # none was disabled by an exception
    for alert in monitor.alerts:
        assert alert.message and alert.severity in ("warning", "critical")
        assert alert.to_json()


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_a_line_is_a_record_or_an_msmon_error(line):
    try:
        record = parse_record(line, "f:1")
    except MsmonError as exc:
        assert exc.message.startswith("f:1: ")
        return
    assert isinstance(record["step"], int) and not isinstance(record["step"], bool)
    for value in record.values():  # the non-finite spellings became floats
        assert not (isinstance(value, str) and value.strip().lower() in ("nan", "infinity", "-infinity"))
