"""`msmon validate CONFIG [KEY=VALUE | --run_mindformer_flag VALUE ...] [--worker-num N] [--json] [--deep] [--all]`."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import typer

from msmon.cli.common import CONFIG_HELP, handle_errors, stdout_console
from msmon.cli.complete import config_keys
from msmon.errors import ExitCode, MsmonError


def register(app: typer.Typer) -> None:
    from msmon.cli.run import WITH_LAUNCH_FLAGS
    from msmon.config.launch_flags import help_text

    app.command("validate", epilog=help_text(), context_settings=WITH_LAUNCH_FLAGS)(validate)


@handle_errors
def validate(
    config: str = typer.Argument(..., help=CONFIG_HELP),
    overrides: list[str] = typer.Argument(None, metavar="[KEY=VALUE | --run_mindformer_flag VALUE]...",
                                          help="As for msmon run: dotlist overrides and run_mindformer.py's flags.",
                                          autocompletion=config_keys),
    worker_num: int = typer.Option(None, "--worker-num", min=1, help="Check for msmon run --worker-num N (ranks "
                                   "through msrun); default: one process, as msmon run CONFIG starts it."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document to stdout."),
    deep: bool = typer.Option(False, "--deep", help="Read the installed mindformers' registry again (slow) instead "
                              "of msmon's cache of it."),
    show_all: bool = typer.Option(False, "--all", help="Show every resolved key, defaults included."),
) -> None:
    """Check a whole training config before a single step is spent (exit 0 valid, 1 invalid).

    Its monitor_config; every key, type: and value against the installed mindformers; what msmon run refuses."""
    from msmon.config.launch_flags import parse_launch_flags
    from msmon.config.loader import load_config
    from msmon.launch_layout import LaunchLayout
    from msmon.validate.validator import validate as run_checks

    plain, flags = parse_launch_flags(overrides or [])
    if flags.register_path is not None:  # as msmon run: the auto_register modules are looked up there
        os.environ["REGISTER_PATH"] = str(Path(flags.register_path).absolute())
    try:
        loaded = load_config(config, [*plain, *flags.overrides])
        result = run_checks(loaded, deep=deep, launch=LaunchLayout(worker_num=worker_num))
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
        from msmon.cli.render import print_result  # Rich: only for the tables

        print_result(stdout_console(), result, config, show_all)
    if not result.valid:
        raise typer.Exit(ExitCode.INVALID)
