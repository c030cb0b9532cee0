"""A run's ranks in one line at any rank count: how many, on how many machines, how many in which state, and the
ranks that are wrong named first with their machine and for how long (``msmon status``, ``msmon runs``, the
ending of ``msmon run``: ``ending_lines``); and which ranks ``msmon status`` lists (``--ranks``, ``--rank 3,517``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from msmon.errors import MsmonError
from msmon.ops.ranks import LIVE, RankState, report
from msmon.util.durations import format_duration
from msmon.util.ranks import rank_ranges

MAX_STATES = 3  # states counted one by one in the line; the rest are counted together
MAX_OUTLIER_GROUPS = 3  # groups of wrong ranks named in the line; the rest are counted
FEW_RANKS = 16  # up to this many ranks `msmon status` lists every one; beyond, the wrong ones only
MAX_WRONG_ROWS = 32  # wrong ranks `msmon status` lists unasked; the rest are counted


@dataclass(frozen=True)
class Outliers:
    """Ranks in the same wrong state on the same machine (``host`` None: not known), silent for up to ``for_s``."""

    ranks: tuple[int, ...]
    state: str  # not responding, stopped, no heartbeat
    host: str | None
    for_s: float | None

    def text(self, *, short: bool = False) -> str:
        """``rank 517 on node-65 not responding for 40 s`` (``short``: ``rank 517 (node-65) not responding 40 s``)."""
        who = f"rank {self.ranks[0]}" if len(self.ranks) == 1 else f"ranks {rank_ranges(self.ranks)}"
        if self.host is not None:
            who += f" ({self.host})" if short else f" on {self.host}"
        since = "" if self.for_s is None else (" " if short else " for ") + format_duration(self.for_s)
        return f"{who} {self.state}{since}"


@dataclass(frozen=True)
class RankSummary:
    """Every rank of a run, counted: ``states`` (state -> ranks in it, most first) of the ranks that respond,
    ``outliers`` the ones that do not (longest silent first), ``machines`` the hosts the heartbeats name."""

    total: int
    machines: int
    states: tuple[tuple[str, int], ...]
    outliers: tuple[Outliers, ...]
    ended: str | None = None  # how every responding rank ended when they all ended alike (completed, ...)

    @property
    def wrong(self) -> int:
        return sum(len(group.ranks) for group in self.outliers)

    def line(self) -> str:
        """``1,024 ranks on 128 machines: 1,023 in step 5000; rank 517 on node-65 not responding for 40 s``."""
        if not self.total:
            return "no ranks"
        on = f" on {self.machines:,} machine{_s(self.machines)}" if self.machines else ""
        counted = ", ".join(f"{count:,} {state}" for state, count in _shown_states(self.states))
        return f"{self.total:,} rank{_s(self.total)}{on}: " + "; ".join(filter(None, [counted, self._named()]))

    def cell(self) -> str:
        """The ranks cell of ``msmon runs``: ``2 ranks ok``, ``1,024 ranks: 1,023 ok; rank 517 (node-65) not
        responding 40 s``."""
        if not self.total:
            return "-"
        plural = f"{self.total:,} rank{_s(self.total)}"
        if not self.outliers:
            return f"{plural} {self.ended or 'ok'}"
        if self.total == 1:
            return self._named(short=True)
        ok = f"{self.total - self.wrong:,} ok" if self.total > self.wrong else ""
        return f"{plural}: " + "; ".join(filter(None, [ok, self._named(short=True)]))

    def _named(self, *, short: bool = False) -> str:
        shown = self.outliers[:MAX_OUTLIER_GROUPS]
        rest = sum(len(group.ranks) for group in self.outliers[MAX_OUTLIER_GROUPS:])
        more = [f"{rest:,} more rank{_s(rest)} not ok"] if rest else []
        return "; ".join([*(group.text(short=short) for group in shown), *more])

    def to_json(self) -> dict[str, object]:
        return {"line": self.line(), "ranks": self.total, "machines": self.machines, "states": dict(self.states),
                "outliers": [{"ranks": list(g.ranks), "state": g.state, "host": g.host, "for_s": g.for_s}
                             for g in self.outliers]}


def _s(count: int) -> str:
    return "" if count == 1 else "s"


def _shown_states(states: tuple[tuple[str, int], ...]) -> list[tuple[str, int]]:
    if len(states) <= MAX_STATES:
        return list(states)
    rest = sum(count for _, count in states[MAX_STATES - 1:])
    return [*states[:MAX_STATES - 1], ("in other states", rest)]


def summarize(states: list[RankState]) -> RankSummary:
    """The states counted; the ranks that do not respond grouped by state and machine, longest silent first."""
    counts = Counter(state.state for state in states if state.responsive)
    groups: dict[tuple[str, str | None], list[RankState]] = {}
    for state in states:
        if not state.responsive:
            groups.setdefault((state.state, state.host), []).append(state)
    outliers = [Outliers(tuple(s.rank for s in group), kind, host,
                         max((s.alive_age_s for s in group if s.alive_age_s is not None), default=None))
                for (kind, host), group in groups.items()]
    outliers.sort(key=lambda group: (-(group.for_s or 0.0), group.ranks[0]))
    hosts = {state.host for state in states if state.host}
    endings = {state.state if state.beat.get("state") not in LIVE else None for state in states if state.responsive}
    ended = endings.pop() if len(endings) == 1 else None
    return RankSummary(len(states), len(hosts), tuple(counts.most_common()), tuple(outliers), ended)


def parse_ranks(text: str) -> frozenset[int]:
    """``--rank``: ranks and ranges, ``3,517,0-7``; MsmonError on anything else."""
    hint = "pass ranks and ranges such as 3,517,0-7; --ranks lists every rank"
    chosen: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        low, dash, high = part.partition("-")
        if not low.isdigit() or dash and (not high.isdigit() or int(high) < int(low)):
            raise MsmonError(f"--rank {text}: {part!r} is not a rank or a range", hint)
        chosen.update(range(int(low), int(high or low) + 1))
    if not chosen:
        raise MsmonError(f"--rank {text}: no rank named", hint)
    return frozenset(chosen)


def shown_rows(states: list[RankState], *, every: bool = False, chosen: frozenset[int] | None = None,
               culprits: list[int] | tuple[int, ...] = ()) -> tuple[list[RankState], int]:
    """The ranks ``msmon status`` lists and how many wrong ones it leaves out: ``every`` rank, the ``chosen`` ones,
    every rank of a small run, else the ranks that do not respond or hold a stalled run up (``culprits``), at most
    MAX_WRONG_ROWS of them."""
    if every or len(states) <= FEW_RANKS and chosen is None:
        return states, 0
    if chosen is not None:
        return [s for s in states if s.rank in chosen], 0
    held = set(culprits)
    wrong = [s for s in states if not s.responsive or s.rank in held]
    return wrong[:MAX_WRONG_ROWS], max(0, len(wrong) - MAX_WRONG_ROWS)


def ending_lines(run_dir: Path) -> list[str]:
    """The ending of ``msmon run`` of several ranks: ``  ranks: 1,024 ranks on 128 machines: 1,023 completed; rank
    517 on node-64 not responding for 40s`` (nothing for one rank)."""
    counted = summarize(report(run_dir).states)
    return [f"  ranks: {counted.line()}"] if counted.total > 1 else []
