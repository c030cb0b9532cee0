"""`msmon export CONFIG [KEY=VALUE ...] [-o FILE]`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from msmon.cli.common import CONFIG_HELP, handle_errors
from msmon.cli.complete import config_keys
from msmon.errors import ExitCode, MsmonError
from msmon.findings import Finding


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
    from msmon.config.mindformers_yaml import PLAIN_MODULE, check_run_mode, mindformers_config, render
    from msmon.runner.cpu_support import PLAIN_MODULE_TEXT, for_plain_mindformers
    from msmon.runner.trainer import ensure_generated_data
    from msmon.validate.validator import validate

    plain, flags = parse_launch_flags(overrides or [])
    loaded = load_config(config, [*plain, *flags.overrides])
    check_run_mode(loaded.section("run_mode"))
    result = validate(loaded, resume=True)  # an existing run directory is no error here: nothing is created
    errors = [f for f in result.findings if f.is_error]
    if not result.lacks_only_inputs:
        for finding in errors:
            print(finding_line(finding), file=sys.stderr)
        raise MsmonError(f"{config}: {len(errors)} error(s) in the config; nothing was exported",
                         f"`msmon validate {config}` shows every finding", ExitCode.INVALID)
    training = mindformers_config(loaded)
    check_run_mode(training["run_mode"])
    for_plain = for_plain_mindformers(training)
    module = Path(out).absolute().parent / f"{PLAIN_MODULE}.py" if out is not None and for_plain else None
    note = (f"# msmon's CPU wrapper through auto_register: run_mindformer.py --config FILE --register_path "
            f"{module.parent if module else '<the directory of msmon_cpu.py>'}\n" if for_plain else "")
    text = render(for_plain or training, note)
    if out is None:
        sys.stdout.write(text)
    else:
        _write_all([(module, PLAIN_MODULE_TEXT)] if module is not None else [], Path(out), text)
        print(f"msmon: wrote {out}", file=sys.stderr)
    if for_plain is not None:
        ensure_generated_data(training)  # plain mindformers reads msmon's generated datasets as files
        print(f"msmon: wrote {module} (msmon's CPU support); plain mindformers trains the config with `python "
              f"run_mindformer.py --config {out} --register_path {module.parent}`" if module is not None else
              "msmon: the config names msmon's CPU wrapper: `msmon export ... -o FILE` also writes msmon_cpu.py beside "
              "FILE, which `run_mindformer.py --register_path DIR` loads", file=sys.stderr)
    _name_missing_inputs(errors)


def _write_all(beside: list[tuple[Path, str]], out: Path, text: str) -> None:
    """Write the files ``beside`` the config, then the config at ``out``: all of them, or (a path that cannot be
    written) none that did not exist before, and a one-line error naming that path."""
    from msmon.util.atomic import atomic_write_text

    if os.path.isdir(out):  # Path.is_dir raises on a name too long
        raise MsmonError(f"--out {out} is a directory", f"give a file path, e.g. --out {out / 'exported.yaml'}")
    created: list[Path] = []
    for path, content in [*beside, (out, text)]:
        existed = os.path.exists(path)
        try:
            atomic_write_text(path, content)
        except OSError as exc:
            for made in created:
                made.unlink(missing_ok=True)
            raise MsmonError(f"{path}: cannot write ({exc.strerror})", "pick a writable path for --out") from exc
        if not existed:
            created.append(path)


def _name_missing_inputs(missing: list[Finding]) -> None:
    """The inputs this machine lacks (the file is written: they must exist where the training runs)."""
    from msmon.cli.render import finding_line

    if missing:
        print(f"msmon: {len(missing)} input(s) the training reads are missing on this machine; they must exist where "
              "it runs:", file=sys.stderr)
    for finding in missing:
        print(f"  {finding_line(finding)}", file=sys.stderr)
