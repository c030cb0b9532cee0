"""`msmon run CONFIG [KEY=VALUE ...]`: validate, then train with monitoring, the board and a run directory."""

from __future__ import annotations

import logging
import sys

import typer

from msmon.cli.common import handle_errors
from msmon.errors import ExitCode


def register(app: typer.Typer) -> None:
    app.command("run")(run)


def _say(line: str) -> None:
    print(f"msmon: {line}", file=sys.stderr, flush=True)


def _stderr_logging(verbose: bool) -> None:
    logger = logging.getLogger("msmon")
    logger.setLevel(logging.INFO)
    if not any(getattr(h, "_msmon_run", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler.setLevel(logging.INFO if verbose else logging.WARNING)
        handler._msmon_run = True  # type: ignore[attr-defined]
        logger.addHandler(handler)


@handle_errors
def run(
    config: str = typer.Argument(..., help="mindformers training YAML with a monitor_config section."),
    overrides: list[str] = typer.Argument(None, metavar="[KEY=VALUE]...", help="Dotlist overrides."),
    board: bool = typer.Option(False, "--board/--no-board", help="Start the board (MindInsight) beside training."),
    port: int = typer.Option(8080, "--port", help="Board port (0: a free one)."),
    keep_board: bool = typer.Option(False, "--keep-board", help="Leave the board running after training."),
    resume: bool = typer.Option(False, "--resume", help="Continue in an existing run directory."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Validate and print the plan; create nothing."),
    plain: bool = typer.Option(False, "--plain", help="Plain progress lines instead of the live panel."),
    worker_num: int = typer.Option(None, "--worker-num", help="Ranks in total: launch through MindSpore's msrun."),
    local_worker_num: int = typer.Option(None, "--local-worker-num", help="Ranks on this machine (multi-machine)."),
    master_addr: str = typer.Option("127.0.0.1", "--master-addr", help="Address of the machine with rank 0."),
    master_port: int = typer.Option(8118, "--master-port", help="msrun scheduler port."),
    node_rank: int = typer.Option(None, "--node-rank", help="Index of this machine (multi-machine)."),
) -> None:
    """Train with the real mindformers Trainer, monitored; exit 0 ok, 1 invalid, 3 failed, 4 stopped by monitor,
    130/143 interrupted."""
    from msmon.cli.render import finding_line
    from msmon.runner.launch import RunRequest, prepare
    from msmon.runner.launch import run as run_plan

    request = RunRequest(
        config=config, overrides=list(overrides or []), board=board, port=port, keep_board=keep_board,
        resume=resume, worker_num=worker_num, local_worker_num=local_worker_num, master_addr=master_addr,
        master_port=master_port, node_rank=node_rank, command=["msmon", *sys.argv[1:]],
    )
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
    _stderr_logging(plan.settings.verbose)
    view = {"live_view": True, "plain": plain, "total_steps": result.total_steps}
    outcome = run_plan(plan, _say, view)
    detail = f": {outcome.error}" if outcome.error else ""
    _say(f"run {outcome.status}{detail} (exit {outcome.exit_code}; run directory {outcome.run_dir})")
    if outcome.status == "failed":
        _say(f"traceback: {outcome.run_dir / 'logs' / 'msmon.log'}")
    raise typer.Exit(outcome.exit_code)
