"""The record of detached boards: ``$MSMON_HOME/boards.json``, locked and written atomically."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from msmon.errors import MsmonError, describe
from msmon.util.atomic import atomic_write_json
from msmon.util.files import file_lock, msmon_home
from msmon.util.jsonfiles import read_json_object


@dataclass
class BoardRecord:
    """One board msmon started and left running."""

    backend: str
    pid: int  # the server process (gunicorn master for MindInsight)
    pgid: int  # its process group: every process of the board
    create_time: float  # the server process's start (unix s), guards against pid reuse
    port: int
    host: str
    directory: str
    url: str
    log: str
    started: str  # ISO 8601


STATE_FIX = ("fix it or delete it; the boards it recorded may still run: "
             "ps -ef | grep -E 'mindinsight|tensorboard'")


def state_path() -> Path:
    return msmon_home() / "boards.json"


def _read(path: Path) -> list[BoardRecord]:
    """The records in ``path`` (none when it does not exist); MsmonError when it cannot be read: a corrupt file is
    never taken for "no board" (the boards it lists may still run, and a write would drop them)."""
    try:
        data = read_json_object(path)
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise MsmonError(f"{path} is unreadable: {describe(exc)}", STATE_FIX) from exc
    boards = data.get("boards", [])
    names = {f.name for f in fields(BoardRecord)}
    if not isinstance(boards, list) or not all(isinstance(item, dict) and names <= item.keys() for item in boards):
        raise MsmonError(f"{path} is unreadable: 'boards' is not a list of board records", STATE_FIX)
    return [BoardRecord(**{k: item[k] for k in names}) for item in boards]


def load_records() -> list[BoardRecord]:
    """The recorded boards (a missing file: none; MsmonError when it cannot be read)."""
    return _read(state_path())


def update_records(change: Callable[[list[BoardRecord]], list[BoardRecord]]) -> list[BoardRecord]:
    """Apply ``change`` to the records under the lock and write the result atomically."""
    path = state_path()
    with file_lock(path.with_name("boards.lock")):
        records = change(_read(path))
        atomic_write_json(path, {"boards": [asdict(r) for r in records]})
    return records


def add_record(record: BoardRecord) -> None:
    update_records(lambda rs: [r for r in rs if r.port != record.port] + [record])


def remove_record(port: int) -> None:
    update_records(lambda rs: [r for r in rs if r.port != port])
