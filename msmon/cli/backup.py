"""`msmon backup-config`: keep every version of a training YAML; list, diff and restore them."""

from __future__ import annotations

import hashlib
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from msmon.cli.common import handle_errors, wide_console
from msmon.errors import ExitCode, MsmonError


@handle_errors
def backup_config(
    config: Path = typer.Argument(..., help="The training YAML."),
    refs: list[str] = typer.Argument(None, help="With --diff: copies A [B] (number, name, timestamp or 'latest')."),
    dest: Path = typer.Option(None, "--dest", help="Backup directory (default: monitor_config_backup/ beside it)."),
    note: str = typer.Option(None, "--note", help="A note stored with the new copy."),
    list_: bool = typer.Option(False, "--list", help="List the copies: time, hash, note, changed keys."),
    diff: bool = typer.Option(False, "--diff", help="Diff copies A and B, A and the file, or the latest and the file."),
    restore: str = typer.Option(None, "--restore", help="Write copy REF back (the current file is backed up first)."),
) -> None:
    """Save a timestamped copy of CONFIG (identical content is not saved twice); or --list, --diff, --restore."""
    modes = [name for name, on in (("--list", list_), ("--diff", diff), ("--restore", restore is not None)) if on]
    if len(modes) > 1:
        raise MsmonError(f"{' and '.join(modes)} exclude each other", "pass one of them", ExitCode.USAGE)
    refs = list(refs or [])
    if refs and not diff:
        raise MsmonError(f"unexpected argument '{refs[0]}'", "copies A [B] are given only with --diff", ExitCode.USAGE)
    if len(refs) > 2:
        raise MsmonError("--diff takes at most two copies", "msmon backup-config CONFIG --diff [A] [B]", ExitCode.USAGE)
    if note is not None and modes:
        raise MsmonError("--note goes with saving a copy", "drop --note or the other flag", ExitCode.USAGE)
    try:
        _run(config, refs, dest, note, list_, diff, restore)
    except OSError as exc:
        where = f" {exc.filename}" if exc.filename else ""
        hint = "check permissions and free space, or pass --dest DIR"
        raise MsmonError(f"cannot read or write{where}: {exc.strerror or exc}", hint) from exc


def _run(
    config: Path, refs: list[str], dest: Path | None, note: str | None, list_: bool, diff: bool, restore: str | None
) -> None:
    from msmon.ops import backup

    if list_:
        _list(config, dest)
    elif diff:
        first, second = [*refs, None, None][:2]
        changes = backup.diff_configs(config, first, second, dest=dest)
        print(f"monitor_config: {changes.left} -> {changes.right}")
        for line in changes.keys or ["(no monitor_config change)"]:
            print(f"  {line}")
        print("\n".join(changes.unified) if changes.unified else "(files identical)")
    elif restore is not None:
        saved, chosen = backup.restore(config, restore, dest=dest)
        if saved is not None:
            print(f"current file {'saved as ' + str(saved.path) if saved.created else str(saved)}")
        print(f"restored {chosen.path.name} to {config}")
    else:
        result = backup.backup_config(config, dest=dest, note=note)
        print(f"saved {result.path}" if result.created else f"not saved: {config} is {result}")


def _list(config: Path, dest: Path | None) -> None:
    from msmon.ops import backup

    copies = backup.list_copies(config, dest)
    if not copies:
        print(f"no copies of {config} in {backup.backup_dir(config, dest)} (msmon backup-config {config} makes one)")
        return
    table = Table(box=None, header_style="bold")
    for column in ("#", "time", "hash", "note", "monitor_config changes"):
        table.add_column(column)
    previous = None
    for copy in copies:
        data = copy.path.read_bytes()
        table.add_row(
            str(copy.number), copy.time.strftime("%Y-%m-%d %H:%M:%S"), copy.sha256[:8], escape(copy.note or ""),
            escape(backup.changed_keys(previous, data)),
        )
        previous = data
    wide_console().print(table)
    if config.is_file():
        current = hashlib.sha256(config.read_bytes()).hexdigest()
        same = [c.number for c in copies if c.sha256 == current]
        state = f"identical to #{same[-1]}" if same else "not backed up yet (changes since the latest copy)"
        print(f"current file: {state}")


def register(app: typer.Typer) -> None:
    app.command("backup-config")(backup_config)
