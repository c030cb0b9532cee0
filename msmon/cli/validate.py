"""`msmon validate CONFIG [KEY=VALUE ...] [--json] [--deep] [--all]`."""

from __future__ import annotations

import json
import sys

import typer

from msmon.cli.common import CONFIG_HELP, handle_errors, stdout_console
from msmon.cli.complete import config_keys
from msmon.errors import ExitCode, MsmonError


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)


@handle_errors
def validate(
    config: str = typer.Argument(..., help=CONFIG_HELP),
    overrides: list[str] = typer.Argument(None, metavar="[KEY=VALUE]...", help="Dotlist overrides.",
                                          autocompletion=config_keys),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document to stdout."),
    deep: bool = typer.Option(False, "--deep", help="Also import the model registries (slow) for name checks."),
    show_all: bool = typer.Option(False, "--all", help="Show every resolved key, defaults included."),
) -> None:
    """Check a config's monitor_config before a single step is spent (exit 0 valid, 1 invalid)."""
    from msmon.cli.render import print_result
    from msmon.config.loader import load_config
    from msmon.validate.validator import validate as run_checks

    try:
        result = run_checks(load_config(config, overrides or []), deep=deep)
    except MsmonError as exc:
        if not as_json or exc.exit_code != ExitCode.INVALID:
            raise
        finding = {"severity": "error", "code": "MS010", "path": "", "line": None,
                   "message": exc.message, "hint": exc.hint}
        print(json.dumps({"valid": False, "config": config, "findings": [finding], "monitor_config": None}))
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(ExitCode.INVALID) from None
    if as_json:
        print(json.dumps(result.to_json(config), indent=2, default=str, ensure_ascii=False))
    else:
        print_result(stdout_console(), result, config, show_all)
    if not result.valid:
        raise typer.Exit(ExitCode.INVALID)
