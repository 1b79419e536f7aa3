"""``algorithm=socraticpo``: its step time relative to ``algorithm=grpo``.

    python benchmarks/socraticpo.py step-time [overrides]      # e.g. teacher=llm algorithm.max_attempts=2
    python -m socratic_exp.report <sweep folder>   # +sweep=socraticpo_ablation's results: tables, curves, plots

``step-time`` builds the trainers (``grpo``; ``socraticpo`` as configured, by default with the KL to the initial
policy folded into its returns; ``socraticpo_no_kl``, the same with ``algorithm.kl_coef=0``) from the same
warm-started student and runs whole steps on the same prompts (rollout, then loss and backward; the optimizer step,
the same for all, is left out), rotating which goes first. It also counts SocraticPO's generation work: the student
tokens it generated (only unsolved rollouts generate again), the decode slots the padded batches took (rows x
longest attempt, per round), and the slots a rollout that regenerated every sample at every round would take.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from paired_trainers import build_trainers, paired_steps

from socratic_exp.core.config import compose
from socratic_exp.runtime.assembly import build_components, workbench

REPEATS, WARMUP = 12, 1


def step_time(overrides: list[str]) -> None:
    common = ["logger=none", "algorithm.log_completions=false", *overrides]
    options = {
        "grpo": build_components(compose("algorithm=grpo", "teacher=none", *common)),
        "socraticpo": build_components(compose("algorithm=socraticpo", "teacher=rule", *common)),
        "socraticpo_no_kl": build_components(
            compose("algorithm=socraticpo", "teacher=rule", *common, "algorithm.kl_coef=0")
        ),
    }
    c = options["socraticpo"]
    bench = workbench(c)
    with tempfile.TemporaryDirectory() as tmp:
        trainers = build_trainers(options, bench, Path(tmp))
        algorithm = c.algorithm
        group, K = algorithm.num_generations, algorithm.max_attempts
        prompts = algorithm.batch_size // group
        times: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        work: dict[str, list[float]] = defaultdict(list)
        for step in paired_steps(trainers, bench.data["train"], prompts, group, WARMUP + REPEATS):
            if step.round < WARMUP:
                continue
            times[step.name]["rollout"].append(step.rollout_s)
            times[step.name]["loss"].append(step.loss_s)
            times[step.name]["step"].append(step.step_s)
            times[step.name]["tokens"].append(float(step.batch["completion_mask"].sum()))
            if step.name == "socraticpo":
                for key, value in generation_work(step.trainer._rollouts, K).items():
                    work[key].append(value)
    median = {name: {k: statistics.median(v) for k, v in parts.items()} for name, parts in times.items()}
    ratio = statistics.median(
        s / g for s, g in zip(times["socraticpo"]["step"], times["grpo"]["step"], strict=True)
    )  # pairs run back to back share the machine's load: steadier than the ratio of medians
    print(f"one step on {algorithm.batch_size} rollouts ({prompts} prompts x {group}), median of {REPEATS}:")
    for name, parts in median.items():
        print(
            f"  {name:<11} step {parts['step']:.3f} s = rollout {parts['rollout']:.3f} s + loss and backward "
            f"{parts['loss']:.3f} s ({parts['tokens']:.0f} completion tokens)"
        )
    print(f"  socraticpo / grpo, paired: {ratio:.2f}x (K={K}, teacher={c.teacher.__class__.__name__})")
    kl_ratio = statistics.median(
        s / n for s, n in zip(times["socraticpo"]["step"], times["socraticpo_no_kl"]["step"], strict=True)
    )
    print(
        f"  socraticpo / socraticpo_no_kl, paired: {kl_ratio:.2f}x (kl_coef {algorithm.reward_kl_coef}: the initial "
        "policy's and the rollout policy's log-probabilities, two forward passes more per step)"
    )
    mean = {k: statistics.mean(v) for k, v in work.items()}
    print(
        f"generation per step (mean): {mean['attempts']:.1f} attempts, {mean['generated']:.0f} student tokens, "
        f"{mean['slots']:.0f} decode slots (tokens / slots {mean['generated'] / mean['slots']:.2f}); regenerating "
        f"every rollout at every round would take {mean['naive_slots']:.0f} slots "
        f"({mean['naive_slots'] / mean['slots']:.2f}x), one GRPO round {mean['first_round_slots']:.0f}"
    )


def generation_work(rollouts: list, max_attempts: int) -> dict[str, float]:
    """Generated tokens and decode slots of one batch of rollouts (each round's padded batch = rows x longest)."""
    slots = naive = first = 0.0
    for k in range(max_attempts):
        lengths = [end - start for r in rollouts if len(r.segments) > k for start, end in [r.segments[k]]]
        if not lengths:
            break
        slots += len(lengths) * max(lengths)
        naive += len(rollouts) * max(lengths)
        first = first or slots
    return {
        "attempts": float(sum(len(r.segments) for r in rollouts)),
        "generated": float(sum(end - start for r in rollouts for start, end in r.segments)),
        "slots": slots,
        "naive_slots": naive,
        "first_round_slots": first,
    }


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "step-time":
        step_time(sys.argv[2:])
    else:
        sys.exit(__doc__.split("\n\n")[1])
