"""`msmon export CONFIG [KEY=VALUE ...] [-o FILE]`."""

from __future__ import annotations

import sys

import typer

from msmon.cli.common import CONFIG_HELP, handle_errors
from msmon.cli.complete import config_keys
from msmon.errors import ExitCode, MsmonError


def register(app: typer.Typer) -> None:
    from msmon.cli.run import WITH_LAUNCH_FLAGS
    from msmon.config.launch_flags import help_text

    app.command("export", epilog=help_text(), context_settings=WITH_LAUNCH_FLAGS)(export)


@handle_errors
def export(
    config: str = typer.Argument(..., help=CONFIG_HELP),
    overrides: list[str] = typer.Argument(None, metavar="[KEY=VALUE | --run_mindformer_flag VALUE]...",
                                          help="As for msmon run: dotlist overrides and run_mindformer.py's flags.",
                                          autocompletion=config_keys),
    out: str = typer.Option(None, "--out", "-o", help="Write to this file instead of stdout."),
) -> None:
    """Write the config `msmon run` hands mindformers (its mindformers.yaml): plain mindformers loads it."""
    from msmon.cli.render import finding_line
    from msmon.config.launch_flags import parse_launch_flags
    from msmon.config.loader import load_config
    from msmon.config.mindformers_yaml import check_run_mode, mindformers_config, render
    from msmon.util.atomic import atomic_write_text
    from msmon.validate.validator import validate

    plain, flags = parse_launch_flags(overrides or [])
    loaded = load_config(config, [*plain, *flags.overrides])
    check_run_mode(loaded.section("run_mode"))
    result = validate(loaded, resume=True)  # an existing run directory is no error here: nothing is created
    if not result.valid:
        errors = [f for f in result.findings if f.is_error]
        for finding in errors:
            print(finding_line(finding), file=sys.stderr)
        raise MsmonError(f"{config}: {len(errors)} error(s) in the config; nothing was exported",
                         f"`msmon validate {config}` shows every finding", ExitCode.INVALID)
    training = mindformers_config(loaded)
    check_run_mode(training["run_mode"])
    text = render(training)
    if out is None:
        sys.stdout.write(text)
        return
    try:
        atomic_write_text(out, text)
    except OSError as exc:
        raise MsmonError(f"{out}: cannot write ({exc.strerror})", "pick a writable path for --out") from exc
    print(f"msmon: wrote {out}", file=sys.stderr)
