"""Wall time of `msmon validate quickstart` vs `python -c "import mindformers"`, and of validate's cold first call.

Warm: msmon's cache of the installed mindformers' registry exists (msmon.validate.registry_cache); validate and the
import run as fresh child processes, alternated, and the medians are compared (target: validate at most 1/10 of the
import). Cold: each call gets an empty cache directory (``MSMON_CACHE_DIR``), so it reads the registry in its child
process first (the one line on stderr says so). Everything runs in a temporary directory; nothing of the user's
cache is touched. Usage: python bench/bench_validate.py [--repeat N] [--cold N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VALIDATE = [sys.executable, "-m", "msmon", "validate", "quickstart", "--json"]
IMPORT = [sys.executable, "-c", "import mindformers"]


def timed(argv: list[str], cwd: str, env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, check=False, capture_output=True, text=True)
    return time.perf_counter() - start, proc


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7, help="warm runs of each command")
    parser.add_argument("--cold", type=int, default=3, help="cold first calls (each with an empty cache)")
    args = parser.parse_args()
    validate_times: list[float] = []
    import_times: list[float] = []
    cold_times: list[float] = []
    with tempfile.TemporaryDirectory(prefix="msmon-bench-") as work:
        cwd = str(Path(work) / "cwd")
        os.mkdir(cwd)
        env = {**os.environ, "MSMON_CACHE_DIR": str(Path(work) / "cache"), "LOCAL_DEFAULT_PATH": str(Path(work) / "mf")}
        cold_s, first = timed(VALIDATE, cwd, env)  # fills the cache (and warms the page cache for both)
        assert first.returncode == 0, first.stderr[-2000:]
        assert "reading the installed mindformers' registry once" in first.stderr, first.stderr[-2000:]
        timed(IMPORT, cwd, env)
        for _ in range(args.repeat):
            seconds, proc = timed(VALIDATE, cwd, env)
            assert proc.returncode == 0 and "registry once" not in proc.stderr, proc.stderr[-2000:]
            validate_times.append(seconds)
            import_times.append(timed(IMPORT, cwd, env)[0])
        for index in range(args.cold):
            cold_env = {**env, "MSMON_CACHE_DIR": str(Path(work) / f"cold{index}")}
            seconds, proc = timed(VALIDATE, cwd, cold_env)
            assert proc.returncode == 0 and "registry once" in proc.stderr, proc.stderr[-2000:]
            cold_times.append(seconds)
    v, i = statistics.median(validate_times), statistics.median(import_times)
    print("config: quickstart (msmon's shipped CPU quickstart)")
    print(f"msmon validate, warm cache      median {v:.3f} s over {args.repeat} runs "
          f"(min {min(validate_times):.3f}, max {max(validate_times):.3f})")
    print(f"python -c 'import mindformers'  median {i:.3f} s over {args.repeat} runs "
          f"(min {min(import_times):.3f}, max {max(import_times):.3f})")
    print(f"validate / import: {v / i:.3f} (1/{i / v:.1f}; target <= 1/10)")
    print(f"msmon validate, cold first call median {statistics.median(cold_times):.1f} s over {args.cold} runs "
          f"(min {min(cold_times):.1f}, max {max(cold_times):.1f}; the very first, page cache cold: {cold_s:.1f} s)")


if __name__ == "__main__":
    main()
