"""JSON Lines read with orjson (when installed) and with the json module give the same lines: the records msmon
writes, NaN/Infinity tokens (which orjson refuses: the json module reads those lines), blank, broken and cut lines."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from msmon.util import jsonfiles
from msmon.util.jsonfiles import JsonLine, iter_jsonl

LINES = [
    json.dumps({"step": 1, "time": 1796406600.031, "loss": 7.123456789012345, "grad_norm": 1.2999999999999998}),
    "",
    json.dumps({"step": 2, "loss": math.nan, "grad_norm": math.inf, "loss_mean": -math.inf}),
    json.dumps({"step": 3, "loss": "NaN", "note": "caf\u00e9", "nested": {"a": [1, 2.5]}}),
    '{"step": 4, "loss": 1e400, "big": 18446744073709551615}',
    '{"step": 5, "loss": 2.0} {"step": 6}',
    "[1, 2]",
    '{"step": 7, "loss": 1.0, "loss": 2.0}',
    '{"step": 8, "loss": 3.0',
]


def read(path: Path) -> list[JsonLine]:
    """The file's lines, NaN made comparable."""
    return [JsonLine(line.number, None if line.row is None else json.loads(json.dumps(line.row).replace("NaN", "null")),
                     line.error, line.cut) for line in iter_jsonl(path)]


def test_orjson_reads_what_the_json_module_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    orjson = pytest.importorskip("orjson")
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(LINES), encoding="utf-8")  # the last line cut
    monkeypatch.setattr(jsonfiles, "_FAST_LOADS", orjson.loads)
    fast = read(path)
    monkeypatch.setattr(jsonfiles, "_FAST_LOADS", None)
    assert fast == read(path)
    assert [line.number for line in fast if line.row is not None] == [1, 3, 4, 5, 8]
    assert fast[-1].cut and fast[-1].row is None
