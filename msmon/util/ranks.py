"""Ranks written for people: runs of consecutive ranks as ranges, a long list cut to its first runs and a count."""

from __future__ import annotations

MAX_LISTED = 8  # ranks (or ranges of ranks) named in one line; the rest are counted


def rank_runs(ranks: list[int] | tuple[int, ...]) -> list[tuple[int, int]]:
    """The ranks as (first, last) runs of consecutive ranks, in order."""
    runs: list[tuple[int, int]] = []
    for rank in sorted(set(ranks)):
        if runs and rank == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], rank)
        else:
            runs.append((rank, rank))
    return runs


def _run_text(first: int, last: int) -> str:
    """``5``, ``5, 6``, ``5-9``: three consecutive ranks and more as a range."""
    return str(first) if first == last else f"{first}, {last}" if last == first + 1 else f"{first}-{last}"


def rank_ranges(ranks: list[int] | tuple[int, ...]) -> str:
    """``0-7, 9, 12, 13`` for ranks 0 to 7, 9, 12 and 13."""
    return ", ".join(_run_text(first, last) for first, last in rank_runs(ranks))


def ranks_text(ranks: list[int]) -> str:
    """``rank 1``, ``ranks 1, 3``, ``ranks 0-1023``, ``ranks 0, 2, 4, ... and 992 more``."""
    runs = rank_runs(ranks)
    shown = ", ".join(_run_text(first, last) for first, last in runs[:MAX_LISTED])
    rest = sum(last - first + 1 for first, last in runs[MAX_LISTED:])
    more = f" and {rest} more" if rest else ""
    return f"rank {shown}" if len(ranks) == 1 else f"ranks {shown}{more}"
