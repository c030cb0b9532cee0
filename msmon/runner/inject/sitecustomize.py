"""msmon's hook in the processes of ``msmon run CONFIG -- COMMAND`` (this directory is put first on their
PYTHONPATH; nothing of the user's files changes).

Every Python process COMMAND starts runs this at start-up: with msmon's spec in its environment, it arms a hook
that adds msmon's callback when the process builds a mindformers ``Trainer`` and trains (msmon.runner.injected);
a process that builds none (msrun, its scheduler, a data tool) only pays for the check. Then the next
``sitecustomize`` on the path, if any, runs as it would have without msmon.
"""

import os
import sys


def _arm() -> None:
    if not os.environ.get("MSMON_WORKER_SPEC") or os.environ.get("MS_ROLE") == "MS_SCHED":
        return
    import importlib.util

    if importlib.util.find_spec("msmon") is None:  # another interpreter than msmon's: say it, break nothing
        sys.stderr.write(f"msmon: {sys.executable} has no msmon installed: this process is not monitored\n")
        return
    from msmon.runner.injected import install  # msmon's own breakage is not hidden: Python reports it

    install()


def _chain() -> None:
    """Run the ``sitecustomize`` this one shadows (the interpreter's own, a virtualenv's)."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    path = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_arm()
_chain()
