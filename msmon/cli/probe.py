"""`msmon probe RUN profile|distributions`: measure a running training over a few steps, on request (docs/probe.md)."""

from __future__ import annotations

from pathlib import Path

import typer

from msmon.cli.common import handle_errors
from msmon.cli.complete import run_dirs
from msmon.errors import MsmonError
from msmon.probe import DEFAULT_LOGS, DEFAULT_STEPS, MAX_STEPS, ProbeKind


@handle_errors
def probe(
    run: Path = typer.Argument(..., help="A running run's directory (<save_dir>/<project>/<run>).",
                               autocompletion=run_dirs),
    kind: ProbeKind = typer.Argument(..., help="What to measure: profile (MindSpore's profiler: operator times), "
                                     "distributions (histograms of each layer group's weights, updates and "
                                     "gradients)."),
    steps: int = typer.Option(DEFAULT_STEPS, "--steps", min=1, max=MAX_STEPS,
                              help="profile: how many steps to measure."),
    logs: int = typer.Option(DEFAULT_LOGS, "--logs", min=1, max=MAX_STEPS,
                             help="distributions: at how many logging steps."),
    ranks: str = typer.Option("all", "--ranks", help="The ranks that measure: all, or a list such as 0,3."),
) -> None:
    """Ask a running training to measure the next STEPS steps (distributions: its next LOGS logging steps) from its
    next logging step, then go on as before."""
    from msmon.ops.probes import request_probe
    from msmon.probe import parse_ranks

    try:
        chosen = parse_ranks(ranks)
    except ValueError as exc:
        raise MsmonError(f"--ranks: {exc}", "pass all, or rank numbers separated by commas: 0,3") from exc
    distributions = kind is ProbeKind.DISTRIBUTIONS
    request = request_probe(run, kind, logs if distributions else steps, chosen)
    who = "every rank" if chosen is None else f"rank(s) {', '.join(map(str, chosen))}"
    span = f"at {logs} logging step(s)" if distributions else f"of {steps} step(s)"
    print(f"requested {request.id}: a {kind.value}{' probe' if distributions else ''} {span} on {who}, from each "
          "rank's next logging step")
    where = "distributions" if distributions else "profiles"
    print(f"the result: {run / where}/<from>-<to>/rank_N/; `msmon status {run}` shows when it is done")


def register(app: typer.Typer) -> None:
    app.command("probe")(probe)
