"""``msmon run CONFIG -- COMMAND``: the user's own launch, checked, with CONFIG swapped for ``mindformers.yaml``, its
ranks counted from its msrun flags, and the directory of msmon's ``sitecustomize`` for its PYTHONPATH."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from msmon.errors import MsmonError

#: What goes first on COMMAND's PYTHONPATH: msmon's sitecustomize (msmon.runner.injected), nothing else.
INJECT_DIR = Path(__file__).resolve().parent / "inject"
MSRUN_MODULE = "mindspore.parallel.cluster.run"


@dataclass(frozen=True)
class MsrunRanks:
    """The ranks an msrun line in COMMAND starts."""

    worker_num: int
    local_worker_num: int | None = None
    node_rank: int | None = None


def check_command(argv: list[str]) -> None:
    """COMMAND's program must exist and be executable (exit 1, nothing created)."""
    if not argv:
        raise MsmonError("nothing after `--`: no command to monitor", "e.g. msmon run CONFIG -- python train.py "
                         "--config CONFIG")
    program = argv[0]
    if shutil.which(program) is not None:
        return
    if os.sep in program and os.path.isfile(program):
        raise MsmonError(f"command not executable: {program}", f"chmod +x {program}, or start it with its "
                         f"interpreter (bash {program} ...)")
    raise MsmonError(f"command not found: {program}", "give the program's path, or a name on PATH")


def with_mindformers_yaml(argv: list[str], config: str, replacement: Path) -> list[str]:
    """``argv`` with every argument that names CONFIG (``CONFIG`` or ``--flag=CONFIG``) naming ``replacement``."""
    target = Path(config).resolve()

    def swapped(arg: str) -> str:
        flag, equals, value = arg.rpartition("=") if arg.startswith("-") else ("", "", arg)
        if value and Path(value).resolve() == target:
            return f"{flag}{equals}{replacement}"
        return arg

    return [argv[0], *(swapped(arg) for arg in argv[1:])]


def msrun_ranks(argv: list[str]) -> MsrunRanks | None:
    """The ranks of the msrun line in ``argv`` (``msrun ...`` or ``python -m mindspore.parallel.cluster.run ...``);
    None when COMMAND has none (a script that starts msrun itself: the ranks that report count)."""
    start = next((i + 1 for i, arg in enumerate(argv) if Path(arg).name == "msrun"), None)
    if start is None:
        start = next((i + 1 for i, arg in enumerate(argv[:-1]) if arg == "-m" and argv[i + 1] == MSRUN_MODULE), None)
        start = start + 1 if start is not None else None
    if start is None:
        return None
    values: dict[str, str] = {}
    rest = argv[start:]
    index = 0
    while index < len(rest) and rest[index].startswith("--"):  # then the task script: its flags are not msrun's
        name, equals, value = rest[index][2:].partition("=")
        if not equals:  # --flag VALUE
            index += 1
            value = rest[index] if index < len(rest) else ""
        values[name] = value
        index += 1
    try:
        workers = int(values.get("worker_num", "8"))  # msrun's default
        local = int(values["local_worker_num"]) if "local_worker_num" in values else None
        node = int(values["node_rank"]) if "node_rank" in values else None
    except ValueError as exc:
        raise MsmonError(f"COMMAND's msrun flags: {exc}", "give --worker_num=N as a number") from exc
    return MsrunRanks(workers, local, node)
