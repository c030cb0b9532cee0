"""JSON files msmon reads: JSON Lines (metrics.jsonl, alerts.jsonl: whole or from the end, tolerating a run in
progress) and single JSON objects (run.json, result and state files)."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple, TypeVar

TAIL_BYTES = 4 * 1024 * 1024
_DECODER = json.JSONDecoder()
T = TypeVar("T")

#: A decoded JSON value (a record, an alert, run.json, a state file): outside input, checked where it is read.
JsonValue = Any
#: A decoded JSON object, or one msmon is about to write as JSON.
JsonObject = dict[str, JsonValue]


def _fast_loads() -> Callable[[str], JsonValue] | None:
    """orjson's loads when it is installed (a long run's records decode 3-4x faster; it refuses the NaN/Infinity
    tokens Python writes, and those lines take the json module's path), else None."""
    try:
        import orjson
    except ImportError:
        return None
    return orjson.loads


_FAST_LOADS = _fast_loads()


@dataclass
class JsonLines:
    """The objects of a JSON Lines text and what could not be read.

    ``bad`` holds (line number, reason) of complete lines that are not one JSON object; an unterminated
    last line that does not parse is a write in progress or a killed run: ``truncated_tail``, not bad."""

    rows: list[JsonObject] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)  # 1-based line number of each row
    bad: list[tuple[int, str]] = field(default_factory=list)
    truncated_tail: bool = False

    @property
    def bad_lines(self) -> int:
        """How many complete lines could not be read."""
        return len(self.bad)


def parse_object(text: str) -> JsonObject:
    """One line as a JSON object (Python's NaN/Infinity tokens accepted); ValueError saying why not."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    return data


class JsonLine(NamedTuple):
    """One non-blank line: its object, or why it is not one (``row`` None); ``cut``: the file's last line, without
    a newline (a write in progress or a killed run)."""

    number: int  # 1-based
    row: JsonObject | None
    error: str = ""
    cut: bool = False


def scan_lines(lines: Iterable[str], first_line: int = 1) -> Iterator[JsonLine]:
    """Each non-blank line of ``lines`` (each with its newline, the last one perhaps without) parsed in turn."""
    decode, fast = _DECODER.raw_decode, _FAST_LOADS
    for number, line in enumerate(lines, start=first_line):
        if fast is not None:
            try:  # the fastest path: orjson on one object (no NaN token)
                data = fast(line)
            except ValueError:
                data = None
            if type(data) is dict:
                yield JsonLine(number, data)
                continue
        try:  # the fast path: one object and the newline (a million lines a run)
            data, end = decode(line)
        except ValueError:
            data, end = None, 0
        if type(data) is dict and not line[end:].strip():
            yield JsonLine(number, data)
            continue
        if not line.strip():
            continue
        try:
            yield JsonLine(number, parse_object(line))
        except ValueError as exc:
            yield JsonLine(number, None, str(exc), cut=not line.endswith("\n"))


def parse_jsonl(text: str, first_line: int = 1) -> JsonLines:
    """Every line of ``text``; blank lines are skipped."""
    result = JsonLines()
    for line in scan_lines(io.StringIO(text), first_line):
        if line.row is not None:
            result.rows.append(line.row)
            result.lines.append(line.number)
        elif line.cut:
            result.truncated_tail = True
        else:
            result.bad.append((line.number, line.error))
    return result


def iter_jsonl(path: Path, start: int = 0, stop: int | None = None) -> Iterator[JsonLine]:
    """The file's lines one at a time (bounded memory: a million-line file is never held whole; undecodable bytes
    replaced), those that start in bytes [start, stop) when given (line numbers then counted from 1 at ``start``);
    OSError when it cannot be opened or read."""
    if not start and stop is None:
        with open(path, encoding="utf-8", errors="replace", newline="\n") as handle:
            yield from scan_lines(handle)
        return
    with open(path, "rb") as handle:
        handle.seek(start)
        yield from scan_lines(raw.decode("utf-8", errors="replace") for raw in _until(handle, stop))


def _until(handle: BinaryIO, stop: int | None) -> Iterator[bytes]:
    """The lines of ``handle`` that start before byte ``stop``."""
    at = handle.tell()
    for raw in handle:
        if stop is not None and at >= stop:
            return
        at += len(raw)
        yield raw


def read_jsonl(path: Path) -> JsonLines:
    """The whole file (undecodable bytes replaced); OSError when it cannot be read."""
    return parse_jsonl(Path(path).read_text(encoding="utf-8", errors="replace"))


def read_jsonl_tail(path: Path, max_bytes: int = TAIL_BYTES) -> JsonLines:
    """The complete lines among the last ``max_bytes`` of the file (line numbers unknown: counted from 1)."""
    return parse_jsonl(_tail(path, max_bytes).decode("utf-8", errors="replace"))


def _tail(path: Path, max_bytes: int) -> bytes:
    """The lines among the last ``max_bytes`` of the file, from the first whole one; OSError when unreadable."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        start = max(0, size - max_bytes)
        handle.seek(start)
        data = handle.read()
    return data[data.find(b"\n") + 1 :] if start else data  # the first line is cut


def tail_rows(path: Path, max_bytes: int = TAIL_BYTES) -> Iterator[JsonObject]:
    """The valid lines among the last ``max_bytes`` of the file, parsed one at a time from the last one
    back (a caller that wants the last record parses one line, not 4 MiB); OSError when it cannot be read."""
    for raw in reversed(_tail(path, max_bytes).split(b"\n")):  # a line cut by a write in progress: no parse, skipped
        if raw.strip():
            try:
                yield parse_object(raw.decode("utf-8", errors="replace"))
            except ValueError:
                continue


def read_json_object(path: Path) -> JsonObject:
    """The JSON object in ``path``; OSError when it cannot be read (FileNotFoundError when missing), ValueError
    when it is not one JSON object (half-written, corrupt, or another JSON value)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{Path(path).name} is not a JSON object")
    return data


def read_objects(paths: Iterable[Path], parse: Callable[[JsonObject], T]) -> list[T]:
    """``parse`` of the JSON object in each of ``paths``, in order; a file that cannot be read or that ``parse``
    refuses (ValueError, KeyError, TypeError) is left out."""
    found = []
    for path in paths:
        try:
            found.append(parse(read_json_object(path)))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return found
