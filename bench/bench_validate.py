"""Wall time of `msmon validate` on a real mindformers config vs `python -c "import mindformers"`.

Both run as fresh child processes, alternated, in one run; prints medians and the ratio
(target: validate at least 10x faster).  Usage: python bench/bench_validate.py [--repeat N]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def real_config() -> Path:
    spec = importlib.util.find_spec("mindformers")
    assert spec and spec.origin, "mindformers is not installed"
    return Path(spec.origin).parents[1] / "configs" / "qwen3" / "pretrain_qwen3_32b_4k.yaml"


def timed(argv: list[str], cwd: str) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, check=False, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    repeat = parser.parse_args().repeat
    config = real_config()
    validate_argv = [sys.executable, "-m", "msmon", "validate", str(config), "--json"]
    import_argv = [sys.executable, "-c", "import mindformers"]
    validate_times: list[float] = []
    import_times: list[float] = []
    with tempfile.TemporaryDirectory() as cwd:
        timed(import_argv, cwd)  # warm the page cache for both, then alternate
        timed(validate_argv, cwd)
        for _ in range(repeat):
            validate_times.append(timed(validate_argv, cwd))
            import_times.append(timed(import_argv, cwd))
    v, i = statistics.median(validate_times), statistics.median(import_times)
    print(f"config: {config}")
    print(f"msmon validate          median {v:.3f} s over {repeat} runs")
    print(f"python -c 'import mindformers'  median {i:.3f} s over {repeat} runs")
    print(f"ratio import/validate: {i / v:.1f}x (target >= 10x)")


if __name__ == "__main__":
    main()
