"""`msmon resume RUN_DIR`: continue a run from its latest complete checkpoint, as it was started.

The run's own config snapshot (``config.yaml``) with the overrides, launch layout and restart policy run.json keeps
(``request``; a run.json of an older msmon: its ``msmon run`` command line, parsed by that command's own parser), in
the working directory it ran in; the run's
directory is named by overrides (``save_dir``, ``project_name``, ``run_name``), so a generated run_name
(``auto``, ``${now:...}``) still finds it.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from msmon.cli.common import handle_errors
from msmon.cli.complete import run_dirs
from msmon.errors import MsmonError
from msmon.util.jsonfiles import JsonObject

#: The options of `msmon run` a resume takes over from the recorded command line (a run.json without ``request``).
LAUNCH_OPTIONS = ("worker_num", "local_worker_num", "master_addr", "master_port", "node_rank")

if TYPE_CHECKING:
    from msmon.runner.plan import ResumeRecord


def register(app: typer.Typer) -> None:
    app.command("resume")(resume)


def recorded_options(command: list[str]) -> JsonObject:
    """The parameters of the ``msmon run ...`` command line ``command`` (run.json's), by `msmon run`'s parser."""
    from msmon.cli.run import WITH_LAUNCH_FLAGS, run

    if command[1:2] != ["run"] or len(command) < 3:
        raise MsmonError(f"run.json's command is not an `msmon run` command: {' '.join(command) or 'none'}",
                         "resume it with msmon run CONFIG --resume")
    probe = typer.Typer()
    probe.command(context_settings=WITH_LAUNCH_FLAGS)(run)
    parser = typer.main.get_command(probe)
    with parser.make_context("run", list(command[2:]), resilient_parsing=True) as context:
        return dict(context.params)


def record_of_command(command: list[str]) -> ResumeRecord:
    """The request of a run.json written before msmon kept it (``request``): parsed from its command line."""
    from msmon.config.launch_flags import parse_launch_flags
    from msmon.launch_layout import LaunchLayout
    from msmon.runner.plan import ResumeRecord

    options = recorded_options(command)
    plain, flags = parse_launch_flags(options.get("overrides") or [])  # run_mindformer.py's flags as overrides
    launch = LaunchLayout(**{name: options[name] for name in LAUNCH_OPTIONS if options.get(name) is not None},
                          msrun_args=tuple(options.get("msrun_arg") or ()))
    return ResumeRecord(
        (*plain, *flags.overrides), launch, max_restarts=int(options.get("max_restarts") or 0),
        restart_backoff_s=float(options.get("restart_backoff") or 10.0),
    )


def record_fields(record: ResumeRecord) -> JsonObject:
    """A record as the keyword arguments of a RunRequest."""
    return {"overrides": list(record.overrides), "launch_layout": record.launch_layout,
            "max_restarts": record.max_restarts, "restart_backoff_s": record.restart_backoff_s}


def resumed_command(snapshot: Path, record: ResumeRecord) -> list[str]:
    """The `msmon run` command line the resumed run amounts to (run.json's ``command``)."""
    flags = [f"--{name.replace('_', '-')}={value}" for name in LAUNCH_OPTIONS
             if (value := getattr(record.launch_layout, name)) is not None]
    flags += [f"--msrun-arg={arg}" for arg in record.launch_layout.msrun_args]
    return ["msmon", "run", str(snapshot), *record.overrides, "--resume", *flags,
            "--max-restarts", str(record.max_restarts), "--restart-backoff", f"{record.restart_backoff_s:g}"]


@handle_errors
def resume(
    run_dir: str = typer.Argument(..., help="The run directory to continue.", autocompletion=run_dirs),
    max_restarts: int = typer.Option(None, "--max-restarts", min=0, help="Restarts after a crash or a hang "
                                     "(default: the recorded command's)."),
    restart_backoff: float = typer.Option(None, "--restart-backoff", min=0.0, help="Seconds before the first "
                                          "restart (default: the recorded command's)."),
    board: bool = typer.Option(False, "--board/--no-board", help="Start the board beside training."),
    port: int = typer.Option(8080, "--port", min=0, max=65535, help="Board port (0: a free one)."),
    keep_board: bool = typer.Option(False, "--keep-board", help="Leave the board running after training."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Validate and print the plan; create nothing."),
    plain: bool = typer.Option(False, "--plain", help="Plain progress lines instead of the live "
                               "panel (the framework's output as quiet as under the panel)."),
    framework_logs: bool = typer.Option(False, "--framework-logs", help="Show all of the framework's output too "
                                        "(default: in <run>/logs/console.log only)."),
    report: bool = typer.Option(False, "--report", help="Write the HTML report when the run ends."),
) -> None:
    """Continue a run from its latest complete checkpoint with its own config snapshot and recorded overrides;
    exit codes as `msmon run` (1: nothing to resume, or the checkpoint does not fit)."""
    from msmon import layout
    from msmon.cli.run import launch
    from msmon.config.loader import override_value
    from msmon.run_record import recorded
    from msmon.runner.plan import ResumeRecord, RunRequest

    path = Path(run_dir).absolute()
    info = recorded(path)
    snapshot = path / layout.CONFIG_SNAPSHOT
    if info is None or not snapshot.is_file():
        missing = layout.RUN_JSON if info is None else layout.CONFIG_SNAPSHOT
        raise MsmonError(f"{path}: no {missing}: not a run directory of msmon run", "pass a run directory")
    if info.launch == "command" or "--" in info.command:
        raise MsmonError("this run monitored its own launch (msmon run CONFIG -- COMMAND): msmon resume replays "
                         "msmon's launch only", "run the same command again with --resume before the `--`")
    record = ResumeRecord.from_json(info.request) if info.request is not None else record_of_command(
        list(info.command))
    here = {"monitor_config.save_dir": path.parent.parent, "monitor_config.project_name": path.parent.name,
            "monitor_config.run_name": path.name}
    kept = [item for item in record.overrides if item.split("=", 1)[0] not in here]
    overrides = [*kept, *(f"{key}={override_value(str(value))}" for key, value in here.items())]
    if info.cwd and Path(info.cwd).is_dir():
        os.chdir(info.cwd)  # the config's relative paths (datasets) mean what they meant
    record = dataclasses.replace(
        record, overrides=tuple(overrides),
        max_restarts=max_restarts if max_restarts is not None else record.max_restarts,
        restart_backoff_s=restart_backoff if restart_backoff is not None else record.restart_backoff_s)
    request = RunRequest(config=str(snapshot), board=board, port=port, keep_board=keep_board, resume=True,
                         command=resumed_command(snapshot, record), **record_fields(record))
    print(f"msmon: resuming {path}", file=sys.stderr, flush=True)
    launch(request, dry_run=dry_run, plain=plain, framework_logs=framework_logs, report=report)
