"""The architecture holds: imports point down the layers, the core never imports Typer or Rich, modules stay small.

The layers (docs/architecture.md): the foundation (``msmon``, anomaly, errors, findings, foreign, launch_layout,
layout, listener, records, run_record, status, step_cost, compat, util), then config, then reference (the reference
curves), then engine / health / validate (siblings that do not import each other), then ops and view, then runner,
then cli.
Every import counts, also the ones inside functions.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "msmon"
FOUNDATION = {"msmon", "anomaly", "errors", "findings", "foreign", "launch_layout", "layout", "listener", "probe",
              "records", "run_record", "status", "step_cost", "compat", "util"}
ALLOWED: dict[str, set[str]] = {
    **dict.fromkeys(FOUNDATION, FOUNDATION),
    "config": FOUNDATION | {"config"},
    "reference": FOUNDATION | {"config", "reference"},
    "engine": FOUNDATION | {"config", "engine"},
    "health": FOUNDATION | {"config", "reference", "health"},
    "validate": FOUNDATION | {"config", "reference", "validate"},
    "ops": FOUNDATION | {"config", "reference", "validate", "ops"},
    "view": FOUNDATION | {"config", "reference", "view"},
    "runner": FOUNDATION | {"config", "reference", "engine", "health", "validate", "ops", "view", "runner"},
    "cli": FOUNDATION | {"config", "reference", "engine", "health", "validate", "ops", "view", "runner", "cli"},
    "__main__": {"cli"},
}
UI_LIBRARIES = ("typer", "rich", "click")
UI_ALLOWED = {"cli", "view.live"}  # Rich draws the live panel; everything else is the library core
MAX_LINES = 500
#: The modules on either side of the rank boundary (the parent's and the rank's).
BOUNDARY_MODULES = {"runner.worker", "runner.training_process", "runner.supervise", "runner.attempts",
                    "runner.injected"}


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


def test_no_module_over_500_lines_without_a_reason() -> None:
    """A module over the limit must say in its docstring why it is one piece (``Kept whole because ...``)."""
    long = []
    for name, path in modules():
        text = path.read_text(encoding="utf-8")
        doc = ast.get_docstring(ast.parse(text)) or ""
        if len(text.splitlines()) > MAX_LINES and "Kept whole because" not in doc:
            long.append(f"{name}: {len(text.splitlines())} lines")
    assert long == []


def _parsed() -> list[tuple[str, ast.AST]]:
    return [(name, ast.parse(path.read_text(encoding="utf-8"))) for name, path in modules()]


def test_status_strings_only_through_the_enum() -> None:
    """A run status is written ``RunStatus.X`` everywhere but in msmon.status, never as a bare string."""
    from msmon.status import RunStatus

    values = {status.value for status in RunStatus}
    bare = [f"{name}:{node.lineno} {node.value!r}" for name, tree in _parsed() if name != "status"
            for node in ast.walk(tree) if isinstance(node, ast.Constant) and node.value in values]
    assert bare == []


def test_the_rank_boundary_is_typed() -> None:
    """The spec a rank receives and the result it leaves are frozen dataclasses; the worker reads no dict spec
    (no ``spec.get`` or ``spec[...]``) and the result is written from a RankResult only."""
    import dataclasses
    import typing

    from msmon.runner import protocol

    for cls in (protocol.RankSpec, protocol.RankResult, protocol.ViewOptions, protocol.BackendAccounting):
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, cls  # type: ignore[attr-defined]
    assert typing.get_type_hints(protocol.write_result)["result"] is protocol.RankResult
    untyped = []
    for name, tree in _parsed():
        if name not in BOUNDARY_MODULES:
            continue
        for node in ast.walk(tree):
            target = node.value if isinstance(node, ast.Subscript) else (
                node.func.value if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get" else None)
            spelled = ast.unparse(target) if target is not None else ""
            if spelled.split(".")[-1] in ("spec", "base_spec"):
                untyped.append(f"{name}:{node.lineno} {ast.unparse(node)}")
    assert untyped == []


def _silent(statement: ast.stmt, caught_as: str | None) -> bool:
    """``pass``, ``continue``, ``break``, a docstring, or an assignment or return that does not use the exception."""
    if isinstance(statement, ast.Pass | ast.Continue | ast.Break):
        return True
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
        return True
    if isinstance(statement, ast.Assign | ast.AnnAssign | ast.AugAssign | ast.Return):
        value = statement.value
        return value is None or caught_as not in {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
    return False


def _debug(statement: ast.stmt) -> bool:
    """A ``logger.debug(...)`` line: not shown at the default level."""
    return (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)
            and isinstance(statement.value.func, ast.Attribute) and statement.value.func.attr == "debug")


def test_no_broad_except_is_silent() -> None:
    """msmon's own breakage is never silent: an ``except Exception`` handler does more than debug lines, a
    ``pass``, a ``continue`` or an assignment (msmon.util.internal_errors.report logs it at warning, with its
    traceback, and counts it; a handler that keeps the exception to raise or return it later is not silent), and no
    ``contextlib.suppress(Exception)`` swallows it."""
    hidden = []
    for name, tree in _parsed():
        for node in ast.walk(tree):
            if not isinstance(node, ast.ExceptHandler):
                continue
            types = [] if node.type is None else node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
            caught = {ast.unparse(t) for t in types} if types else {"BaseException"}
            if not caught & {"Exception", "BaseException"}:
                continue
            if all(_silent(stmt, node.name) or _debug(stmt) for stmt in node.body):
                hidden.append(f"{name}:{node.lineno}")
        hidden.extend(f"{name}:{node.lineno} suppress" for node in ast.walk(tree) if isinstance(node, ast.Call)
                      and ast.unparse(node.func).split(".")[-1] == "suppress"
                      and {ast.unparse(arg) for arg in node.args} & {"Exception", "BaseException"})
    assert hidden == []


def test_the_silent_handler_rule_sees_each_shape() -> None:
    """The rule above flags each silent shape and lets a report or a kept exception through."""
    def flagged(body: str) -> bool:
        handler = ast.parse(f"try:\n    f()\nexcept Exception as exc:\n{body}").body[0].handlers[0]
        return all(_silent(stmt, handler.name) or _debug(stmt) for stmt in handler.body)

    assert flagged("    pass\n") and flagged("    continue\n") and flagged("    self.ok = False\n    return\n")
    assert flagged("    logger.debug('x', exc)\n") and flagged("    logger.debug('x', exc)\n    return None\n")
    assert not flagged("    report('x', exc)\n") and not flagged("    failure = exc\n")


#: Where ``Any`` is named: what the foreign libraries hand msmon (msmon.foreign) and decoded JSON (util.jsonfiles).
ANY_HOMES = {"foreign", "util.jsonfiles"}


def test_any_only_under_a_name() -> None:
    """``Any`` is imported only by the modules that name the values msmon does not type itself: msmon.foreign (what
    MindSpore, mindformers, OmegaConf, protobuf and the backend libraries hand msmon: they ship no types and are
    imported only inside functions) and msmon.util.jsonfiles (decoded JSON, outside input). Every other module uses
    those names or a real type, so an untyped value says what it is; an internal interface is never ``Any``."""
    imported = [f"{name}:{node.lineno}" for name, tree in _parsed() if name not in ANY_HOMES
                for node in ast.walk(tree)
                if (isinstance(node, ast.ImportFrom) and node.module in ("typing", "typing_extensions")
                    and any(alias.name == "Any" for alias in node.names))
                or (isinstance(node, ast.Attribute) and node.attr == "Any")]
    assert imported == []


def test_each_untyped_name_says_what_it_is() -> None:
    """In the homes of ``Any``, it appears only as a module-level alias (``CallbackParams = Any``) under a ``#:``
    comment saying what the value is."""
    unnamed = []
    for name, path in modules():
        if name not in ANY_HOMES:
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        tree = ast.parse("\n".join(lines))
        aliases = {id(statement.value): statement for statement in tree.body if isinstance(statement, ast.Assign)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id == "Any":
                alias = aliases.get(id(node))
                if alias is None or not lines[alias.lineno - 2].startswith("#:"):
                    unnamed.append(f"{name}:{node.lineno}")
    assert unnamed == []


def test_every_check_takes_the_check_context_alone() -> None:
    """The validator's checks share one signature: ``check(ctx: CheckContext) -> list[Finding]``."""
    import inspect
    import typing

    from msmon.validate.context import CheckContext
    from msmon.validate.validator import CHECKS

    odd = [check.__name__ for check in CHECKS
           if list(typing.get_type_hints(check)) != ["ctx", "return"]
           or typing.get_type_hints(check)["ctx"] is not CheckContext
           or len(inspect.signature(check).parameters) != 1]
    assert odd == []


def test_one_name_for_the_json_option() -> None:
    """Every command's ``--json`` is the parameter ``as_json``."""
    names = set()
    for name, tree in _parsed():
        if not name.startswith("cli"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                for arg, default in zip(node.args.args[-len(node.args.defaults):] if node.args.defaults else [],
                                        node.args.defaults, strict=True):
                    if isinstance(default, ast.Call) and any(
                            isinstance(a, ast.Constant) and a.value == "--json" for a in default.args):
                        names.add(arg.arg)
    assert names == {"as_json"}


#: Modules that read run.json as a plain object: the report shows every key as written (view.series).
RUN_JSON_AS_DICT = {"view.series"}


def test_run_json_is_read_and_written_through_its_one_owner() -> None:
    """run.json's format lives in msmon.run_record (RunRecord, AttemptEntry, frozen); no other module parses or
    writes the file itself."""
    from msmon.run_record import AttemptEntry, RunRecord

    for cls in (RunRecord, AttemptEntry):
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, cls  # type: ignore[attr-defined]
    raw = [f"{name}:{node.lineno}" for name, tree in _parsed() if name not in {"run_record", *RUN_JSON_AS_DICT}
           for node in ast.walk(tree) if isinstance(node, ast.Call) and "RUN_JSON" in ast.unparse(node)
           and any(word in ast.unparse(node.func) for word in ("read_json", "write_json", "json.load"))]
    assert raw == []
