"""``algorithm=socratic_rl``: what its loop costs, and how its arms compare with GRPO.

    python benchmarks/socratic_rl.py report <run folders or sweep folders>... [--plot out.png]

For every finished run under the given folders: the held-out greedy accuracy (no viewpoints) before and after,
grouped by arm (algorithm, distiller, teacher, meta-learning; seeds pooled: mean +- std, n); for Socratic-RL arms
also the time of reflection, utility probes, teacher meta-updates and distillations as shares of the run's wall
time, and each distillation's probe accuracy before / after (forgetting). Plot: final accuracy per arm with error
bars, and the learning curves.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

PARTS = ("reflect", "probe", "meta", "distill")


def runs(folders: list[Path]) -> list[dict[str, Any]]:
    found = []
    for folder in folders:
        for summary_file in sorted(folder.glob("**/summary.json")):
            summary = json.loads(summary_file.read_text())
            if summary.get("status") != "completed":
                continue
            metrics = [json.loads(line) for line in (summary_file.parent / "metrics.jsonl").read_text().splitlines()]
            config = summary["config"]
            choices = summary["choices"]
            arm = choices["algorithm"]
            if arm == "socratic_rl":
                meta = "meta" if config["algorithm"]["meta_learning"] else "no-meta"
                arm = f"socratic_rl {choices['distiller']} {choices['teacher']} {meta}"
            arm += f" ({summary['steps']} steps)"
            seconds = {}
            for part in PARTS:
                values = [m[f"socratic_rl/seconds/{part}"] for m in metrics if f"socratic_rl/seconds/{part}" in m]
                seconds[part] = values[-1] if values else 0.0
            found.append(
                {
                    "arm": arm,
                    "initial": summary["initial"]["eval/greedy_acc"],
                    "final": summary["final"]["eval/greedy_acc"],
                    "wall": summary["wall_time_s"],
                    "seconds": seconds,
                    "curve": [(m["step"], m["eval/greedy_acc"]) for m in metrics if "eval/greedy_acc" in m],
                    "distills": [m for m in metrics if "distill/probe_acc_after" in m],
                }
            )
    return found


def _stats(values: list[float]) -> str:
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.3f} +- {std:.3f} (n={len(values)})"


def report(folders: list[Path], plot: Path | None) -> None:
    by_arm: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for run in runs(folders):
        by_arm[run["arm"]].append(run)
    print("| arm | greedy acc before | after (no viewpoints) | wall s | reflect | probes | meta | distill |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for arm, group in sorted(by_arm.items()):
        wall = statistics.mean(r["wall"] for r in group)
        shares = [f"{statistics.mean(r['seconds'][p] / r['wall'] for r in group):.1%}" for p in PARTS]
        initial, final = _stats([r["initial"] for r in group]), _stats([r["final"] for r in group])
        print(f"| {arm} | {initial} | {final} | {wall:.0f} | " + " | ".join(shares) + " |")
    print("\nDistillations (probe split, no viewpoints): before -> after, with V before, forgotten share")
    for arm, group in sorted(by_arm.items()):
        rows = [d for r in group for d in r["distills"]]
        if rows:
            mean = {k: statistics.mean(d[k] for d in rows) for k in rows[0] if k.startswith("distill/")}
            print(
                f"  {arm}: {mean['distill/probe_acc_before']:.3f} -> {mean['distill/probe_acc_after']:.3f}, "
                f"with V {mean['distill/probe_acc_with_v_before']:.3f}, forgotten {mean['distill/forgotten_share']:.3f}"
                f" ({len(rows)} distillations)"
            )
    if plot is not None:
        _plot(by_arm, plot)
        print(f"\nplot: {plot}")


def _plot(by_arm: dict[str, list[dict[str, Any]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = sorted(by_arm)
    fig, (bars, curves) = plt.subplots(1, 2, figsize=(13, 4.5))
    means = [statistics.mean(r["final"] for r in by_arm[a]) for a in arms]
    stds = [statistics.stdev([r["final"] for r in by_arm[a]]) if len(by_arm[a]) > 1 else 0.0 for a in arms]
    bars.barh(range(len(arms)), means, xerr=stds, color="tab:blue", alpha=0.7)
    bars.set_yticks(range(len(arms)), arms, fontsize=8)
    start = statistics.mean(r["initial"] for group in by_arm.values() for r in group)
    bars.axvline(start, color="grey", linestyle="--", label="before training")
    bars.set_xlim(min(means) - 0.08, max(means) + 0.05)
    bars.set_xlabel("held-out greedy accuracy after training (no viewpoints)")
    bars.legend(fontsize=8)
    for arm in arms:
        steps = sorted({s for r in by_arm[arm] for s, _ in r["curve"]})
        values = [statistics.mean(a for r in by_arm[arm] for s2, a in r["curve"] if s2 == s) for s in steps]
        curves.plot(steps, values, marker="o", label=arm)
    curves.set_xlabel("step")
    curves.set_ylabel("held-out greedy accuracy")
    curves.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["report"])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args()
    report(args.folders, args.plot)
