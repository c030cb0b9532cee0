"""`msmon run CONFIG [KEY=VALUE ...]`: validate, then train with monitoring, the board and a run directory."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from msmon.cli.common import CONFIG_HELP, handle_errors
from msmon.cli.complete import config_keys
from msmon.errors import ExitCode, MsmonError

if TYPE_CHECKING:
    from msmon.runner.plan import RunPlan, RunRequest


#: run_mindformer.py's flags (``--load_checkpoint CKPT``, ...) reach the ``overrides`` argument, parsed there
#: (msmon.config.launch_flags); `msmon run`, `msmon export` and the probe of `msmon resume` take them alike.
WITH_LAUNCH_FLAGS = {"allow_extra_args": True, "ignore_unknown_options": True}
COMMAND = "command"  # the context object's key: what followed `--` (msmon run CONFIG -- COMMAND)


def split_command(args: list[str]) -> tuple[list[str], list[str] | None]:
    """``run ... -- COMMAND ...`` -> (msmon's arguments, COMMAND); COMMAND None without ``--``."""
    if args[:1] != ["run"] or "--" not in args:
        return args, None
    cut = args.index("--")
    return args[:cut], args[cut + 1:]


def reference_overrides(paths: list[Path]) -> list[str]:
    """``--reference`` as the override of ``monitor_config.reference.runs`` (absolute paths, the ranks' view)."""
    if not paths:
        return []
    return ["monitor_config.reference.runs=[" + ",".join(json.dumps(str(p.absolute())) for p in paths) + "]"]


def register(app: typer.Typer) -> None:
    from msmon.config.launch_flags import help_text

    app.command("run", epilog=help_text(), context_settings=WITH_LAUNCH_FLAGS)(run)


def _say(line: str) -> None:
    print(f"msmon: {line}", file=sys.stderr, flush=True)


@handle_errors
def run(
    ctx: typer.Context,
    config: str = typer.Argument(..., help=CONFIG_HELP),
    overrides: list[str] = typer.Argument(None, metavar="[KEY=VALUE | --run_mindformer_flag VALUE]...",
                                          help="Dotlist overrides, and run_mindformer.py's flags (below).",
                                          autocompletion=config_keys),
    board: bool = typer.Option(False, "--board/--no-board", help="Start the board (MindInsight) beside training."),
    port: int = typer.Option(8080, "--port", min=0, max=65535, help="Board port (0: a free one)."),
    keep_board: bool = typer.Option(False, "--keep-board", help="Leave the board running after training."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run (its directory) from its latest complete "
                                "checkpoint."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Validate and print the plan; create nothing."),
    plain: bool = typer.Option(False, "--plain", help="Plain progress lines instead of the live panel "
                               "(the framework's output as quiet as under the panel)."),
    framework_logs: bool = typer.Option(
        False, "--framework-logs", help="Show all of mindformers' and MindSpore's output too (above the panel, or "
        "between the plain lines). Default: none of it on screen, all of it in <run>/logs/console.log."),
    report: bool = typer.Option(False, "--report", help="Write the HTML report when the run ends (also after a "
                                "failure or an interruption) and print its path."),
    worker_num: int = typer.Option(None, "--worker-num", help="Ranks in total: launch through MindSpore's msrun."),
    local_worker_num: int = typer.Option(None, "--local-worker-num", help="Ranks on this machine (multi-machine)."),
    master_addr: str = typer.Option("127.0.0.1", "--master-addr", help="Address of the machine with rank 0."),
    master_port: int = typer.Option(8118, "--master-port", min=1, max=65535, help="msrun scheduler port."),
    node_rank: int = typer.Option(None, "--node-rank", help="Index of this machine (multi-machine)."),
    msrun_arg: list[str] = typer.Option([], "--msrun-arg", help="One of msrun's own flags, passed through "
                                        "(repeatable): --msrun-arg=--bind_core=True --msrun-arg=--cluster_time_out="
                                        "7200 (mindformers' msrun_launcher.sh sets both)."),
    max_restarts: int = typer.Option(0, "--max-restarts", min=0, help="Restart a training that dies (or hangs, "
                                     "with stall action stop) from its latest checkpoint, up to N times."),
    restart_backoff: float = typer.Option(10.0, "--restart-backoff", min=0.0, help="Seconds before the first "
                                          "restart (doubled at each one, at most 300)."),
    reference: list[Path] = typer.Option([], "--reference", help="An earlier run this run must follow (repeatable; "
                                         "monitor_config.reference.runs): an msmon run directory, a mindformers "
                                         "info.log, a TensorBoard directory or a CSV / JSON Lines file."),
) -> None:
    """Train with the real mindformers Trainer, monitored; exit 0 ok, 1 invalid, 3 failed, 4 stopped by monitor,
    130/143 interrupted. --resume continues the run from its latest complete checkpoint.

    msmon run CONFIG [...] -- COMMAND [ARGS...] monitors your own launch (python train.py, msrun ..., a launcher
    script): every process of it that trains a mindformers Trainer gets msmon's callback; an argument that names
    CONFIG is given the run directory's mindformers.yaml (docs/run.md, "Your own launch")."""
    import os

    from msmon.config.launch_flags import parse_launch_flags
    from msmon.launch_layout import LaunchLayout
    from msmon.runner.plan import RunRequest

    plain_overrides, flags = parse_launch_flags(overrides or [])
    if flags.register_path is not None:  # as run_mindformer.py does: every process started from here sees it
        os.environ["REGISTER_PATH"] = str(Path(flags.register_path).absolute())
    request = RunRequest(
        config=config, overrides=[*plain_overrides, *flags.overrides, *reference_overrides(reference)], board=board,
        port=port, keep_board=keep_board, resume=resume,
        launch_layout=LaunchLayout(worker_num, local_worker_num, master_addr, master_port, node_rank, tuple(msrun_arg)),
        max_restarts=max_restarts,
        restart_backoff_s=restart_backoff, command=["msmon", *sys.argv[1:]],
        launch=_command(ctx),
    )
    launch(request, dry_run=dry_run, plain=plain, framework_logs=framework_logs, report=report)


def _command(ctx: typer.Context) -> list[str]:
    command = (ctx.obj or {}).get(COMMAND)
    if command == []:
        raise MsmonError("nothing after `--`: no command to monitor",
                         "e.g. msmon run CONFIG -- python train.py --config CONFIG", ExitCode.USAGE)
    return list(command or [])


def launch(request: RunRequest, *, dry_run: bool, plain: bool, framework_logs: bool, report: bool) -> None:
    """Validate, then train (or print the plan); exits with the run's code (`msmon run` and `msmon resume`)."""
    from msmon.cli.render import finding_line
    from msmon.runner.plan import prepare
    from msmon.runner.protocol import ViewOptions
    from msmon.runner.supervise import run as run_plan
    from msmon.status import RunStatus
    from msmon.util import logs

    config = request.config
    result, plan = prepare(request)
    for finding in result.findings:
        print(finding_line(finding), file=sys.stderr)
    if plan is None:
        errors = sum(f.is_error for f in result.findings)
        print(f"error: {config}: {errors} error(s) in the config; nothing was started", file=sys.stderr)
        raise typer.Exit(ExitCode.INVALID)
    if dry_run:
        print("dry run: nothing was created")
        for line in plan.describe():
            print(line)
        return
    if not logs.has_console_handler():
        logs.attach(logs.console_handler(logging.INFO if plan.settings.verbose else logging.WARNING))
    outcome = run_plan(plan, _say, ViewOptions(plain, framework_logs, result.total_steps))
    detail = f": {outcome.error or outcome.note}" if outcome.error or outcome.note else ""
    _say(f"run {outcome.status}{detail} (exit {outcome.exit_code}; run directory {outcome.run_dir})")
    if outcome.status is RunStatus.FAILED:
        _say(f"traceback: {outcome.run_dir / 'logs' / 'msmon.log'}")
    _ending(plan, outcome.run_dir, report)
    raise typer.Exit(outcome.exit_code)


def _ending(plan: RunPlan, run_dir: Path, report: bool) -> None:
    """What happened and the next commands (stderr, like every line of `msmon run`); the report with --report."""
    from msmon.ops.rank_summary import ending_lines
    from msmon.ops.runs import previous_run
    from msmon.view.ending import NextCommands, next_lines, summary_lines
    from msmon.view.report import write_report
    from msmon.view.series import load_run

    try:
        finished = load_run(run_dir)
    except MsmonError as exc:  # the run directory went away with the run
        _say(f"no summary: {exc}")
        return
    written = None
    if report:
        try:
            written, _ = write_report(run_dir)
        except MsmonError as exc:  # the run's own exit code stands
            _say(f"no report: {exc}")
        else:
            _say(f"report: {written}")
    board = plan.board_dir() if plan.board_backend else None
    commands = NextCommands(board, plan.board_backend or "",
                            previous_run(plan.save_dir(), run_dir), written)
    print("\n".join([*summary_lines(finished), *ending_lines(run_dir), *next_lines(finished, commands)]),
          file=sys.stderr, flush=True)
