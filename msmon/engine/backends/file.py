"""``file`` backend: metrics.jsonl (one JSON object per logged step) and, on request, metrics.csv."""

from __future__ import annotations

import csv
import json
import math
import os
import time
from typing import IO, Any

from msmon.engine.backends.base import Backend
from msmon.engine.record import canonical_metrics, record_columns

JSONL_NAME = "metrics.jsonl"
CSV_NAME = "metrics.csv"


def csv_cell(value: Any) -> Any:
    """A CSV cell: floats as repr (``nan``, ``inf``, ``-inf`` spelled out), absent as empty."""
    if value is None:
        return ""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    return value


class FileBackend(Backend):
    """Appends one line per record, flushed per record and fsynced every ``file.fsync_interval_s``."""

    name = "file"

    _jsonl: IO[str] | None = None
    _csv: IO[str] | None = None

    @property
    def flush_interval_s(self) -> float:
        return self.settings.file.fsync_interval_s

    def open(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._jsonl = open(self.run_dir / JSONL_NAME, "a", encoding="utf-8")
        self._last_fsync = time.monotonic()
        if self.settings.file.csv:
            path = self.run_dir / CSV_NAME
            new = not path.exists() or path.stat().st_size == 0
            self._csv = open(path, "a", encoding="utf-8", newline="")
            self._columns = record_columns(canonical_metrics(self.settings.track_metrics))
            self._csv_writer = csv.DictWriter(self._csv, self._columns, extrasaction="ignore")
            if new:
                self._csv_writer.writeheader()

    def write(self, records: list[dict[str, Any]]) -> None:
        assert self._jsonl is not None
        for record in records:
            # Python's json spells non-finite floats NaN, Infinity, -Infinity (json.loads reads them back)
            self._jsonl.write(json.dumps(record, allow_nan=True) + "\n")
            self._jsonl.flush()
            if self._csv is not None:
                self._csv_writer.writerow({key: csv_cell(record.get(key)) for key in self._columns})
                self._csv.flush()

    def flush(self) -> None:
        for handle in (self._jsonl, self._csv):
            if handle is not None:
                handle.flush()
                os.fsync(handle.fileno())

    def close(self, status: str) -> None:
        try:
            self.flush()
        finally:
            for handle in (self._jsonl, self._csv):
                if handle is not None:
                    handle.close()
            self._jsonl = self._csv = None
