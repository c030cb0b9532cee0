"""`msmon init CONFIG`: add a starting monitor_config to a training YAML, then validate it."""

from __future__ import annotations

import typer

from msmon.cli.common import handle_errors, stdout_console
from msmon.errors import ExitCode


def register(app: typer.Typer) -> None:
    app.command("init")(init)


@handle_errors
def init(config: str = typer.Argument(..., help="The training YAML (it must have no monitor_config yet).")) -> None:
    """Add a starting monitor_config (comments and order kept, a backup copy made first), then validate the file
    (exit 0 valid, 1 invalid or nothing written)."""
    from msmon.cli.render import print_result
    from msmon.config.loader import load_config
    from msmon.ops.init_config import add_monitor_config
    from msmon.validate.validator import validate

    done = add_monitor_config(config)
    print(f"added monitor_config to {done.path} (the file as it was: {done.backup.path})")
    result = validate(load_config(config))
    print_result(stdout_console(), result, config, show_all=False)
    if not result.valid:
        raise typer.Exit(ExitCode.INVALID)
