"""``model=smollm2_135m`` on CPU: greedy accuracy before training, and the algorithms' step time and peak memory.

    python benchmarks/smollm2.py accuracy [--questions 200] [--max-new-tokens 384] [--out FILE.jsonl]
    python benchmarks/smollm2.py start [--questions 100] [--out research/results/smollm2_preset/start.json]
    python benchmarks/smollm2.py learning --sweep FOLDER [--out research/results/smollm2_preset/learning.json]
    python benchmarks/smollm2.py step-time [--repeats 2] [--lora-r R] [--algorithms NAME ...] [overrides...]
    python benchmarks/smollm2.py memory [--lora-r R] [overrides...]

``accuracy`` reads ``--data`` (default ``$SOCRATIC_EXP_DATA`` or ``../shared/data``): 200 questions of the GSM8K
test set (the same sample as a run's ``task.eval_size=200``) and of MultiArith, answered greedily as the run's
evaluation does (chat template, the task's instruction as the system turn), with the share of answers the verifier
could not read, broken down by reason; ``--out`` keeps every completion for reading.

``start`` measures the pre-registered candidates of ``experiment=smollm2_cpu``'s task and instruction
(``research/results/smollm2_preset/PREREGISTRATION.md``): greedy accuracy and readable-answer share on each
candidate's first ``--questions`` held-out questions, the ones a run's evaluation answers (``eval.max_samples``).

``learning`` reads the pre-registered learning runs (a sweep of ``experiment=smollm2_cpu`` or
``experiment=smollm2_cpu_flexible`` over ``algorithm`` and ``seed``) and computes the registered statistics: each
run's held-out change (final minus initial) of the greedy accuracy under the run's parser, and where the runs logged
them of the strict and flexible accuracies and the no-answer share; per algorithm the mean with its 95% interval over
the seeds (t distribution, n - 1 degrees of freedom), with the curve of every evaluation and each run's wall time.

``step-time`` builds a GSM8K trainer for grpo, socraticpo, sdpo and vpd from one SmolLM2 student (each its own copy
of the weights) and runs whole steps on the same prompts, rotating which goes first (paired, in one process): the
rollout (SocraticPO's attempts and guidance, SDPO / VPD's teacher contexts and VPD's E-step), then loss and backward;
the optimizer step, the same AdamW for all, is left out. The figure is seconds per 1,000 completion tokens the step
trained on (the student's own tokens, SocraticPO's later attempts included, teacher turns not), median over repeats.
``memory`` runs each algorithm in a process of its own for one whole training step (optimizer included) and reads its
peak resident memory. With ``--lora-r R`` each algorithm also runs with ``model.lora.r=R`` (LoRA adapters), paired
against full fine-tuning, where the checkout has a ``model.lora`` block.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from paired_trainers import build_trainers, paired_steps  # benchmarks/ is on the path of a script run from it

from socratic_exp.runtime.assembly import build_trainer, workbench

ROOT = Path(__file__).resolve().parent.parent
ALGORITHMS = {
    "grpo": ["algorithm=grpo"],
    "socraticpo": ["algorithm=socraticpo", "teacher=rule"],  # on GSM8K the rule teacher passes on the verdict
    # the same, each attempt re-reading its context and the KL's log-probabilities from a second pass (step-time only)
    "socraticpo-reread": ["algorithm=socraticpo", "teacher=rule", "algorithm.reuse_cache=false"],
    "sdpo": ["algorithm=sdpo"],
    "vpd": ["algorithm=vpd"],
}
# A small GSM8K step, so that every arm runs a few times on 2 shared cores: 2 prompts x 2 completions of up to 64 tokens
# (SocraticPO: per attempt, up to 3 attempts).
BATCH = [
    "algorithm.batch_size=4",
    "algorithm.num_generations=2",
    "algorithm.max_completion_length=64",
    "algorithm.learning_rate=1e-6",
    "algorithm.log_completions=false",
    "algorithm.save_steps=1000",
    "logger=none",
]


def data_overrides(data: Path, task: str = "gsm8k") -> list[str]:
    if task == "gsm8k":
        files = f"{{train:{data}/gsm8k/train.jsonl,eval:{data}/gsm8k/test.jsonl}}"
    else:  # MultiArith ships one file: its questions serve as both splits (only evaluation reads them here)
        files = f"{{train:{data}/multiarith/test.jsonl,eval:{data}/multiarith/test.jsonl}}"
    return [f"task={task}", f"task.data_files={files}"]


# --- accuracy ----------------------------------------------------------------------------------------------------
def accuracy(args: argparse.Namespace) -> None:
    from socratic_exp.core.config import compose
    from socratic_exp.models.generation import generate
    from socratic_exp.runtime.assembly import build_components

    student = None
    records = []
    for task_name in ("gsm8k", "multiarith"):
        cfg = compose("model=smollm2_135m", *data_overrides(args.data, task_name), f"task.eval_size={args.questions}")
        components = build_components(cfg)
        task = components.task
        rows = task.build()["eval"].to_list()
        if student is None:
            student = components.model.load(task)
        started = time.perf_counter()
        texts = generate(
            student,
            [row["prompt"] for row in rows],
            max_new_tokens=args.max_new_tokens,
            batch_size=args.batch_size,
            instruction=task.instruction(),
        )
        seconds = time.perf_counter() - started
        verdicts = [task.verify(text, row["answer"]) for text, row in zip(texts, rows, strict=True)]
        lengths = [len(student.tokenizer(text, add_special_tokens=False).input_ids) for text in texts]
        reasons = collections.Counter(v.reason for v in verdicts)
        at_cap = sum(n >= args.max_new_tokens for n in lengths)
        print(
            f"{task_name}: greedy accuracy {sum(v.score for v in verdicts) / len(rows):.3f} on {len(rows)} questions, "
            f"no readable answer {sum(v.extracted is None for v in verdicts) / len(rows):.3f} "
            f"({dict(sorted(reasons.items()))}); {at_cap} answers hit the {args.max_new_tokens}-token cap; "
            f"median length {statistics.median(lengths):.0f} tokens; {seconds:.0f} s",
            flush=True,
        )
        for row, text, verdict, length in zip(rows, texts, verdicts, lengths, strict=True):
            records.append(
                {
                    "task": task_name,
                    "question": row["prompt"],
                    "answer": row["answer"],
                    "completion": text,
                    "tokens": length,
                    "reason": verdict.reason,
                    "extracted": verdict.extracted,
                }
            )
    if args.out:
        Path(args.out).write_text("".join(json.dumps(record) + "\n" for record in records))
        print(f"completions written to {args.out}")


# --- the preset's start ------------------------------------------------------------------------------------------
ARITHMETIC_PROMPT = (
    "Work it out one operation per line, e.g. 3+4=7, then write the final answer on a last line as A: <integer>."
)
WORD_PROMPT = "Solve the problem step by step. Then write the final answer on a last line as: The answer is <integer>."
# name: (task overrides, instruction, new tokens), in the pre-registered order of preference
CANDIDATES = {
    "arithmetic-1-2": (["task=arithmetic", "task.max_ops=2"], ARITHMETIC_PROMPT, 128),
    "arithmetic-1-3": (["task=arithmetic"], ARITHMETIC_PROMPT, 128),
    "multiarith": (["multiarith"], WORD_PROMPT, 256),
    "gsm8k": (["gsm8k"], WORD_PROMPT, 256),
    # amendment 1 (PREREGISTRATION.md), added after the four above, before any training run
    "arithmetic-1": (
        [
            "task=arithmetic",
            "task.max_ops=1",
            "task.order_sensitive_share=null",
            "task.eval_size=100",
            "task.probe_size=0",
        ],
        ARITHMETIC_PROMPT,
        128,
    ),
}


def start(args: argparse.Namespace) -> None:
    from socratic_exp.core.config import compose
    from socratic_exp.models.generation import generate
    from socratic_exp.runtime.assembly import build_components

    student = None
    results = {}
    for name in args.candidates or CANDIDATES:
        task_overrides, instruction, new_tokens = CANDIDATES[name]
        if task_overrides[0].startswith("task="):
            overrides = task_overrides
        else:  # a shared benchmark file
            overrides = data_overrides(args.data, task_overrides[0])
        cfg = compose("model=smollm2_135m", *overrides, f"task.system_prompt={json.dumps(instruction)}")
        components = build_components(cfg)
        task = components.task
        rows = task.build()["eval"].to_list()[: args.questions]
        if student is None:
            student = components.model.load(task)
        started = time.perf_counter()
        texts = generate(
            student,
            [row["prompt"] for row in rows],
            max_new_tokens=new_tokens,
            batch_size=args.batch_size,
            instruction=task.instruction(),
            progress=name,
        )
        verdicts = [task.verify(text, row["answer"]) for text, row in zip(texts, rows, strict=True)]
        lengths = [len(student.tokenizer(text, add_special_tokens=False).input_ids) for text in texts]
        results[name] = {
            "overrides": overrides,
            "instruction": instruction,
            "max_new_tokens": new_tokens,
            "questions": len(rows),
            "greedy_accuracy": sum(v.score for v in verdicts) / len(rows),
            "readable_share": sum(v.extracted is not None for v in verdicts) / len(rows),
            "reasons": dict(sorted(collections.Counter(v.reason for v in verdicts).items())),
            "median_tokens": statistics.median(lengths),
            "at_cap": sum(n >= new_tokens for n in lengths),
            "seconds": time.perf_counter() - started,
            "examples": [{"question": r["prompt"], "completion": t} for r, t in zip(rows[:3], texts, strict=False)],
        }
        print(f"{name}: " + ", ".join(f"{k} {v}" for k, v in results[name].items() if k != "examples"), flush=True)
    chosen = choose_start(results)
    print(f"the pre-registered rule chooses: {chosen}")
    if args.out:
        Path(args.out).write_text(json.dumps({"chosen": chosen, "candidates": results}, indent=1) + "\n")
        print(f"written to {args.out}")


# the registered statistics: the primary (the run's parser), then the secondary ones where a run logged them
LEARNING_METRICS = ("eval/greedy_acc", "eval/strict_acc", "eval/flexible_acc", "eval/no_answer")
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}  # t(0.975, df)


def learning(args: argparse.Namespace) -> None:
    from socratic_exp.core.run_folder import read_metrics, read_summary

    runs: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for folder in sorted(p for p in Path(args.sweep).iterdir() if (p / "summary.json").is_file()):
        summary = read_summary(folder)
        records = [record for record in read_metrics(folder) if "eval/greedy_acc" in record]
        curves = {
            metric: {int(record["step"]): record[metric] for record in records if metric in record}
            for metric in LEARNING_METRICS
        }
        runs[algorithm_of(summary)].append(
            {
                "seed": summary["config"]["seed"],
                "status": summary["status"],
                "wall_minutes": round(summary.get("wall_time_s", 0) / 60, 1),
                "curves": {metric: curve for metric, curve in curves.items() if curve},
                "gains": {metric: gain_of(curve) for metric, curve in curves.items() if len(curve) > 1},
            }
        )
    table: dict[str, Any] = {}
    print("| algorithm | statistic | seeds | change per seed (points) | mean | 95% interval | wall minutes |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, found in sorted(runs.items()):
        table[name] = {"runs": found}
        for metric in LEARNING_METRICS:
            gains = [run["gains"][metric] for run in found if metric in run["gains"] and run["status"] == "completed"]
            if not gains:
                continue
            mean = statistics.fmean(gains)
            half = T975[len(gains) - 1] * statistics.stdev(gains) / len(gains) ** 0.5 if len(gains) > 1 else math.nan
            table[name][metric] = {"gains": gains, "mean": mean, "interval": [mean - half, mean + half]}
            print(
                f"| {name} | {metric} | {len(gains)} | {', '.join(f'{100 * g:+.0f}' for g in gains)} | "
                f"{100 * mean:+.1f} | [{100 * (mean - half):+.1f}, {100 * (mean + half):+.1f}] | "
                f"{', '.join(str(run['wall_minutes']) for run in found)} |"
            )
    if args.out:
        Path(args.out).write_text(json.dumps(table, indent=1) + "\n")
        print(f"written to {args.out}")


def gain_of(curve: dict[int, float]) -> float:
    """The change of a metric from its first evaluation (before training) to its last."""
    steps = sorted(curve)
    return curve[steps[-1]] - curve[steps[0]]


def algorithm_of(summary: dict[str, Any]) -> str:
    """The algorithm option a run chose (its ``algorithm=`` override)."""
    for override in summary["overrides"]:
        if override.startswith("algorithm="):
            return override.partition("=")[2]
    return "socraticpo"  # the default


def choose_start(results: dict[str, dict[str, Any]]) -> str:
    """The pre-registered rule: the first candidate with greedy accuracy in [10%, 60%], else the first with a
    readable-answer share there, else the most accurate (and the start criterion failed)."""
    for key in ("greedy_accuracy", "readable_share"):
        for name, result in results.items():
            if 0.10 <= result[key] <= 0.60:
                return name
    return max(results, key=lambda name: results[name]["greedy_accuracy"]) + " (the start criterion failed)"


# --- step time ---------------------------------------------------------------------------------------------------
def arms(lora_r: int | None, names: list[str] | None = None) -> dict[str, list[str]]:
    """Algorithm arms (``names``, by default all but the re-reading SocraticPO): full fine-tuning, and with
    ``lora_r`` the same algorithms with LoRA adapters."""
    names = names or [name for name in ALGORITHMS if name != "socraticpo-reread"]
    chosen = {name: ALGORITHMS[name] for name in names}
    if lora_r is None:
        return chosen
    if not has_lora():
        print("model.lora is not in this checkout's model options: LoRA arms skipped, full fine-tuning only")
        return chosen
    return chosen | {f"{name} (lora r={lora_r})": [*o, f"model.lora.r={lora_r}"] for name, o in chosen.items()}


def has_lora() -> bool:
    from socratic_exp.core.config import compose

    return "lora" in compose("model=smollm2_135m").model


def components_for(overrides: list[str], data: Path, extra: list[str]) -> Any:
    from socratic_exp.core.config import compose
    from socratic_exp.runtime.assembly import build_components

    return build_components(compose("model=smollm2_135m", *data_overrides(data), *BATCH, *overrides, *extra))


def student_tokens(batch: dict[str, Any]) -> int:
    """The completion tokens the loss covers: the student's (SocraticPO's teacher turns excluded)."""
    mask = batch["completion_mask"]
    if "tool_mask" in batch:
        mask = mask * batch["tool_mask"]
    return int(mask.sum())


def step_time(args: argparse.Namespace) -> None:
    import torch

    chosen = arms(args.lora_r, args.algorithms)
    options = {name: components_for(overrides, args.data, args.overrides) for name, overrides in chosen.items()}
    bench = workbench(next(iter(options.values())))
    with tempfile.TemporaryDirectory() as tmp:
        trainers = build_trainers(options, bench, Path(tmp))
        algorithm = bench.components.algorithm
        prompts = algorithm.batch_size // algorithm.num_generations
        per_k: dict[str, list[float]] = collections.defaultdict(list)
        parts: dict[str, dict[str, list[float]]] = collections.defaultdict(lambda: collections.defaultdict(list))
        rounds = 1 + args.repeats  # the first round warms up
        for step in paired_steps(trainers, bench.data["train"], prompts, algorithm.num_generations, rounds):
            tokens = student_tokens(step.batch)
            print(
                f"  round {step.round} {step.name:<22} rollout {step.rollout_s:6.1f} s, loss+backward "
                f"{step.loss_s:6.1f} s, CPU {step.cpu_s:6.1f} s, {tokens} student tokens",
                flush=True,
            )
            if step.round:
                per_k[step.name].append(step.step_s / tokens * 1000)
                parts[step.name]["cpu_per_k"].append(step.cpu_s / tokens * 1000)
                parts[step.name]["rollout"].append(step.rollout_s)
                parts[step.name]["loss"].append(step.loss_s)
                parts[step.name]["tokens"].append(tokens)
    print(
        f"one step on {algorithm.batch_size} completions ({prompts} prompts x {algorithm.num_generations}, at most "
        f"{algorithm.max_completion_length} tokens each), torch threads {torch.get_num_threads()}, "
        f"median of {args.repeats}:"
    )
    grpo = per_k.get("grpo")
    for name, values in per_k.items():
        median = {key: statistics.median(v) for key, v in parts[name].items()}
        ratio = statistics.median(v / g for v, g in zip(values, grpo, strict=True)) if grpo else float("nan")
        print(
            f"  {name:<22} {statistics.median(values):7.1f} s per 1,000 student tokens (x{ratio:.2f} of grpo, "
            f"paired; CPU {median['cpu_per_k']:.1f} s): rollout {median['rollout']:.1f} s + loss and backward "
            f"{median['loss']:.1f} s for {median['tokens']:.0f} tokens"
        )


# --- memory ------------------------------------------------------------------------------------------------------
def memory(args: argparse.Namespace) -> None:
    results = {}
    for name, overrides in arms(args.lora_r, args.algorithms).items():
        command = [sys.executable, __file__, "memory-one", "--data", str(args.data), *overrides, *args.overrides]
        proc = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "TQDM_DISABLE": "1"})
        if proc.returncode:
            sys.exit(f"{name}: {proc.stderr[-3000:]}")
        results[name] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"  {name:<22} peak RSS {results[name]['peak_rss_mb']:8.0f} MB", flush=True)


def memory_one(args: argparse.Namespace) -> None:
    components = components_for(args.overrides, args.data, ["algorithm.max_steps=1"])
    with tempfile.TemporaryDirectory() as tmp:
        build_trainer(workbench(components), Path(tmp)).train()
    print(json.dumps({"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["accuracy", "start", "learning", "step-time", "memory", "memory-one"])
    parser.add_argument("--sweep", help="learning: the sweep folder of the learning runs")
    default_data = os.environ.get("SOCRATIC_EXP_DATA") or ROOT.parent / "shared" / "data"
    parser.add_argument("--data", type=Path, default=default_data, help="../shared/data, or $SOCRATIC_EXP_DATA")
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--max-new-tokens", type=int, default=384)
    parser.add_argument("--batch-size", type=int, default=40)
    parser.add_argument("--out", default=None)
    parser.add_argument("--candidates", nargs="+", choices=list(CANDIDATES), help="start: these candidates only")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--lora-r", type=int, default=None, help="also run every algorithm with model.lora.r=R")
    parser.add_argument(
        "--algorithms",
        nargs="+",
        choices=list(ALGORITHMS),
        help="the arms (default: all but the re-reading socraticpo)",
    )
    args, args.overrides = parser.parse_known_args()
    commands = {"accuracy": accuracy, "start": start, "learning": learning, "step-time": step_time}
    commands |= {"memory": memory, "memory-one": memory_one}
    commands[args.command](args)


if __name__ == "__main__":
    main()
