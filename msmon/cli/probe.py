"""`msmon probe RUN profile`: measure a running training over a few steps, on request (docs/probe.md)."""

from __future__ import annotations

from pathlib import Path

import typer

from msmon.cli.common import handle_errors
from msmon.cli.complete import run_dirs
from msmon.errors import MsmonError
from msmon.probe import DEFAULT_STEPS, MAX_STEPS, ProbeKind


@handle_errors
def probe(
    run: Path = typer.Argument(..., help="A running run's directory (<save_dir>/<project>/<run>).",
                               autocompletion=run_dirs),
    kind: ProbeKind = typer.Argument(..., help="What to measure: profile (MindSpore's profiler: operator times)."),
    steps: int = typer.Option(DEFAULT_STEPS, "--steps", min=1, max=MAX_STEPS, help="How many steps to measure."),
    ranks: str = typer.Option("all", "--ranks", help="The ranks that measure: all, or a list such as 0,3."),
) -> None:
    """Ask a running training to measure the next STEPS steps from its next logging step, then go on as before."""
    from msmon.ops.probes import request_probe
    from msmon.probe import parse_ranks

    try:
        chosen = parse_ranks(ranks)
    except ValueError as exc:
        raise MsmonError(f"--ranks: {exc}", "pass all, or rank numbers separated by commas: 0,3") from exc
    request = request_probe(run, kind, steps, chosen)
    who = "every rank" if chosen is None else f"rank(s) {', '.join(map(str, chosen))}"
    print(f"requested {request.id}: a {kind.value} of {steps} step(s) on {who}, from each rank's next logging step")
    print(f"the result: {run / 'profiles'}/<from>-<to>/rank_N/; `msmon status {run}` shows when it is done")


def register(app: typer.Typer) -> None:
    app.command("probe")(probe)
