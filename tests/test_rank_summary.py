"""A run's ranks in one line at any rank count (msmon.ops.rank_summary), and `msmon status` / `msmon runs` of a
1,024-rank run on 128 machines with one frozen rank: the summary names the rank and its machine, the output stays
short (its time is bench/bench_status_ranks.py's)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from conftest import run_msmon
from helpers_rank_set import machine, rank_set

from msmon.errors import MsmonError
from msmon.ops.rank_summary import ending_lines, parse_ranks, shown_rows, summarize
from msmon.ops.ranks import first_heartbeat, rank_states
from msmon.util.ranks import rank_ranges, ranks_text


def beat(step: int, now: float, host: str, *, silent: float = 0.0, state: str = "training") -> dict:
    return {"state": state, "alive": now - 0.5 - silent, "begun": step, "begun_time": now - 2 - silent,
            "ended": step - 1, "ended_time": now - 3 - silent, "host": host, "pid": None}


def test_the_line_counts_states_and_names_the_silent_ranks_by_machine_longest_first() -> None:
    now = time.time()
    beats = {r: beat(100 if r < 60 else 99, now, machine(r)) for r in range(64)}
    beats.update({r: beat(99, now, machine(r), silent=90) for r in range(8, 16)})  # a whole machine, 90 s
    beats[33] = beat(100, now, machine(33), silent=20)
    counted = summarize(rank_states(beats, now, world_size=66))
    assert counted.line() == ("66 ranks on 8 machines: 51 in step 100, 4 in step 99; ranks 8-15 on node-1 not "
                              "responding for 1m30s; rank 33 on node-4 not responding for 20s; ranks 64, 65 no "
                              "heartbeat")
    assert counted.cell() == "66 ranks: 55 ok; ranks 8-15 (node-1) not responding 1m30s; rank 33 (node-4) not " \
                             "responding 20s; ranks 64, 65 no heartbeat"
    assert counted.wrong == 11 and counted.to_json()["outliers"][0] == {
        "ranks": list(range(8, 16)), "state": "not responding", "host": "node-1", "for_s": pytest.approx(90.5, abs=0.1)}
    many = {r: beat(r % 5 + 1, now, "h") for r in range(10)} | {r: beat(1, now, f"m{r}", silent=29.5 + r)
                                                              for r in range(10, 15)}
    line = summarize(rank_states(many, now)).line()  # at most 3 states and 3 groups of silent ranks, the rest counted
    assert line == ("15 ranks on 6 machines: 2 in step 1, 2 in step 2, 6 in other states; rank 14 on m14 not "
                    "responding for 44s; rank 13 on m13 not responding for 43s; rank 12 on m12 not responding for "
                    "42s; 2 more ranks not ok")


def test_ended_ranks_and_the_runs_cell() -> None:
    now = time.time()
    done = {r: beat(10, now, "h", state="completed") for r in range(3)}
    assert summarize(rank_states(done, now)).cell() == "3 ranks completed"
    assert summarize(rank_states({0: beat(4, now, "h")}, now)).cell() == "1 rank ok"
    assert summarize(rank_states({0: beat(4, now, "h", silent=50)}, now)).cell() == "rank 0 (h) not responding 50s"
    assert summarize([]).cell() == "-" and summarize([]).line() == "no ranks"


def test_rank_ranges_and_the_ranks_asked_for() -> None:
    assert rank_ranges([9, 0, 1, 2, 12, 13, 3]) == "0-3, 9, 12, 13" and rank_ranges([5]) == "5"
    assert ranks_text(list(range(1024))) == "ranks 0-1023" and ranks_text([0, 1]) == "ranks 0, 1"
    assert ranks_text(list(range(0, 40, 2))) == "ranks 0, 2, 4, 6, 8, 10, 12, 14 and 12 more"
    assert parse_ranks("3, 517,0-2") == frozenset({0, 1, 2, 3, 517})
    for bad in ("x", "5-2", "1-", ",", "-3"):
        with pytest.raises(MsmonError, match="--rank"):
            parse_ranks(bad)
    now = time.time()
    few = rank_states({r: beat(3, now, "h") for r in range(16)}, now)
    assert shown_rows(few) == (few, 0)  # a small run: every rank
    states = rank_states({r: beat(3, now, "h", silent=40 if r % 2 else 0) for r in range(100)}, now)
    rows, left_out = shown_rows(states)  # a big one: the silent ranks, at most 32
    assert [s.rank for s in rows] == list(range(1, 65, 2)) and left_out == 18
    assert [s.rank for s in shown_rows(states, culprits=[0])[0][:2]] == [0, 1]
    assert len(shown_rows(states, every=True)[0]) == 100
    assert [s.rank for s in shown_rows(states, chosen=frozenset({4, 7}))[0]] == [4, 7]


def test_status_and_runs_of_1024_ranks_on_128_machines_lead_with_the_frozen_rank(tmp_path: Path) -> None:
    """Heartbeats as the ranks write them (RankHeartbeat), rank 517 silent for 40 s: one summary line names it and
    its machine; the table lists it alone; --rank and --json; `msmon runs` names it in its ranks cell."""
    def fresh() -> Path:  # the other ranks' heartbeats as a live rank keeps them: rewritten before each look
        return rank_set(tmp_path / "save", ranks=1024, step=5000, frozen={517: 40.0})

    run_dir = fresh()
    status = run_msmon("status", str(run_dir), env={"NO_COLOR": "1"})
    assert status.code == 0, status.stderr
    lines = status.stdout.strip().splitlines()
    assert lines[1].startswith("1,024 ranks on 128 machines: 1,023 in step 5000; rank 517 on node-64 not "
                               "responding for 4"), status.stdout
    assert len(lines) == 5, status.stdout  # the run, the summary, the table's header, rank 517, the count
    assert lines[3].split()[:2] == ["517", "4999"] and "not responding" in lines[3] and "node-64" in lines[3]
    assert lines[4].startswith("1 of 1,024 ranks listed")
    some = run_msmon("status", str(run_dir), "--rank", "0-2,1000", env={"NO_COLOR": "1"})
    assert [line.split()[0] for line in some.stdout.strip().splitlines()[3:7]] == ["0", "1", "2", "1000"]
    every = run_msmon("status", str(run_dir), "--ranks", env={"NO_COLOR": "1"})
    assert len(every.stdout.strip().splitlines()) == 3 + 1024, every.stdout[-500:]
    bad = run_msmon("status", str(run_dir), "--rank", "seven")
    assert bad.code == 1 and "'seven' is not a rank or a range" in bad.stderr, bad.stderr
    fresh()
    data = json.loads(run_msmon("status", str(run_dir), "--json").stdout)
    assert data["summary"]["machines"] == 128 and data["summary"]["states"] == {"in step 5000": 1023}
    assert data["summary"]["outliers"][0]["ranks"] == [517] and len(data["ranks"]) == 1024
    fresh()
    runs = run_msmon("runs", str(tmp_path / "save"), env={"NO_COLOR": "1"})
    assert "1,024 ranks: 1,023 ok; rank 517 (node-64) not responding 4" in runs.stdout, runs.stdout


def test_the_ending_of_a_run_of_several_ranks_counts_them(tmp_path: Path) -> None:
    """`msmon run`'s ending: one line for the ranks, none for a run of one rank."""
    many = rank_set(tmp_path / "many", ranks=24, step=80, frozen={17: 40.0})
    (line,) = ending_lines(many)
    assert line.startswith("  ranks: 24 ranks on 3 machines: 23 in step 80; rank 17 on node-2 not responding for 4")
    assert ending_lines(rank_set(tmp_path / "one", ranks=1, step=80, frozen={})) == []


def test_a_runs_liveness_is_the_lowest_readable_heartbeat(tmp_path: Path) -> None:
    """`msmon runs` reads one heartbeat per run for its liveness (not all 1,024): a half-written one is passed over."""
    run_dir = rank_set(tmp_path, ranks=3, step=7, frozen={})
    assert (first_heartbeat(run_dir) or {})["rank"] == 0
    (run_dir / "heartbeats" / "rank_0.json").write_text('{"rank": 0, "al')
    assert (first_heartbeat(run_dir) or {})["rank"] == 1
    for rank in (1, 2):
        (run_dir / "heartbeats" / f"rank_{rank}.json").unlink()
    assert first_heartbeat(run_dir) is None


# -- a run over several machines: each machine's heartbeats gathered into one file -------------------------------
def test_a_machine_gathers_its_ranks_heartbeats_into_one_file_that_every_reader_reads(tmp_path: Path) -> None:
    """Ranks 8-15 rewrite their liveness on their machine's disk; its ``MachineBeats`` writes heartbeats/node_1.json
    (once a second at most, at once when asked); read_heartbeats gives every rank from either kind of file, the one
    rewritten last where a rank is in both, skips a half-written machine file; a new attempt clears the machine's
    files, its end removes its local directory and keeps the last states."""
    from msmon import layout
    from msmon.launch_layout import LaunchLayout
    from msmon.ops.ranks import read_heartbeats
    from msmon.runner.machine_beats import MachineBeats
    from msmon.util.atomic import rewrite_json

    run_dir = tmp_path / "p" / "r"
    (run_dir / "heartbeats").mkdir(parents=True)
    local = layout.local_heartbeats(run_dir, 1)
    assert local != layout.local_heartbeats(run_dir, 0) and not local.is_relative_to(run_dir)
    local.mkdir(parents=True)
    now = time.time()
    for rank in range(8, 16):
        rewrite_json(local / f"rank_{rank}.json", beat(100, now, "node-1"))
    for rank in range(8):  # node 0's ranks, as one machine writes them
        rewrite_json(layout.rank_heartbeat(run_dir, rank), beat(100, now, "node-0"))
    rewrite_json(layout.rank_heartbeat(run_dir, 9), beat(90, now, "node-1", silent=60))  # an older attempt's
    gatherer = MachineBeats(run_dir, 1, local)
    gatherer.gather()
    assert sorted(read_heartbeats(run_dir)) == list(range(16))
    assert read_heartbeats(run_dir)[9]["begun"] == 100  # the gathered one is newer
    rewrite_json(local / "rank_8.json", beat(101, now, "node-1"))
    gatherer.gather()  # not due yet: at most once a second
    assert read_heartbeats(run_dir)[8]["begun"] == 100
    gatherer.gather(now=True)
    assert read_heartbeats(run_dir)[8]["begun"] == 101
    (run_dir / "heartbeats" / "node_2.json").write_text('{"node": 2, "ranks": {"16": {"sta')  # half-written
    assert sorted(read_heartbeats(run_dir)) == list(range(16))
    rewrite_json(local / "rank_8.json", beat(101, now, "node-1", state="completed"))
    gatherer.close()
    assert read_heartbeats(run_dir)[8]["state"] == "completed" and not local.exists()
    gatherer.clear()
    assert not (run_dir / "heartbeats" / "node_1.json").exists()
    assert LaunchLayout(worker_num=16, local_worker_num=8, node_rank=1).spans_machines
    assert not LaunchLayout(worker_num=2).spans_machines and not LaunchLayout().spans_machines


def test_the_last_records_are_read_from_the_end_of_the_file(tmp_path: Path) -> None:
    """``tail_rows`` parses from the last line back (a half-written last line skipped, a valid one without its
    newline kept); ``last_records`` looks in the last 64 KiB, then 4 MiB, for a key the last records lack."""
    from msmon.ops.runs import last_records
    from msmon.util.jsonfiles import tail_rows

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "loss": 3.0}\nnot json\n{"step": 2}\n{"step": 3, "lo')
    assert list(tail_rows(path)) == [{"step": 2}, {"step": 1, "loss": 3.0}]
    path.write_text('{"step": 1}\n{"step": 2}')
    assert next(tail_rows(path)) == {"step": 2}
    filler = "".join(json.dumps({"step": s, "grad_norm": 1.0, "pad": "x" * 200}) + "\n" for s in range(2, 1002))
    path.write_text(json.dumps({"step": 1, "loss": 2.5}) + "\n" + filler)
    assert path.stat().st_size > 65536
    found = last_records(path, ("loss", "step"))
    assert found["loss"] == {"step": 1, "loss": 2.5} and found["step"]["step"] == 1001
