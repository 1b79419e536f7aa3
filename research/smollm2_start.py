"""The start criterion of ``experiment=smollm2_cpu``'s preset, measured before any training run: on each candidate's
training prompts, ``k`` samples per prompt at the run's temperature, and the share of prompts whose samples disagree
(some right, some wrong) under each answer parser. A group whose samples all score the same gives GRPO a zero
advantage: that share is what a run can learn from (``research/results/smollm2_learns/PREREGISTRATION.md``).

    python research/smollm2_start.py [--prompts 64] [--k 4] [--out research/results/smollm2_learns/start.json]

Each task candidate is generated once (SmolLM2 through the chat template, the preset's instruction as the system
turn, ``model.decode_dtype=auto``: bfloat16 where the CPU computes it) and scored under every parser; the format share
(samples the strict parser reads) is reported beside it, and the per-candidate figures name the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from smollm2 import ARITHMETIC_PROMPT  # the SmolLM2 benchmark's prompt, one definition

# name: task overrides, in the pre-registered order of preference (fewest operations first)
TASKS = {
    "arithmetic-1": ["task.max_ops=1", "task.order_sensitive_share=null", "task.eval_size=100", "task.probe_size=0"],
    "arithmetic-1-2": ["task.max_ops=2"],
    "arithmetic-1-3": [],
}
PARSERS = ("strict", "flexible")
THRESHOLD = 0.25  # the registered share of disagreeing prompts that "predicts learning"
FORMAT_SHARE_BELOW = 0.8  # the registered rule: the format reward is on (weight 0.5) below this format share
FORMAT_WEIGHT = 0.5


def disagreement(scores: list[float], k: int) -> float:
    """The share of prompts (``k`` consecutive scores each) with some samples right and some wrong."""
    groups = [scores[i : i + k] for i in range(0, len(scores), k)]
    return sum(0 < sum(group) < len(group) for group in groups) / len(groups)


def choose(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The registered rule: the (task, parser) with the largest disagreement share, ties to the fewer operations, then
    to strict; the format reward on when that candidate's format share is below ``FORMAT_SHARE_BELOW``."""
    ranked = [(name, parser) for name in TASKS if name in results for parser in PARSERS]
    best = max(ranked, key=lambda pair: (results[pair[0]]["disagreement"][pair[1]], -ranked.index(pair)))
    name, parser = best
    share = results[name]["disagreement"][parser]
    return {
        "task": name,
        "answer_parser": parser,
        "format_reward": FORMAT_WEIGHT if results[name]["format_share"] < FORMAT_SHARE_BELOW else 0.0,
        "disagreement": share,
        "criterion_met": share >= THRESHOLD,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=64, help="training prompts per candidate (the split's first)")
    parser.add_argument("--k", type=int, default=4, help="samples per prompt (the preset's num_generations)")
    parser.add_argument("--temperature", type=float, default=1.0, help="the run's sampling temperature")
    parser.add_argument("--max-new-tokens", type=int, default=128, help="the preset's max_completion_length")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tasks", nargs="+", choices=list(TASKS), help="these task candidates only")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    from socratic_exp.core.config import compose
    from socratic_exp.core.run_folder import machine, versions
    from socratic_exp.models.generation import decoding_dtype, generate
    from socratic_exp.runtime.assembly import build_components

    student, results = None, {}
    for name in args.tasks or TASKS:
        cfg = compose(
            "model=smollm2_135m", "model.decode_dtype=auto", "task=arithmetic", *TASKS[name],
            f"task.system_prompt={json.dumps(ARITHMETIC_PROMPT)}",
        )  # fmt: skip
        components = build_components(cfg)
        task = components.task
        rows = task.build()["train"].to_list()[: args.prompts]
        if student is None:
            student = components.model.load(task)
        started = time.perf_counter()
        texts = generate(
            student, [row["prompt"] for row in rows], max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
            sample=True, temperature=args.temperature, num_return_sequences=args.k, seed=args.seed,
            instruction=task.instruction(), progress=name,
        )  # fmt: skip
        seconds = time.perf_counter() - started
        answers = [row["answer"] for row in rows for _ in range(args.k)]
        scores = {p: [task.verify_as(p, t, a).score for t, a in zip(texts, answers, strict=True)] for p in PARSERS}
        formats = [task.follows_format(t, a) for t, a in zip(texts, answers, strict=True)]
        lengths = [len(student.tokenizer(text, add_special_tokens=False).input_ids) for text in texts]
        results[name] = {
            "overrides": TASKS[name],
            "prompts": len(rows),
            "disagreement": {p: disagreement(scores[p], args.k) for p in PARSERS},
            "sampled_accuracy": {p: statistics.fmean(scores[p]) for p in PARSERS},
            "format_share": statistics.fmean(formats),
            "median_tokens": statistics.median(lengths),
            "at_cap": sum(n >= args.max_new_tokens for n in lengths),
            "seconds": round(seconds, 1),
            "examples": [
                {"question": rows[i // args.k]["prompt"], "completion": texts[i]} for i in range(0, len(texts), args.k)
            ][:4],
        }
        print(f"{name}: " + ", ".join(f"{k} {v}" for k, v in results[name].items() if k != "examples"), flush=True)
    chosen = choose(results)
    print(f"the registered rule chooses: {chosen}")
    if args.out:
        settings = {k: v for k, v in vars(args).items() if k not in ("out", "tasks")}
        record = {
            "machine": machine(),
            "versions": versions(),
            "decode_dtype": decoding_dtype(student),
            "settings": settings,
            "chosen": chosen,
            "candidates": results,
        }
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
        print(f"written to {args.out}")


if __name__ == "__main__":
    main()
