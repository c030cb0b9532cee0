"""The ``msmon`` command: wires the per-command modules together."""

from __future__ import annotations

import sys

import typer

from msmon import __version__
from msmon.cli import (
    backup,
    board,
    clean,
    compare,
    doctor,
    export,
    init,
    probe,
    replay,
    report,
    resume,
    run,
    runs,
    status,
    validate,
)
from msmon.cli.common import fail
from msmon.errors import MsmonError

app = typer.Typer(
    name="msmon",
    help="Launch, validate and watch MindSpore Transformers (mindformers) training runs.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        print(f"msmon {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
) -> None:
    """Launch, validate and watch MindSpore Transformers (mindformers) training runs."""


for module in (validate, init, run, export, resume, board, backup, runs, status, probe, clean, replay, report,
               compare, doctor):
    module.register(app)


def main() -> None:
    """``msmon run CONFIG ... -- COMMAND ...``: COMMAND is split off before Click parses (Click drops the ``--``)."""
    args, command = run.split_command(sys.argv[1:])
    try:
        args = backup.current_form(args)
    except MsmonError as exc:
        sys.exit(fail(exc.message, exc.hint, exc.exit_code).exit_code)
    app(args=args, prog_name="msmon", obj={run.COMMAND: command})  # completion answers to _MSMON_COMPLETE
