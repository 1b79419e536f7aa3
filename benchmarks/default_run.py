"""The default command end to end, with the cache cold and then warm: wall time and held-out accuracy before /
after training. The cold run uses a fresh cache folder: with the shipped student it builds nothing (pass
``model.use_shipped=false`` to time a warm-start as well); ``--warm-only`` runs once against the usual cache. Extra
arguments are passed on as overrides."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(env: dict[str, str], cwd: str, overrides: list[str]) -> tuple[float, dict]:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "socratic_exp", *overrides],
        check=True,
        env=env,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    elapsed = time.perf_counter() - started
    newest = max(Path(cwd, "outputs").glob("*/*/summary.json"), key=lambda p: p.stat().st_mtime)
    return elapsed, json.loads(newest.read_text())


def report(label: str, elapsed: float, summary: dict) -> None:
    initial, final = summary["initial"], summary["final"]
    print(f"{label}: {elapsed:.0f} s wall, {summary['steps']} {summary['choices']['algorithm']} steps")
    shown = ("eval/greedy_acc", "eval/assisted_acc", "eval/sampled_acc", "eval/pass@")
    for key in sorted(k for k in final if k.startswith(shown)):
        print(f"    {key:<24} {initial.get(key, float('nan')):.3f} -> {final[key]:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--warm-only", action="store_true")
    args, overrides = parser.parse_known_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.warm_only:
            report("warm cache", *run(dict(os.environ), tmp, overrides))
            return
        env = {**os.environ, "SOCRATIC_EXP_CACHE": str(Path(tmp) / "cache")}
        for label in ("cold cache", "warm cache"):
            report(label, *run(env, tmp, overrides))


if __name__ == "__main__":
    main()
