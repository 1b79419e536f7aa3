"""Start-up cost: composing (``--cfg job``) and validating (``dry_run=true``) a config, in fresh processes."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

REPEATS = 5


def timed(*args: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "socratic_exp", *args], check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    for label, args in (("--cfg job", ("--cfg", "job")), ("dry_run=true (validate)", ("dry_run=true",))):
        times = [timed(*args) for _ in range(REPEATS)]
        print(f"{label:<26} median {statistics.median(times):.2f} s  (min {min(times):.2f}, max {max(times):.2f})")


if __name__ == "__main__":
    main()
