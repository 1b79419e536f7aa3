"""A real-model run as its user sees it: the console's lines timed from the launch.

    python research/first_step.py [--steps 2] [--first-step-only] [--preset experiment=smollm2_cpu] [--label NAME]
                                    [--out FILE.json] [overrides...]

Runs ``python -m socratic_exp experiment=smollm2_cpu logger=none`` (or ``--preset``, plus the overrides) for
``--steps`` training steps with an evaluation after each, stamps every console line with the seconds since the
launch, and reads from them: the first line, the student's load line, the first progress line of work after it,
each evaluation (before training: greedy only, as the preset's; after a step: greedy and assisted), each training
step, and the first step's end. From the measured evaluation and step times it projects the preset's own schedule
(its ``algorithm.max_steps`` and ``eval.every_steps``): the whole run's length and the evaluations' share of it.
``--first-step-only`` stops the run at its first step. Run it on an otherwise idle machine (and, for the spread a
user sees, next to other work); ``--out`` keeps the figures and every stamped line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from omegaconf import OmegaConf

from socratic_exp.core.run_folder import git_commit, machine

ROOT = Path(__file__).resolve().parent.parent
PRESET = "experiment=smollm2_cpu"

PROGRESS = re.compile(r"\[socratic_exp\.progress\]")
LOADED = re.compile(r"student .* loaded in")
EVALUATED = re.compile(r"held-out at step (\d+):")
STEP = re.compile(r"- step (\d+)/\d+ \|")
SAVED = re.compile(r"checkpoint of step (\d+) saved in")


def stamped_run(command: list[str], stop_at: re.Pattern[str] | None = None) -> list[tuple[float, str]]:
    """Every line the run prints (stdout and stderr together), with the seconds since the launch; with ``stop_at``,
    the run is stopped at the first line that matches it."""
    started = time.monotonic()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    output = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
    lines = []
    with subprocess.Popen(command, cwd=ROOT, env=env, **output) as run:
        for line in run.stdout or []:
            lines.append((round(time.monotonic() - started, 1), line.rstrip("\n")))
            if stop_at and stop_at.search(line):
                run.terminate()
                break
    if run.returncode != 0 and not (stop_at and stop_at.search(lines[-1][1])):
        tail = "\n".join(line for _, line in lines[-20:])
        sys.exit(f"the run failed with exit code {run.returncode}:\n{tail}")
    return lines


def first(lines: list[tuple[float, str]], pattern: re.Pattern[str]) -> float | None:
    return next((seconds for seconds, line in lines if pattern.search(line)), None)


def timeline(lines: list[tuple[float, str]]) -> dict[str, object]:
    """Seconds since the launch of each event, and each evaluation's and step's length.

    Each piece runs from the last line before it: an evaluation after step N from that step's line, or its
    checkpoint's saved line where the save came first (the final evaluation, after training), to its ``held-out``
    line; the one before training from the student's load line; step N from the end of step N - 1's evaluation or
    checkpoint, whichever came last.
    """
    loaded = first(lines, LOADED)
    evaluations: dict[int, float] = {}
    steps: dict[int, float] = {}
    saved: dict[int, float] = {}
    for seconds, line in lines:
        for pattern, events in ((EVALUATED, evaluations), (STEP, steps), (SAVED, saved)):
            if match := pattern.search(line):
                events.setdefault(int(match.group(1)), seconds)
    if loaded is None or 0 not in evaluations or not steps:
        sys.exit("the run printed no load line, no evaluation before training or no step: is it the smollm2 preset?")

    def last_before(moment: float, *candidates: float | None) -> float:
        return max(t for t in candidates if t is not None and t <= moment)

    eval_seconds = {0: evaluations[0] - loaded}
    step_seconds = {}
    for step, end in sorted(steps.items()):
        step_seconds[step] = end - last_before(end, evaluations.get(step - 1), saved.get(step - 1), loaded)
        if step in evaluations:
            eval_seconds[step] = evaluations[step] - last_before(evaluations[step], end, saved.get(step))
    after_load = [(seconds, line) for seconds, line in lines if seconds > loaded]
    return {
        "first_line_s": lines[0][0],
        "student_loaded_s": loaded,
        "first_progress_line_s": first(after_load, PROGRESS),
        "first_step_done_s": steps[min(steps)],
        "evaluation_s": {str(k): round(v, 1) for k, v in eval_seconds.items()},
        "step_s": {str(k): round(v, 1) for k, v in step_seconds.items()},
    }


def projection(figures: dict[str, object], max_steps: int, every: int) -> dict[str, float]:
    """The preset's whole run from the measured parts: the evaluation before training as measured, one evaluation
    (greedy and assisted) after every ``every`` steps and at the end, each as long as the measured ones' mean, and
    ``max_steps`` steps of the measured steps' mean (checkpoints and start-up left out)."""
    evaluations: dict[str, float] = figures["evaluation_s"]  # type: ignore[assignment]
    steps: dict[str, float] = figures["step_s"]  # type: ignore[assignment]
    later = [seconds for step, seconds in evaluations.items() if step != "0"]
    count = len(range(every, max_steps, every)) + 1 if every else 1
    evaluating = evaluations["0"] + count * statistics.mean(later)
    training = max_steps * statistics.mean(steps.values())
    return {
        "steps": max_steps,
        "evaluations_after_training_starts": count,
        "evaluation_s": round(evaluating, 1),
        "training_s": round(training, 1),
        "total_h": round((evaluating + training) / 3600, 2),
        "evaluation_share": round(evaluating / (evaluating + training), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2, help="training steps measured (an evaluation after each)")
    parser.add_argument("--first-step-only", action="store_true", help="stop the run once its first step is done")
    parser.add_argument("--preset", default=PRESET, help="the experiment overlay (experiment=smollm2_cpu_math, ...)")
    parser.add_argument("--label", default="smollm2_cpu")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("overrides", nargs="*", help="more overrides, e.g. algorithm=grpo")
    args = parser.parse_args()

    from socratic_exp.core.config import compose

    preset = compose(args.preset, *args.overrides)
    with tempfile.TemporaryDirectory() as run_dir:
        command = [sys.executable, "-m", "socratic_exp", args.preset, "logger=none", *args.overrides,
                   f"algorithm.max_steps={args.steps}", "eval.every_steps=1", f"hydra.run.dir={run_dir}"]  # fmt: skip
        lines = stamped_run(command, stop_at=STEP if args.first_step_only else None)
    figures = timeline(lines)
    if not args.first_step_only:
        figures["projected_run"] = projection(figures, int(preset.algorithm.max_steps), int(preset.eval.every_steps))
    result = {
        "label": args.label,
        "preset_overlay": args.preset,
        "overrides": args.overrides,
        "machine": machine(),
        "commit": git_commit(),
        "preset": {
            "algorithm": {k: preset.algorithm[k] for k in ("_target_", "max_steps", "batch_size", "num_generations")},
            "eval": OmegaConf.to_container(preset.eval, resolve=True),
        },
        **figures,
        "lines": lines,
    }
    print(json.dumps({k: v for k, v in result.items() if k != "lines"}, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
