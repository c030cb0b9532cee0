"""`msmon init CONFIG`: add a starting monitor_config to a training YAML, then validate it."""

from __future__ import annotations

import typer

from msmon.cli.common import handle_errors, stdout_console
from msmon.errors import ExitCode


def register(app: typer.Typer) -> None:
    app.command("init")(init)


@handle_errors
def init(config: str = typer.Argument(..., help="The training YAML (without msmon's keys in its monitor_config).")
         ) -> None:
    """Add msmon's starting monitor_config keys (beside mindformers' own, comments and order kept, a backup copy made
    first), then validate them; the rest of the config's findings are listed apart (exit 0 when the keys were added
    and are valid, 1 when nothing was written or they are not)."""
    import dataclasses

    from msmon.cli.render import finding_line, print_result
    from msmon.config.loader import load_config
    from msmon.ops.init_config import add_monitor_config
    from msmon.validate.validator import validate

    done = add_monitor_config(config)
    print(done.describe())
    result = validate(load_config(config))
    own, other = result.msmon_findings()
    console = stdout_console()
    print_result(console, dataclasses.replace(result, findings=own), config, show_all=False)
    if other:
        errors = sum(f.is_error for f in other)
        console.print(f"the rest of the config, which init did not change: {errors} error(s), "
                      f"{len(other) - errors} warning(s) (msmon validate {config} shows them with the rest):",
                      markup=False)
        for finding in other:
            console.print(finding_line(finding), markup=False)
    if any(f.is_error for f in own):
        raise typer.Exit(ExitCode.INVALID)
