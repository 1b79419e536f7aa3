"""DAPO's dynamic sampling on the testbed, against plain GRPO and Goldilocks: generation rounds and wall time per
step, rollouts generated, and the share of zero-variance groups each leaves in the batch trained.

    python research/dynamic_sampling.py [seeds] [overrides]     # e.g. 0,1 algorithm.max_steps=40

Each arm runs ``python -m socratic_exp algorithm=grpo`` for the same number of optimizer steps, in its own process,
one after another (the wall times compare only on an otherwise idle machine). Results go to
``research/results/dynamic_sampling.json`` with the machine that measured them.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tqdm import tqdm

from socratic_exp.core.run_folder import machine, read_metrics, read_summary
from socratic_exp.study.tables import format_mean_std, markdown_table

ARMS = {
    "none": [],
    "dynamic": ["algorithm.dynamic_sampling={max_rounds:10}"],
    "goldilocks": ["sampler=goldilocks"],
    "goldilocks+dynamic": ["sampler=goldilocks", "algorithm.dynamic_sampling={max_rounds:10}"],
}
COMMON = ["algorithm=grpo", "logger=none", "algorithm.max_steps=40", "algorithm.logging_steps=1",
          "algorithm.save_steps=100000", "algorithm.log_completions=false", "eval.every_steps=0"]  # fmt: skip
OUT = Path(__file__).parent / "results" / "dynamic_sampling.json"


def mean_of(records: list[dict], name: str) -> float | None:
    values = [r[name] for r in records if isinstance(r.get(name), int | float)]
    return statistics.fmean(values) if values else None


def measure(arm: list[str], seed: int, overrides: list[str], outputs: Path) -> dict[str, float]:
    env = {**os.environ, "SOCRATIC_EXP_OUTPUTS": str(outputs), "WANDB_MODE": "disabled"}
    command = [sys.executable, "-m", "socratic_exp", *COMMON, *arm, f"seed={seed}", *overrides]
    subprocess.run(command, check=True, env=env, capture_output=True, text=True)
    (run_dir,) = [p.parent for p in outputs.rglob("summary.json")]
    summary, records = read_summary(run_dir), read_metrics(run_dir)
    steps = summary["steps"]
    train = [r for r in records if "loss" in r]
    rollouts = max(r["sampler/rollouts"] for r in records if "sampler/rollouts" in r)
    return {
        "steps": steps,
        "seconds_per_step": summary["final"]["eval/train_seconds"] / steps,
        "rounds_per_step": mean_of(train, "dynamic_sampling/rounds") or 1.0,
        "rollouts_per_step": rollouts / steps,
        "zero_variance_share_generated": mean_of(records, "sampler/zero_variance_share"),  # sampler records
        "zero_variance_share_trained": mean_of(train, "frac_reward_zero_std"),
        "final_greedy_acc": summary["final"]["eval/greedy_acc"],
        "initial_greedy_acc": summary["initial"]["eval/greedy_acc"],
    }


def main(argv: list[str]) -> None:
    seeds = [int(s) for s in (argv[0] if argv and "=" not in argv[0] else "0,1").split(",")]
    overrides = [a for a in argv if "=" in a]
    results: dict[str, list[dict[str, float]]] = {name: [] for name in ARMS}
    with tqdm(total=len(ARMS) * len(seeds), desc="runs", unit="run") as bar:
        for seed in seeds:
            for name, arm in ARMS.items():
                with tempfile.TemporaryDirectory() as outputs:
                    results[name].append(measure(arm, seed, overrides, Path(outputs)))
                bar.update()
    base = statistics.fmean(r["seconds_per_step"] for r in results["none"])
    rows = []
    for name, runs in results.items():

        def cell(key: str, digits: int = 2, runs: list[dict[str, float]] = runs) -> str:
            return format_mean_std([r[key] for r in runs if r[key] is not None], digits=digits)

        ratio = statistics.fmean(r["seconds_per_step"] for r in runs) / base
        rows.append([name, cell("rounds_per_step"), cell("rollouts_per_step", 0), cell("seconds_per_step"),
                     f"{ratio:.2f}", cell("zero_variance_share_generated"), cell("zero_variance_share_trained"),
                     cell("final_greedy_acc", 3)])  # fmt: skip
    table = markdown_table(
        ["arm", "rounds / step", "rollouts / step", "s / step", "time ratio", "zero-var. generated",
         "zero-var. trained", "greedy acc. after"], rows,
    )  # fmt: skip
    print(table)
    OUT.write_text(json.dumps({"machine": machine(), "seeds": seeds, "common": COMMON + overrides,
                               "arms": ARMS, "runs": results, "table": table}, indent=2) + "\n")  # fmt: skip
    print(f"written: {OUT}")


if __name__ == "__main__":
    main(sys.argv[1:])
