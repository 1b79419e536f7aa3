"""Sweeps and reports: a sweep's wall time with jobs in parallel vs one after another, and the report's time.

    python benchmarks/sweeps.py wall-time [--also-2-threads] [overrides]   # 4 jobs (seed=0..3): n_jobs=2 vs 1
    python benchmarks/sweeps.py report-time [runs] [steps]   # the report on fabricated runs (100, 400 steps)

``wall-time`` runs the same 4-job sweep with ``hydra.launcher.n_jobs=1`` (one job at a time, 1 thread) and
``n_jobs=2`` (two at a time, 1 thread each; ``--also-2-threads``: then one at a time with 2 threads), in fresh output
folders, with the warm-start cached by a first run; it prints each sweep's wall time, the CPU time of its processes
and the load average (other work on the machine shows there). ``report-time`` writes ``runs`` run folders like a
sweep's (10 variants x seeds, a 400-step ``metrics.jsonl`` logged every 5 steps with TRL's usual keys, evaluations
every 50) and times the report.
"""

from __future__ import annotations

import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOB = [
    "debug=quick_warmstart",
    "algorithm=grpo",
    "algorithm.max_steps=60",
    "algorithm.logging_steps=10",
    "eval.every_steps=0",
    "eval.max_samples=100",
    "eval.pass_k=0",
    "logger=none",
    "save_final_model=false",
]


def sweep_seconds(outputs: Path, n_jobs: int, threads: int, overrides: list[str]) -> tuple[float, float]:
    """The sweep's wall time and the CPU time of all its processes (the launcher and every job)."""
    env = {**os.environ, "SOCRATIC_EXP_OUTPUTS": str(outputs), "OMP_NUM_THREADS": str(threads)}
    command = [sys.executable, "-m", "socratic_exp", "-m", *JOB, "seed=0,1,2,3", f"hydra.launcher.n_jobs={n_jobs}"]
    cpu_before = _children_cpu()
    started = time.perf_counter()
    proc = subprocess.run([*command, *overrides], env=env, capture_output=True, text=True, cwd=ROOT)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"sweep failed:\n{proc.stderr[-3000:]}")
    return elapsed, _children_cpu() - cpu_before


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # every finished descendant that was waited for
    return usage.ru_utime + usage.ru_stime


def wall_time(overrides: list[str]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        warm = [sys.executable, "-m", "socratic_exp", *JOB, "algorithm.max_steps=1", "eval.max_samples=8"]
        subprocess.run(warm, env={**os.environ, "SOCRATIC_EXP_OUTPUTS": str(root / "warm")}, capture_output=True,
                       check=True, cwd=ROOT)  # fmt: skip
        walls = {}
        configs = [("n_jobs=1, 1 thread", 1, 1), ("n_jobs=2, 1 thread each", 2, 1)]
        if "--also-2-threads" in overrides:
            overrides = [o for o in overrides if o != "--also-2-threads"]
            configs.append(("n_jobs=1, 2 threads", 1, 2))
        for label, n_jobs, threads in configs:
            wall, cpu = sweep_seconds(root / label.replace(" ", "_").replace(",", ""), n_jobs, threads, overrides)
            walls[label] = wall
            print(f"{label:<26} wall {wall:6.1f} s, CPU {cpu:6.1f} s (load average {os.getloadavg()[0]:.1f})",
                  flush=True)  # fmt: skip
        parallel = walls["n_jobs=2, 1 thread each"]
        print(f"speed-up of n_jobs=2 over n_jobs=1: {walls['n_jobs=1, 1 thread'] / parallel:.2f}x", end="")
        two = walls.get("n_jobs=1, 2 threads")
        print(f", over n_jobs=1 with 2 threads: {two / parallel:.2f}x" if two else "")


def fabricate(root: Path, runs: int, steps: int = 400) -> None:
    """``runs`` run folders of a sweep: 10 variants (``algorithm.rho``) x seeds."""
    rng = random.Random(0)
    train_keys = ["loss", "grad_norm", "reward", "reward_std", "entropy", "completions/mean_length",
                  "frac_reward_zero_std", "clip_ratio/region_mean", "step_time", "learning_rate"]  # fmt: skip
    for job in range(runs):
        rho, seed = 0.1 * (1 + job % 10), job // 10
        folder = root / str(job)
        folder.mkdir(parents=True)
        records = []
        for step in range(0, steps + 1, 5):
            record: dict[str, float] = {"step": step, "time": 1e9 + step}
            if step:
                record |= {key: rng.random() for key in train_keys}
            if step % 50 == 0:
                record |= {"eval/greedy_acc": 0.5 + rho * step / 4000 + rng.gauss(0, 0.01), "eval/no_answer": 0.01}
                record |= {f"eval/greedy_acc/d{d}": rng.random() for d in (1, 2, 3)}
            records.append(record)
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        last = records[-1]
        summary = {
            "status": "completed",
            "overrides": ["+sweep=entropy_quantile", f"algorithm.rho={rho:.1f}", f"seed={seed}"],
            "config": {"objective": "eval/greedy_acc"},
            "initial": {k: v for k, v in records[0].items() if k.startswith("eval/")},
            "final": {k: v for k, v in last.items() if k.startswith("eval/")},
            "objective": last["eval/greedy_acc"],
            "wall_time_s": 300 + rng.random() * 60,
        }
        (folder / "summary.json").write_text(json.dumps(summary))


def report_time(runs: int, steps: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        sweep = Path(folder) / "sweep"
        fabricate(sweep, runs, steps)
        lines = sum(1 for _ in (sweep / "0" / "metrics.jsonl").open())
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "socratic_exp.study.report", str(sweep)], capture_output=True,
                              text=True, cwd=ROOT)  # fmt: skip
        elapsed = time.perf_counter() - started
        if proc.returncode != 0:
            sys.exit(proc.stderr)
        print(proc.stdout.splitlines()[-1])
        print(f"{runs} runs x {lines} metrics lines: python -m socratic_exp.report took {elapsed:.2f} s "
              "(process start and imports included)")  # fmt: skip


if __name__ == "__main__":
    command, arguments = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("", [])
    if command == "wall-time":
        wall_time(arguments)
    elif command == "report-time":
        report_time(int(arguments[0]) if arguments else 100, int(arguments[1]) if len(arguments) > 1 else 400)
    else:
        sys.exit(__doc__.split("\n\n")[1])
