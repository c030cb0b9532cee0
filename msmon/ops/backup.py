"""Timestamped byte copies of a training YAML: save (deduplicated), list, diff, restore."""

from __future__ import annotations

import difflib
import hashlib
import os
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import yaml

from msmon.config.loader import read_config_text
from msmon.errors import MsmonError
from msmon.foreign import ConfigValue
from msmon.util.atomic import atomic_write_bytes, atomic_write_json, write_temp
from msmon.util.files import file_lock
from msmon.util.jsonfiles import JsonObject, read_json_object
from msmon.util.mapping import flatten

BACKUP_DIR = "monitor_config_backup"
INDEX = "index.json"
_NAME = re.compile(r"^(?P<stem>.+)_(?P<stamp>\d{8}_\d{6})(?:_(?P<n>\d+))?\.yaml$")


@dataclass
class BackupResult:
    """The copy written, or the existing copy with the same content (``created`` False)."""

    path: Path
    created: bool

    def __str__(self) -> str:
        return str(self.path) if self.created else f"identical to {self.path}"


@dataclass
class BackupCopy:
    number: int  # 1 = oldest, as --list shows it
    path: Path
    time: datetime
    sha256: str
    note: str | None


@dataclass
class ConfigDiff:
    left: str
    right: str
    keys: list[str]  # "+ key: v", "- key: v", "~ key: a -> b" over monitor_config
    unified: list[str]


def backup_dir(config: Path, dest: str | os.PathLike[str] | None = None) -> Path:
    return Path(dest) if dest is not None else config.parent / BACKUP_DIR


def _read_source(config: Path) -> bytes:
    read_config_text(config)  # the same checks and messages as every other command
    return config.read_bytes()


def _index(directory: Path) -> JsonObject:
    try:
        copies = read_json_object(directory / INDEX).get("copies")
    except (OSError, ValueError):
        return {}
    return copies if isinstance(copies, dict) else {}


def list_copies(config: str | os.PathLike[str], dest: str | os.PathLike[str] | None = None) -> list[BackupCopy]:
    """The copies of ``config`` (by its file stem), oldest first."""
    config = Path(config)
    directory = backup_dir(config, dest)
    notes = _index(directory)
    found = []
    for path in directory.iterdir() if directory.is_dir() else []:
        match = _NAME.match(path.name)
        if not match or match["stem"] != config.stem or not path.is_file():
            continue
        stamp = datetime.strptime(match["stamp"], "%Y%m%d_%H%M%S")
        found.append((stamp, int(match["n"] or 0), path))
    copies = []
    for number, (stamp, _n, path) in enumerate(sorted(found), start=1):
        entry = notes.get(path.name)
        entry = entry if isinstance(entry, dict) else {}
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        copies.append(BackupCopy(number, path, stamp, digest, entry.get("note")))
    return copies


def backup_config(
    path: str | os.PathLike[str], dest: str | os.PathLike[str] | None = None, note: str | None = None,
    now: datetime | None = None,
) -> BackupResult:
    """Save a byte copy of ``path`` as ``<stem>_<YYYYmmdd_HHMMSS>.yaml`` unless one with the same content exists."""
    config = Path(path)
    data = _read_source(config)
    directory = backup_dir(config, dest)
    directory.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(data).hexdigest()
    with file_lock(directory / ".lock"):
        same = [c for c in list_copies(config, dest) if c.sha256 == digest]
        if same:
            return BackupResult(same[-1].path, created=False)
        stamp = (now or datetime.now()).strftime("%Y%m%d_%H%M%S")
        tmp = write_temp(directory, config.name, data, config.stat().st_mode & 0o7777)
        try:
            target = _link_unique(tmp, directory, f"{config.stem}_{stamp}")
        finally:
            tmp.unlink(missing_ok=True)
        copies = _index(directory)
        copies[target.name] = {"sha256": digest, "note": note, "source": str(config.resolve()), "time": stamp}
        atomic_write_json(directory / INDEX, {"copies": copies})
    return BackupResult(target, created=True)


def _link_unique(tmp: Path, directory: Path, base: str) -> Path:
    """Hard-link the finished temporary file under the first free name (never overwrites a copy)."""
    for n in range(1000):
        target = directory / (f"{base}.yaml" if n == 0 else f"{base}_{n}.yaml")
        try:
            os.link(tmp, target)
        except FileExistsError:
            continue
        return target
    raise MsmonError(f"{directory}: too many copies named {base}_*", "wait a second and retry")


def resolve_ref(copies: list[BackupCopy], ref: str) -> BackupCopy:
    """A copy by number (as listed), ``latest``, file name, path, or a unique part of its name (a timestamp)."""
    if not copies:
        raise MsmonError("no backup copies yet", "make one: msmon backup-config save CONFIG")
    if ref == "latest":
        return copies[-1]
    if ref.isdigit():
        matches = [c for c in copies if c.number == int(ref)]
    else:
        matches = [c for c in copies if c.path.name == Path(ref).name] or [c for c in copies if ref in c.path.name]
    if len(matches) == 1:
        return matches[0]
    names = ", ".join(c.path.name for c in matches) if matches else "none"
    raise MsmonError(f"backup '{ref}' matches {len(matches)} copies ({names})", "see msmon backup-config list CONFIG")


def monitor_config_keys(data: bytes) -> dict[str, ConfigValue] | None:
    """``monitor_config`` flattened to dotted keys, values as written (interpolations unresolved)."""
    try:
        tree = yaml.safe_load(data.decode("utf-8-sig"))
    except (yaml.YAMLError, UnicodeDecodeError):
        return None
    section = tree.get("monitor_config") if isinstance(tree, dict) else None
    return flatten(section) if isinstance(section, dict) else {}


def key_changes(old: JsonObject | None, new: JsonObject | None) -> list[str]:
    """``+ key: v``, ``- key: v`` and ``~ key: a -> b`` lines between two flattened monitor_configs."""
    if old is None or new is None:
        return ["(a file is not valid YAML: see the unified diff)"]
    lines = []
    for key in sorted(old.keys() | new.keys()):
        if key not in old:
            lines.append(f"+ {key}: {new[key]!r}")
        elif key not in new:
            lines.append(f"- {key}: {old[key]!r}")
        elif old[key] != new[key]:
            lines.append(f"~ {key}: {old[key]!r} -> {new[key]!r}")
    return lines


def changed_keys(old: bytes | None, new: bytes) -> str:
    """The monitor_config keys that differ, as one short text for --list."""
    if old is None:
        return "(first copy)"
    lines = key_changes(monitor_config_keys(old), monitor_config_keys(new))
    if not lines:
        return "(no monitor_config change)"
    if lines[0].startswith("("):
        return lines[0]
    return ", ".join(line[2:].split(":", 1)[0] for line in lines)


def diff_configs(
    config: str | os.PathLike[str], a: str | None = None, b: str | None = None,
    dest: str | os.PathLike[str] | None = None,
) -> ConfigDiff:
    """Key-level and unified diff: A vs B, A vs the current file, or the latest copy vs the current file."""
    config = Path(config)
    copies = list_copies(config, dest)
    left = resolve_ref(copies, a) if a is not None else resolve_ref(copies, "latest")
    left_data, left_name = left.path.read_bytes(), left.path.name
    if b is not None:
        right = resolve_ref(copies, b)
        right_data, right_name = right.path.read_bytes(), right.path.name
    else:
        right_data, right_name = _read_source(config), f"{config} (current)"
    unified = difflib.unified_diff(
        left_data.decode("utf-8", "replace").splitlines(), right_data.decode("utf-8", "replace").splitlines(),
        left_name, right_name, lineterm="",
    )
    keys = key_changes(monitor_config_keys(left_data), monitor_config_keys(right_data))
    return ConfigDiff(left_name, right_name, keys, list(unified))


def restore(
    config: str | os.PathLike[str], ref: str, dest: str | os.PathLike[str] | None = None
) -> tuple[BackupResult | None, BackupCopy]:
    """Write copy ``ref`` back over ``config`` after backing up the current file (when there is one)."""
    config = Path(config)
    chosen = resolve_ref(list_copies(config, dest), ref)
    saved = backup_config(config, dest, note=f"before restoring {chosen.path.name}") if config.exists() else None
    atomic_write_bytes(config, chosen.path.read_bytes())
    return saved, chosen
