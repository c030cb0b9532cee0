"""Read what the installed mindformers accepts, once per installed version, in a child process of its own
(``python -m msmon.validate.introspect OUT``): the names of transformers' and mindformers' registries, the
constructor of every class mindformers' registry holds, its config template and the top-level keys its Trainer reads.

The child imports transformers and mindformers (about 12 s on a 2-core machine; their banners go to its stderr) so
that the process asking, ``msmon validate`` or ``msmon run``'s parent, never does. It writes one JSON object to OUT:
the payload (msmon.validate.registry_cache reads it into typed values) or ``{"error": "<why mindformers failed to
import>"}``.
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import inspect
import os
import shutil
import sys
import tempfile
from pathlib import Path

from msmon.compat import import_failure
from msmon.compat.job_keys import CONFIG_METHODS, TOP_LEVEL_READERS
from msmon.foreign import ConfigValue, Mindformers
from msmon.util.atomic import atomic_write_json
from msmon.util.jsonfiles import JsonObject
from msmon.util.procs import exit_now

#: What a parameter's default (or, without one, its annotation) says about the values it takes.
NUMBER_ANNOTATIONS = {int, float, "int", "float"}


def parameter_kind(parameter: inspect.Parameter) -> str:
    """``number``, ``bool``, ``text``, ``none``, ``required`` or ``other``: what the parameter's default is (a
    parameter without one annotated ``int`` or ``float`` is a ``number``)."""
    default = parameter.default
    if default is inspect.Parameter.empty:
        return "number" if parameter.annotation in NUMBER_ANNOTATIONS else "required"
    if isinstance(default, bool):
        return "bool"
    if isinstance(default, int | float):
        return "number"
    if default is None:
        return "number" if parameter.annotation in NUMBER_ANNOTATIONS else "none"
    return "text" if isinstance(default, str) else "other"


def constructor(cls: Mindformers) -> dict[str, ConfigValue] | None:
    """``{"params": [[name, kind], ...], "kwargs": takes **kwargs}`` of what ``cls(**args)`` accepts; None when
    Python cannot tell (a builtin type: any argument is then accepted)."""
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):
        return None
    params = [[p.name, parameter_kind(p)] for p in signature.parameters.values()
              if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
    return {"params": params, "kwargs": takes_kwargs}


def value_kind(value: ConfigValue) -> str:
    """A template default's kind, as ``parameter_kind`` names them."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return "none" if value is None else "text" if isinstance(value, str) else "other"


def template() -> dict[str, ConfigValue]:
    """mindformers' config template: every section (its keys and their default's kind, whether an unknown key
    raises), the general keys, and the sections a training applies (with ``do_eval`` the evaluation's too)."""
    from mindformers.tools.register import template as mf_template

    sections = {}
    for name, cls in mf_template.CONFIG_NAME_TO_CLASS.items():
        sections[name] = {"keys": {key: value_kind(getattr(cls, key)) for key in cls.keys()},
                          "strict": bool(getattr(cls, "_raise_error_for_unexpected_key", False)),
                          "list": issubclass(cls, mf_template.ListConfig)}
    templates = mf_template.ConfigTemplate
    return {"sections": sections,
            "train": [*templates.general_configs, *templates.train_configs],
            "eval": list(templates.do_eval_configs)}


def _is_config(node: ast.AST, names: tuple[str, ...]) -> bool:
    return isinstance(node, ast.Name | ast.Attribute) and ast.unparse(node) in names


def _constant(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def read_keys(source: str, names: tuple[str, ...] = ("config", "self.config")) -> set[str]:
    """The top-level keys a module reads (or writes) on the config named ``names``: ``config.KEY``,
    ``config.get("KEY")``, ``config["KEY"]``, ``getattr(config, "KEY", ...)``, ``hasattr(config, "KEY")``."""
    found: set[str | None] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and _is_config(node.value, names):
            found.add(node.attr)
        elif isinstance(node, ast.Subscript) and _is_config(node.value, names):
            found.add(_constant(node.slice))
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "get" and _is_config(func.value, names):
                found.add(_constant(node.args[0]))
            elif (isinstance(func, ast.Name) and func.id in ("getattr", "hasattr") and len(node.args) >= 2
                  and _is_config(node.args[0], names)):
                found.add(_constant(node.args[1]))
    return {key for key in found if key and not key.startswith("_") and key not in CONFIG_METHODS}


def trainer_reads(package: Path) -> list[str]:
    """Every top-level key mindformers' Trainer, context and TrainingArguments read or write (msmon.compat.job_keys)."""
    keys: set[str] = set()
    for relative, names in TOP_LEVEL_READERS.items():
        path = package / relative
        if path.is_file():
            keys |= read_keys(path.read_text(encoding="utf-8"), names)
    return sorted(keys)


def registry_payload() -> JsonObject:
    """The whole payload (imports transformers and mindformers); ``{"error": ...}`` when mindformers fails."""
    names: dict[str, list[str]] = {}
    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

        names["transformers config"] = sorted(CONFIG_MAPPING_NAMES)
    except ImportError:
        pass
    if "LOCAL_DEFAULT_PATH" not in os.environ:  # importing mindformers writes ./output/log otherwise
        scratch = tempfile.mkdtemp(prefix="msmon-mindformers-")
        atexit.register(shutil.rmtree, scratch, True)
        os.environ["LOCAL_DEFAULT_PATH"] = scratch
    try:
        import mindformers
        from mindformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES as MF_NAMES
        from mindformers.tools.register import MindFormerRegister
    except Exception as exc:  # noqa: BLE001 - mindformers' import can raise anything (missing package, version clash)
        return {"error": import_failure("mindformers", exc)}
    names["mindformers config"] = sorted(MF_NAMES)
    names["mindformers registry"] = sorted({n for table in MindFormerRegister.registry.values() for n in table})
    classes = {str(module_type): {name: constructor(cls) for name, cls in table.items()}
               for module_type, table in MindFormerRegister.registry.items()}
    return {"names": names, "classes": classes, "template": template(),
            "reads": trainer_reads(Path(mindformers.__file__).parent)}


def main(argv: list[str]) -> int:
    """Write the payload to ``argv[0]``; exit 0 (also when mindformers failed: the file says why)."""
    out = Path(argv[0])
    with contextlib.redirect_stdout(sys.stderr):  # the libraries print banners: keep the pipe of stdout quiet
        payload = registry_payload()
    atomic_write_json(out, payload, fsync=False)
    return 0


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
