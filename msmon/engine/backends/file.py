"""``file`` backend: metrics.jsonl (one JSON object per logged step) and, on request, metrics.csv.

metrics.jsonl is the run's source of truth: every record is one complete line (a write the full disk cut
short is undone and counted as lost), fsynced every ``file.fsync_interval_s`` and at close, and a file
deleted under the run (its directory removed) is recreated and the records that went with it counted.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math

from msmon import layout
from msmon.engine.backends.base import Backend, PartialWrite
from msmon.engine.record import canonical_metrics, record_columns
from msmon.status import RunStatus
from msmon.util.files import LineFile
from msmon.util.jsonfiles import JsonObject, JsonValue

logger = logging.getLogger("msmon")


def csv_cell(value: JsonValue) -> JsonValue:
    """A CSV cell: floats as repr (``nan``, ``inf``, ``-inf`` spelled out), absent as empty."""
    if value is None:
        return ""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    return value


class FileBackend(Backend):
    """Appends one line per record (straight to the OS), fsynced every ``file.fsync_interval_s``."""

    name = "file"
    in_run_dir = True

    _jsonl: LineFile | None = None
    _csv: LineFile | None = None
    _columns: list[str]
    _lines = 0  # records in the current metrics.jsonl (lost with it if it is deleted)

    @property
    def flush_interval_s(self) -> float:
        return self.settings.file.fsync_interval_s

    @property
    def close_budget_s(self) -> float:
        return 5.0  # local writes and one fsync: the run's source of truth closes first, whatever else hangs

    def open(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._jsonl = LineFile(self.run_dir / layout.METRICS)
        if self.settings.file.csv:
            self._columns = record_columns(canonical_metrics(self.settings.track_metrics))
            self._csv = LineFile(self.run_dir / layout.METRICS_CSV)
            if self._csv.size == 0:
                self._csv.append(self._csv_line(dict(zip(self._columns, self._columns, strict=True))))

    def _csv_line(self, row: JsonObject) -> bytes:
        text = io.StringIO()
        csv.DictWriter(text, self._columns, extrasaction="ignore").writerow(row)
        return text.getvalue().encode("utf-8")

    def write(self, records: list[JsonObject]) -> None:
        jsonl = self._jsonl
        if jsonl is None:
            raise RuntimeError("metrics.jsonl is not open")
        for index, record in enumerate(records):
            # Python's json spells non-finite floats NaN, Infinity, -Infinity (json.loads reads them back)
            try:
                jsonl.append((json.dumps(record, allow_nan=True) + "\n").encode("utf-8"))
            except OSError as exc:
                raise PartialWrite(index, exc) from exc
            self._lines += 1
            if self._csv is not None:
                self._csv.append(self._csv_line({key: csv_cell(record.get(key)) for key in self._columns}))

    def flush(self) -> None:
        if self._jsonl is not None and self._jsonl.deleted():
            self._recreate()
        for handle in (self._jsonl, self._csv):
            if handle is not None:
                handle.sync()

    def _recreate(self) -> None:
        """The run directory was removed under the run: start the files again where they belong."""
        logger.warning(
            "msmon: %s was deleted during the run (%d records with it); msmon recreated it and goes on",
            self.run_dir / layout.METRICS, self._lines,
        )
        self.records_lost += self._lines
        self._lines = 0
        self._close_files()
        self.open()

    def close(self, status: RunStatus | None) -> None:
        try:
            self.flush()
        finally:
            self._close_files()

    def _close_files(self) -> None:
        for handle in (self._jsonl, self._csv):
            if handle is not None:
                handle.close()
        self._jsonl = self._csv = None
