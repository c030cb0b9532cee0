"""`msmon backup-config save|list|diff|restore CONFIG`: keep every version of a training YAML.

Subcommands, as `msmon board start|status|stop`. The flag forms of msmon 0.1 (`msmon backup-config CONFIG
[--list | --diff [A] [B] | --restore REF]`) still work until 0.3.0: ``current_form`` rewrites them before Click
parses and says the new form on stderr.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import typer

from msmon.cli.common import handle_errors, wide_console
from msmon.errors import ExitCode, MsmonError

COMMAND = "backup-config"
SUBCOMMANDS = ("save", "list", "diff", "restore")
#: The flag of msmon 0.1 that chose each subcommand (no flag: save).
LEGACY_FLAGS = {"--list": "list", "--diff": "diff", "--restore": "restore"}

backup_app = typer.Typer(help="Keep every version of a training YAML: save, list, diff and restore copies.",
                         no_args_is_help=True)

CONFIG_ARG = typer.Argument(..., help="The training YAML.")
DEST_OPTION = typer.Option(None, "--dest", help="Backup directory (default: monitor_config_backup/ beside it).")


def current_form(args: list[str]) -> list[str]:
    """``args`` with an msmon 0.1 flag form of ``backup-config`` rewritten as its subcommand (and a deprecation
    line on stderr); any other command line unchanged. MsmonError (exit 2) for two modes at once."""
    if args[:1] != [COMMAND] or len(args) < 2 or args[1] in (*SUBCOMMANDS, "-h", "--help"):
        return args
    rest, modes, restore_ref = [], [], []
    tokens = iter(args[1:])
    for token in tokens:
        flag, _, value = token.partition("=")
        if flag in LEGACY_FLAGS:
            modes.append(flag)
            if flag == "--restore":
                restore_ref.append(value if value else next(tokens, ""))
        else:
            rest.append(token)
    if len(modes) > 1:
        raise MsmonError(f"{' and '.join(modes)} exclude each other",
                         "pass one subcommand: msmon backup-config list|diff|restore CONFIG", ExitCode.USAGE)
    subcommand = LEGACY_FLAGS[modes[0]] if modes else "save"
    new = [COMMAND, subcommand, *rest, *restore_ref]
    print(f"msmon: `msmon {' '.join(args)}` is deprecated (removed in 0.3.0); use `msmon {' '.join(new)}`",
          file=sys.stderr, flush=True)
    return new


def _file_errors(exc: OSError) -> MsmonError:
    where = f" {exc.filename}" if exc.filename else ""
    return MsmonError(f"cannot read or write{where}: {exc.strerror or exc}",
                      "check permissions and free space, or pass --dest DIR")


@backup_app.command("save")
@handle_errors
def save(
    config: Path = CONFIG_ARG,
    dest: Path = DEST_OPTION,
    note: str = typer.Option(None, "--note", help="A note stored with the new copy."),
) -> None:
    """Save a timestamped copy of CONFIG (identical content is not saved twice)."""
    from msmon.ops import backup

    try:
        result = backup.backup_config(config, dest=dest, note=note)
    except OSError as exc:
        raise _file_errors(exc) from exc
    print(f"saved {result.path}" if result.created else f"not saved: {config} is {result}")


@backup_app.command("list")
@handle_errors
def list_copies(config: Path = CONFIG_ARG, dest: Path = DEST_OPTION) -> None:
    """List the copies of CONFIG: time, hash, note, the monitor_config keys each changed."""
    from msmon.ops import backup

    try:
        copies = backup.list_copies(config, dest)
        if not copies:
            print(f"no copies of {config} in {backup.backup_dir(config, dest)} "
                  f"(msmon backup-config save {config} makes one)")
            return
        from rich.markup import escape
        from rich.table import Table

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
    except OSError as exc:
        raise _file_errors(exc) from exc


@backup_app.command("diff")
@handle_errors
def diff(
    config: Path = CONFIG_ARG,
    refs: list[str] = typer.Argument(None, help="Copies A [B] (number, name, timestamp or 'latest'); none: the "
                                     "latest copy and the file; one: that copy and the file."),
    dest: Path = DEST_OPTION,
) -> None:
    """Diff copies A and B, A and the file, or the latest copy and the file (monitor_config keys, then the lines)."""
    from msmon.ops import backup

    refs = list(refs or [])
    if len(refs) > 2:
        raise MsmonError("diff takes at most two copies", "msmon backup-config diff CONFIG [A] [B]", ExitCode.USAGE)
    first, second = [*refs, None, None][:2]
    try:
        changes = backup.diff_configs(config, first, second, dest=dest)
    except OSError as exc:
        raise _file_errors(exc) from exc
    print(f"monitor_config: {changes.left} -> {changes.right}")
    for line in changes.keys or ["(no monitor_config change)"]:
        print(f"  {line}")
    print("\n".join(changes.unified) if changes.unified else "(files identical)")


@backup_app.command("restore")
@handle_errors
def restore(
    config: Path = CONFIG_ARG,
    ref: str = typer.Argument(..., help="The copy to write back (number, name, timestamp or 'latest')."),
    dest: Path = DEST_OPTION,
) -> None:
    """Write copy REF back to CONFIG (the current file is saved as a copy first)."""
    from msmon.ops import backup

    try:
        saved, chosen = backup.restore(config, ref, dest=dest)
    except OSError as exc:
        raise _file_errors(exc) from exc
    if saved is not None:
        print(f"current file {'saved as ' + str(saved.path) if saved.created else str(saved)}")
    print(f"restored {chosen.path.name} to {config}")


def register(app: typer.Typer) -> None:
    app.add_typer(backup_app, name=COMMAND)
