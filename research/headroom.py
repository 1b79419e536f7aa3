"""The headroom premise on GRPO runs (research/results/headroom_selection/PREREGISTRATION.md): per run, held-out
greedy accuracy at steps 0, 60 and 240, and whether the premise holds; per candidate (the learning rate, and the
warm-start's length and the task's operation counts where the runs differ in them), whether it holds on every seed
(the selection seeds, or every seed read where none is a selection seed). In an evidence sweep's folder it reads the
GRPO arm alone.

    python research/headroom.py <sweep folder> [<sweep folder> ...] [--json <file>]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from socratic_exp.study.evidence import ARM_KEY, METRIC, at_step, seed_of
from socratic_exp.study.runs import find_runs

MID, END = 60, 240  # the other arms' budget and GRPO's
MAX_AT_MID = 0.80  # not at its plateau at step 60
MIN_GAIN_AFTER_MID = 0.05  # still learning: step 240 at least this far above step 60
MIN_GAIN_BEFORE_MID = 0.03  # learning has begun: step 60 at least this far above step 0
SELECTION_SEEDS = {100, 101, 102, 103, 104}  # no evaluation uses them


def accuracy(run, step: int) -> float | None:
    found = at_step(run, step)
    return found[METRIC] if found is not None and found["step"] == step else None


def premise(start: float | None, mid: float | None, end: float | None) -> dict[str, bool]:
    """The premise's parts that the evaluations given decide (a run stopped early lacks step 240's)."""
    parts = {}
    if mid is not None:
        parts["mid_at_most_0.80"] = mid <= MAX_AT_MID
    if mid is not None and end is not None:
        parts["end_5_points_above_mid"] = end - mid >= MIN_GAIN_AFTER_MID - 1e-12
    if start is not None and mid is not None:
        parts["mid_3_points_above_start"] = mid - start >= MIN_GAIN_BEFORE_MID - 1e-12
    return parts


def holds(parts: dict[str, bool]) -> bool | None:
    """False once a part fails; True when all three hold; None while undecided."""
    if not all(parts.values()):
        return False
    return True if len(parts) == 3 else None


def every_seed(rows: list[dict]) -> bool:
    """The premise holds on every selection seed, or on every seed read where none is one (an evaluation sweep):
    each seed's run decided, every part holding."""
    seeds = {r["seed"] for r in rows}
    return seeds == (SELECTION_SEEDS if seeds & SELECTION_SEEDS else seeds) and all(r["holds"] is True for r in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", type=Path, nargs="+")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    by_candidate: dict[str, list[dict]] = defaultdict(list)
    for run in find_runs(args.folders):
        if run.overrides.get(ARM_KEY, "grpo") != "grpo":  # the premise is GRPO's; the other arms run 60 steps
            continue
        if run.status != "completed":  # a candidate's runs stop once one seed has failed it: their parts decided so far
            print(f"warning: {run.path}: {run.status}", file=sys.stderr)
        config = run.summary.get("config") or {}
        candidate = (
            ("task.rl_ops", str((config.get("task") or {}).get("rl_ops"))),  # a list: its text, to key by
            ("warmstart_steps", (config.get("model") or {}).get("warmstart_steps")),
            ("lr", (config.get("algorithm") or {}).get("learning_rate")),
        )
        points = [accuracy(run, step) for step in (0, MID, END)]
        row = {
            "seed": seed_of(run),
            "run": str(run.path),
            "status": run.status,
            "accuracy": dict(zip(("0", str(MID), str(END)), points, strict=True)),
            "premise": premise(*points),
        }
        row["holds"] = holds(row["premise"])
        by_candidate[candidate].append(row)
    # a candidate is named by its learning rate and whatever else differs between the candidates read together
    differing = {
        key for index, (key, _) in enumerate(next(iter(by_candidate), ()))
        if len({candidate[index][1] for candidate in by_candidate}) > 1
    }  # fmt: skip
    named = {
        ", ".join(f"{key}={value}" for key, value in candidate if key == "lr" or key in differing): rows
        for candidate, rows in by_candidate.items()
    }
    result = {
        candidate: {"seeds": sorted(r["seed"] for r in rows), "holds_on_every_seed": every_seed(rows),
                    "runs": sorted(rows, key=lambda r: r["seed"])}
        for candidate, rows in sorted(named.items())
    }  # fmt: skip
    for candidate, found in result.items():
        print(f"{candidate}: premise on every seed: {found['holds_on_every_seed']}")
        for row in found["runs"]:
            shown = ", ".join(f"{step}: {value:.3f}" for step, value in row["accuracy"].items() if value is not None)
            print(f"  seed {row['seed']}: {shown}; holds: {row.get('holds')}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
