"""The default command end to end, with the warm-start cache cold and then warm: wall time and held-out
accuracy before / after training. Uses a fresh cache folder so the cold run really builds the warm-start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(env: dict[str, str], cwd: str) -> tuple[float, dict]:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "socratic_exp", *sys.argv[1:]],
        check=True,
        env=env,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    elapsed = time.perf_counter() - started
    newest = max(Path(cwd, "outputs").glob("*/*/summary.json"), key=lambda p: p.stat().st_mtime)
    return elapsed, json.loads(newest.read_text())


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "SOCRATIC_EXP_CACHE": str(Path(tmp) / "cache")}
        for label in ("cold cache", "warm cache"):
            elapsed, summary = run(env, tmp)
            initial, final = summary["initial"], summary["final"]
            print(
                f"{label}: {elapsed:.0f} s wall; greedy acc {initial['eval/greedy_acc']:.3f} -> "
                f"{final['eval/greedy_acc']:.3f}; pass@4 {initial['eval/pass@4']:.3f} -> {final['eval/pass@4']:.3f}"
            )
            for d in range(1, 5):
                key = f"eval/greedy_acc/d{d}"
                print(f"    {key}: {initial.get(key, float('nan')):.3f} -> {final.get(key, float('nan')):.3f}")


if __name__ == "__main__":
    main()
