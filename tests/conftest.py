"""The test session: one environment for every test, the canonical runs (tests/canonical.py), the real `msmon`
command in a child process, and the session's end, which stops what the session started, fails when anything
is still running, and says how many real trainings it started."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import pytest
import shared_session
from hypothesis import HealthCheck, settings
from launch import msmon_env

from msmon.util.procs import cmdline

REPO = Path(__file__).resolve().parents[1]

# Hypothesis judges its own input generation by the clock: on a busy 2-core machine (the suite's own trainings
# beside it, `.ci/under-load`) one draw took 30 s and failed a fuzz test that checks detectors, not generation speed.
settings.register_profile("msmon", suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("msmon")
#: Fixtures that need a real training: a test using one is marked ``training`` (the inner loop deselects it).
TRAINING_FIXTURES = {"canonical"}


# -- the session ----------------------------------------------------------------------------------------------
@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """The controller names the session's shared root (inherited by the xdist workers it starts next)."""
    if hasattr(config, "workerinput"):
        return
    root = config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    os.environ[shared_session.SESSION_ENV] = str(root)
    config.stash[CPU_AT_START] = MachineCpu.now()
    os.environ["MSMON_CACHE_DIR"] = str(root / "cache")  # the generated datasets, made once for the session


#: The modules that train, longest first: what their training tests took on 2026-12-05 (summed over both workers,
#: the canonical runs they were first to ask for included; pytest's --junitxml), started first so that the other
#: worker, which takes work from the end of a worker's queue, ends the session on short ones (a rollback or reference
#: test begun last kept one worker busy for minutes after the other ran out of tests). test_step_costs_real is placed
#: by its two-rank test (47 s), not by its sum: begun last in two fresh sessions, it left a worker 52 s without a test.
LONGEST_FIRST = ("test_rollback_real", "test_run_ranks", "test_reference_real", "test_step_costs_real",
                 "test_lineage_runs", "test_resume", "test_probe_real", "test_run_faults", "test_own_launch",
                 "test_mindformers_yaml", "test_engine_faults", "test_layer_norms_trainer", "test_health_e2e",
                 "test_profile_action_real", "test_wheel", "test_run_lifecycle", "test_quickstart_moe",
                 "test_run_terminal", "test_run_e2e", "test_view_realruns", "test_engine_lineage")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that need a real training are marked ``training`` and run first, the longest modules first."""
    for item in items:
        if TRAINING_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.training)

    def order(item: pytest.Item) -> tuple[int, int]:
        module = item.nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")
        rank = LONGEST_FIRST.index(module) if module in LONGEST_FIRST else len(LONGEST_FIRST)
        return (0 if item.get_closest_marker("training") else 1, rank)

    items.sort(key=order)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The controller (after its workers ended): stop the session's servers, then fail on anything left running
    or on a canonical run a test changed."""
    if hasattr(session.config, "workerinput"):
        return
    from canonical import changed_runs

    root = Path(os.environ[shared_session.SESSION_ENV])
    shared_session.stop_registered_groups(root)
    mine = {os.getpid(), *(p.pid for p in _children())}
    deadline = time.monotonic() + 60  # (only while something is left: the groups were stopped just above)
    left = shared_session.leftovers(root, mine)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = shared_session.leftovers(root, mine)
    problems = []
    if left:
        problems.append("still running at the end of the session (killed now): " + "; ".join(
            f"{p.pid} {' '.join(cmdline(p))[:200]}" for p in left))
        for proc in left:
            try:
                proc.kill()
            except Exception:  # noqa: BLE001, S110 - gone meanwhile
                pass
    problems += [f"a test changed the canonical run {entry}" for entry in changed_runs(root)]
    session.config.stash[PROBLEMS] = problems
    if problems and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


PROBLEMS = pytest.StashKey[list]()


@dataclass(frozen=True)
class MachineCpu:
    """The machine's CPU time so far (every process's, psutil.cpu_times): how busy the session kept the cores."""

    wall: float
    busy: float  # CPU-seconds the cores ran code: user, nice, system, interrupts (guest time is in user already)

    @classmethod
    def now(cls) -> MachineCpu:
        import psutil

        times = psutil.cpu_times()
        busy = sum(getattr(times, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq"))
        return cls(time.monotonic(), busy)

    def since(self, start: MachineCpu) -> str:
        import psutil

        cores = psutil.cpu_count() or 1
        wall, busy = self.wall - start.wall, self.busy - start.busy
        return (f"the {cores} cores were busy {busy / (cores * wall):.0%} of the session's {wall:.0f} s "
                f"({busy:.0f} CPU-seconds: at least {busy / cores:.0f} s of wall time on {cores} cores)")


CPU_AT_START = pytest.StashKey[MachineCpu]()


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:  # noqa: ANN001
    if hasattr(config, "workerinput"):
        return
    root = Path(os.environ[shared_session.SESSION_ENV])
    for problem in config.stash.get(PROBLEMS, []):
        terminalreporter.write_line(f"SESSION FAILED: {problem}", red=True)
    runs = mindformers_trainings(root)
    drivers = shared_session.trainings(root)
    built, waited, built_cpu = shared_session.once_times(root)
    canonical_runs = len(list((root / "once").glob("canonical-*/fingerprint.json")))
    distributed = sum(1 for kind in runs if kind == "msrun")
    terminalreporter.write_line(
        f"msmon tests: {len(runs) + len(drivers)} real trainings started ({len(runs)} with the mindformers Trainer, "
        f"{distributed} of them on several ranks; {len(drivers)} plain MindSpore trainings); canonical runs built: "
        f"{canonical_runs} in {built:.0f} s, waited for: {waited:.0f} s")
    if CPU_AT_START in config.stash:
        terminalreporter.write_line("msmon tests: " + MachineCpu.now().since(config.stash[CPU_AT_START]))
    by_file = trainings_by_file(root)
    if by_file:
        terminalreporter.write_line("msmon tests: trainings by file: " + ", ".join(
            f"{name} {count}" for name, count in by_file.items()))
    idle = workers_idle(root, time.time())
    if idle:
        terminalreporter.write_line("msmon tests: workers without a test: " + ", ".join(
            f"{worker} {between:.0f} s between its tests and {after:.0f} s after its last"
            for worker, (between, after) in idle.items()))
    cpu = cpu_by_file(root, built_cpu)
    if cpu:
        top = list(cpu.items())[:CPU_FILES_SHOWN]
        terminalreporter.write_line(
            f"msmon tests: CPU-seconds of the tests and the processes they waited for: {sum(cpu.values()):.0f}; "
            f"the {len(top)} costliest files: " + ", ".join(f"{name} {seconds:.0f}" for name, seconds in top))


def mindformers_trainings(root: Path) -> list[str]:
    """One entry per training the mindformers Trainer started under ``root`` ("msrun" or "process"): the
    ``Starting Training`` lines of every rank-0 log mindformers wrote (one per attempt of a run), less those a copy
    of a canonical run brought with it."""
    found = []
    copied = shared_session.copied_trainings(Path(os.environ[shared_session.SESSION_ENV]))
    for log in root.rglob("rank_0/info.log"):
        started = max(0, shared_session.started_trainings(log) - copied.get(str(log), 0))
        kind = "msrun" if (log.parent.parent / "rank_1").is_dir() else "process"
        found += [kind] * started
    return found


def _children() -> list:
    import psutil

    try:
        return psutil.Process().children(recursive=False)
    except psutil.Error:
        return []


# -- every test ----------------------------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def isolated_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
                         ) -> Iterator[None]:
    """Every test: msmon's home in its tmp_path, none of the developer's variables that change msmon's behaviour,
    and the process environment as it was afterwards (msmon's code under test may set variables, MLflow's); the
    trainings it started in its tmp_path counted for its file (the session's summary)."""
    saved = dict(os.environ)
    monkeypatch.setenv("MSMON_HOME", str(tmp_path / "msmon_home"))
    for name in ("MSMON_DEBUG", "LOCAL_DEFAULT_PATH", "COLUMNS", "LINES"):
        monkeypatch.delenv(name, raising=False)
    yield
    os.environ.clear()
    os.environ.update(saved)
    started = len(mindformers_trainings(tmp_path))
    if started:
        with (Path(os.environ[shared_session.SESSION_ENV]) / TRAININGS_BY_FILE).open("a") as handle:
            handle.write(json.dumps({"file": request.node.path.name, "trainings": started}) + "\n")


TRAININGS_BY_FILE = "trainings_by_file.jsonl"
CPU_BY_TEST = "cpu_by_test.jsonl"
CPU_FILES_SHOWN = 12


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A test's CPU-seconds (setup to teardown: its process and the children it waited for, less a canonical run
    it built) noted for its file (the session's summary)."""
    started, cpu, built = time.time(), shared_session.cpu_seconds(), shared_session.built_here_cpu_s()
    yield
    spent = shared_session.cpu_seconds() - cpu - (shared_session.built_here_cpu_s() - built)
    with (Path(os.environ[shared_session.SESSION_ENV]) / CPU_BY_TEST).open("a") as handle:
        handle.write(json.dumps({"file": item.path.name, "test": item.nodeid, "cpu_s": round(spent, 2),
                                 "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
                                 "started": round(started, 2), "ended": round(time.time(), 2)}) + "\n")


def cpu_by_file(root: Path, canonical_cpu_s: float) -> dict[str, float]:
    """CPU-seconds by test file, the canonical runs' builds apart, costliest first."""
    spent: dict[str, float] = {"(canonical runs)": canonical_cpu_s} if canonical_cpu_s else {}
    path = root / CPU_BY_TEST
    for line in path.read_text().splitlines() if path.exists() else []:
        entry = json.loads(line)
        spent[entry["file"]] = spent.get(entry["file"], 0.0) + entry["cpu_s"]
    return dict(sorted(spent.items(), key=lambda item: -item[1]))


def workers_idle(root: Path, session_end: float) -> dict[str, tuple[float, float]]:
    """Each worker's seconds without a test: between its tests (from its first test's start), and from the end of
    its last test to ``session_end`` (a worker out of work while the other still runs a long test)."""
    spans: dict[str, list[tuple[float, float]]] = {}
    path = root / CPU_BY_TEST
    for line in path.read_text().splitlines() if path.exists() else []:
        entry = json.loads(line)
        spans.setdefault(entry["worker"], []).append((entry["started"], entry["ended"]))
    idle = {}
    for worker, tests in sorted(spans.items()):
        tests.sort()
        between = sum(max(0.0, start - end) for (_, end), (start, _) in pairwise(tests))
        idle[worker] = (between, max(0.0, session_end - max(end for _, end in tests)))
    return idle


def trainings_by_file(root: Path) -> dict[str, int]:
    """The mindformers trainings each test file started in its tests' own directories; the canonical runs apart."""
    counts: dict[str, int] = {}
    path = root / TRAININGS_BY_FILE
    for line in path.read_text().splitlines() if path.exists() else []:
        entry = json.loads(line)
        counts[entry["file"]] = counts.get(entry["file"], 0) + entry["trainings"]
    canonical_runs = len(mindformers_trainings(root / "canonical"))
    if canonical_runs:
        counts["(canonical runs)"] = canonical_runs
    return dict(sorted(counts.items(), key=lambda item: -item[1]))


@pytest.fixture
def msmon_home(tmp_path: Path) -> Path:
    """msmon's per-user state (the board registry) of this test."""
    return tmp_path / "msmon_home"


@pytest.fixture(scope="session")
def canonical() -> Callable[[str], object]:
    """``canonical(name)``: a run of tests/canonical.py's catalogue, trained once per session."""
    import canonical as catalogue

    return catalogue.get


# -- the msmon command ---------------------------------------------------------------------------------------------
@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str


def run_msmon(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 600
) -> CliResult:
    """Run ``python -m msmon ARGS`` as a real child process (the test's msmon home unless ``env`` names one)."""
    proc = subprocess.Popen([sys.executable, "-m", "msmon", *args], cwd=cwd, env=msmon_env(**(env or {})),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:  # whatever it left in its process group goes with it, pass or fail
        shared_session.stop_group(proc.pid, grace_s=0)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return CliResult(proc.returncode, stdout, stderr)


def tree_snapshot(root: Path) -> dict[str, str]:
    """Relative path -> content hash (or 'dir') of everything under root."""
    snapshot: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_dir() and not path.is_symlink():
            snapshot[rel] = "dir"
        elif path.is_file():
            snapshot[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            snapshot[rel] = "other"
    return snapshot


def require_tool(name: str, install: str) -> str:
    """The path of a program a test drives. Missing: the test is skipped on a developer's machine, but fails in
    CI (``CI=true``, set by .ci/run), where a skipped browser or tmux test would hide a broken check."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed ({install})"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path
