"""`msmon status RUN`: one run now, rank by rank (last step, age, state) and, when it is stuck, which rank and how."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from msmon.cli.common import handle_errors, wide_console
from msmon.status import RunStatus

if TYPE_CHECKING:
    from msmon.step_cost import StepCost

#: each rank's last logged step: ms per step inside and outside it, host memory (msmon.step_cost.StepCost)
COST_COLUMNS = ("in step", "outside", "host MiB")
STATE_COLOURS = {"not responding": "bold red", "stopped": "bold red", "no heartbeat": "yellow", RunStatus.FAILED: "red"}


def register(app: typer.Typer) -> None:
    app.command("status")(status)


@handle_errors
def status(
    run: Path = typer.Argument(..., help="A run directory (<save_dir>/<project>/<run>)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of the table."),
    every_rank: bool = typer.Option(False, "--ranks", help="List every rank (beyond 16 ranks only the wrong ones)."),
    rank: str | None = typer.Option(None, "--rank", help="List these ranks: 3,517,0-7."),
) -> None:
    """Show a run, its ranks in one line (states counted, the wrong ranks named with their machine) and the ranks
    one by one (up to 16 ranks; beyond, the ones not responding or holding it up): last step, seconds since it
    ended, state; why no step ends when stuck."""
    from rich.markup import escape
    from rich.table import Table

    from msmon.ops.probes import probes_of
    from msmon.ops.rank_summary import parse_ranks, shown_rows, summarize
    from msmon.ops.runs import rank_status
    from msmon.util.durations import format_duration

    chosen = None if rank is None else parse_ranks(rank)
    info, ranks = rank_status(run)
    probes = probes_of(run, running=info.status == RunStatus.RUNNING)
    counted = summarize(ranks.states)
    if as_json:
        stuck = ranks.diagnosis
        print(json.dumps({**info.to_json(), "summary": counted.to_json(), "idle_s": ranks.idle_s,
                          "stuck": None if stuck is None else {"ranks": stuck.culprits, "why": stuck.lines},
                          "probes": probes.to_json()}, indent=2))
        return
    console = wide_console()
    step = "-" if info.last_step is None else str(info.last_step)
    console.print(f"{escape(info.project)}/{escape(info.run)}: {info.status}, step {step}, "
                  f"{info.alert_count or 0} alert(s){f', {info.rollbacks} rollback(s)' if info.rollbacks else ''}, "
                  f"{format_duration(info.duration_s)}")
    for line in probes.lines():
        console.print(escape(line))
    if not ranks.states:
        console.print("no rank heartbeats in heartbeats/ (each rank writes one while it trains; older runs have none)")
        return
    console.print(escape(counted.line()))
    rows, left_out = shown_rows(ranks.states, every=every_rank, chosen=chosen,
                                culprits=ranks.diagnosis.culprits if ranks.diagnosis else ())
    table = Table(box=None, header_style="bold")
    for column in ("rank", "last step", "age", "heartbeat", "state", *COST_COLUMNS, "host", "pid"):
        table.add_column(column, justify="left" if column in ("state", "host", "pid") else "right")
    for state in rows:
        colour = STATE_COLOURS.get(state.state, "default")
        table.add_row(
            str(state.rank), str(state.ended or "-"), format_duration(state.age_s(ranks.now), fine=True),
            format_duration(state.alive_age_s, fine=True), f"[{colour}]{escape(state.state)}[/]",
            *cost_cells(state.last_cost), escape(str(state.host or "-")), str(state.pid or "-"),
        )
    if rows:
        console.print(table)
    if len(rows) < len(ranks.states):
        more = f"{left_out:,} more not ok; " if left_out else ""
        console.print(f"{len(rows):,} of {len(ranks.states):,} ranks listed ({more}--ranks lists every rank, "
                      "--rank 3,517,0-7 some)")
    if ranks.diagnosis is not None:
        console.print(f"no step has ended for {format_duration(ranks.idle_s, fine=True)}:")
        for line in ranks.diagnosis.lines:
            console.print(f"  {escape(line)}")


def cost_cells(cost: StepCost | None) -> tuple[str, str, str]:
    """The COST_COLUMNS of one rank ("-" before its first logged step)."""
    from msmon.util.numbers import fmt_number

    if cost is None:
        return "-", "-", "-"
    host = fmt_number(round(cost.host_mb)) if cost.host_mb is not None else "-"
    return f"{cost.inside_ms:.1f} ms", f"{cost.outside_ms:.1f} ms", host
