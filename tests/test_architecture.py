"""The architecture holds: imports point down the layers, the core never imports Typer or Rich, modules stay small.

The layers (docs/architecture.md): the foundation (``msmon``, errors, findings, layout, compat, util), then config,
then engine / health / validate (siblings that do not import each other), then ops and view, then runner, then cli.
Every import counts, also the ones inside functions.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "msmon"
FOUNDATION = {"msmon", "errors", "findings", "layout", "compat", "util"}
ALLOWED: dict[str, set[str]] = {
    **dict.fromkeys(FOUNDATION, FOUNDATION),
    "config": FOUNDATION | {"config"},
    "engine": FOUNDATION | {"config", "engine"},
    "health": FOUNDATION | {"config", "health"},
    "validate": FOUNDATION | {"config", "validate"},
    "ops": FOUNDATION | {"config", "validate", "ops"},
    "view": FOUNDATION | {"config", "view"},
    "runner": FOUNDATION | {"config", "engine", "health", "validate", "ops", "view", "runner"},
    "cli": FOUNDATION | {"config", "engine", "health", "validate", "ops", "view", "runner", "cli"},
    "__main__": {"cli"},
}
UI_LIBRARIES = ("typer", "rich", "click")
UI_ALLOWED = {"cli", "view.live"}  # Rich draws the live panel; everything else is the library core
MAX_LINES = 300


def modules() -> list[tuple[str, Path]]:
    """(dotted name below msmon, path) of every module."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found.append((".".join(parts) or "msmon", path))
    return found


def layer(dotted: str) -> str:
    """The layer of ``msmon.<dotted>`` (its top-level package or module)."""
    return dotted.split(".")[0] if dotted else "msmon"


def imports(path: Path) -> list[str]:
    """Every module name imported anywhere in the file (also inside functions)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "msmon":
                names.extend(f"msmon.{alias.name}" for alias in node.names)
            else:
                names.append(node.module)
    return names


def test_the_layer_table_knows_every_top_level_module() -> None:
    assert {layer(name) for name, _ in modules()} <= set(ALLOWED)


@pytest.mark.parametrize(("name", "path"), modules(), ids=[name for name, _ in modules()])
def test_imports_point_down_the_layers(name: str, path: Path) -> None:
    own = layer(name)
    upward = []
    for target in imports(path):
        if target == "msmon" or not target.startswith("msmon."):
            continue
        below = target.removeprefix("msmon.")
        target_layer = "__version__" if below == "__version__" else layer(below)
        if target_layer != "__version__" and target_layer not in ALLOWED[own]:
            upward.append(target)
    assert upward == [], f"{name} ({own}) imports {upward}; allowed layers: {sorted(ALLOWED[own])}"


@pytest.mark.parametrize(("name", "path"), modules(), ids=[name for name, _ in modules()])
def test_the_core_never_imports_the_terminal_libraries(name: str, path: Path) -> None:
    if layer(name) == "cli" or name in UI_ALLOWED:
        return
    used = [t for t in imports(path) if t.split(".")[0] in UI_LIBRARIES]
    assert used == [], f"{name} imports {used}: only msmon.cli (and the live panel) may"


def test_no_module_over_300_lines_without_a_reason() -> None:
    """A module over the limit must say in its docstring why it is one piece (``Kept whole because ...``)."""
    long = []
    for name, path in modules():
        text = path.read_text(encoding="utf-8")
        doc = ast.get_docstring(ast.parse(text)) or ""
        if len(text.splitlines()) > MAX_LINES and "Kept whole because" not in doc:
            long.append(f"{name}: {len(text.splitlines())} lines")
    assert long == []
