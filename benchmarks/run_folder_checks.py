"""The cost of what a run checks about its folder and its inputs before training: hashing a shipped student's
weights against its manifest (every run of a shipped student) and taking the run folder's lock.

    python benchmarks/run_folder_checks.py
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from socratic_exp.core.run_folder import claim_run_folder, machine, release_run_folder
from socratic_exp.models.tiny.shipped import WEIGHTS, check_weights, shipped_students

REPEATS = 50


def timed_ms(work, repeats: int = REPEATS) -> list[float]:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        times.append((time.perf_counter() - started) * 1000)
    return times


def main() -> None:
    cpu = machine()
    print(f"{cpu['cpu']} ({cpu['cores']} cores); medians (min-max) of {REPEATS} repeats")
    for student in shipped_students():
        size = (student.path / WEIGHTS).stat().st_size / 2**20
        times = timed_ms(lambda student=student: check_weights(student))
        print(f"check_weights {student.name:<28} {size:.1f} MiB  {statistics.median(times):.2f} ms "
              f"({min(times):.2f}-{max(times):.2f})")  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        run_dir = Path(folder) / "run"

        def claim_and_release() -> None:
            claim_run_folder(run_dir)
            release_run_folder(run_dir)

        times = timed_ms(claim_and_release)
        spread = f"{min(times):.3f}-{max(times):.3f}"
        print(f"claim + release the run folder lock  {statistics.median(times):.3f} ms ({spread})")


if __name__ == "__main__":
    main()
