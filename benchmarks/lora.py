"""Full fine-tuning against LoRA (``model.lora.r``): step time and peak memory of grpo, socraticpo and sdpo.

    python benchmarks/lora.py step-time [--model tiny] [--r 8] [--algorithms grpo socraticpo sdpo] [overrides ...]
    python benchmarks/lora.py memory    [--model tiny] [--r 8] [--algorithms grpo socraticpo sdpo] [overrides ...]

``--model`` is a ``model=`` option (``tiny``, or e.g. ``smollm2_135m`` where that option exists); the overrides go to
every configuration (e.g. ``task=gsm8k algorithm.max_completion_length=128``). The defaults are ``debug=fast``'s
batch (16 completions, 4 per prompt) on the embedded arithmetic task.

``step-time``: for each algorithm, a full-fine-tuning trainer and a LoRA trainer are built in one process from copies
of the same student and run whole steps on the same prompts, alternating which goes first: the rollout (with the
teacher's turns or contexts), loss and backward, and the AdamW step (the part LoRA shrinks most). Reported: the
median step, the median seconds per 1,000 completion tokens, and the median of the back-to-back LoRA / full ratios.

``memory``: each (algorithm, full or LoRA) in a process of its own for 3 whole training steps through the trainer's
own loop; the process's peak resident memory (CPU; a GPU run would read ``torch.cuda.max_memory_allocated``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from paired_trainers import build_trainers

from socratic_exp.core.config import compose
from socratic_exp.runtime.assembly import build_components, build_trainer, workbench

WARMUP = 1
ALGORITHMS = {  # name -> overrides; socraticpo guides itself (teacher=llm: the student, adapters on)
    "grpo": ["algorithm=grpo"],
    "socraticpo": ["algorithm=socraticpo", "teacher=llm"],
    "sdpo": ["algorithm=sdpo"],
}
COMMON = ["debug=fast", "logger=none", "algorithm.log_completions=false", "algorithm.save_steps=1000"]


def _components(algorithm: str, model: str, r: int, overrides: list[str]):
    return build_components(
        compose(*ALGORITHMS[algorithm], f"model={model}", *COMMON, f"model.lora.r={r}", *overrides), {}
    )


def _step(trainer, rows: list[dict]) -> tuple[float, int]:
    """One whole step (rollout, loss, backward, optimizer step): seconds and completion tokens."""
    start = time.perf_counter()
    batch = trainer._generate_and_score_completions(rows)
    trainer.compute_loss(trainer.model, batch).backward()
    trainer.optimizer.step()
    trainer.optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - start, int(batch["completion_mask"].sum())


def step_time(algorithms: list[str], model: str, r: int, overrides: list[str], repeats: int) -> None:
    import torch

    print(f"model={model}, LoRA r={r} against full fine-tuning: median of {repeats} paired steps ({WARMUP} warm-up)")
    for algorithm in algorithms:
        options = {
            "full": _components(algorithm, model, 0, overrides),
            "lora": _components(algorithm, model, r, overrides),
        }
        bench = workbench(options["full"])
        data = bench.data
        with tempfile.TemporaryDirectory() as tmp:
            trainers = build_trainers(options, bench, Path(tmp))
            for trainer in trainers.values():
                trainer.create_optimizer()
            settings = bench.components.algorithm
            group, prompts = settings.num_generations, settings.batch_size // settings.num_generations
            seconds: dict[str, list[float]] = {name: [] for name in trainers}
            per_kilotoken: dict[str, list[float]] = {name: [] for name in trainers}
            for repeat in range(WARMUP + repeats):
                rows = [data["train"][(repeat * prompts + i) % len(data["train"])] for i in range(prompts)]
                rows = [row for row in rows for _ in range(group)]
                order = list(trainers.items())
                for name, trainer in order[repeat % 2 :] + order[: repeat % 2]:  # each goes first in turn
                    torch.manual_seed(repeat)
                    took, tokens = _step(trainer, rows)
                    if repeat >= WARMUP:
                        seconds[name].append(took)
                        per_kilotoken[name].append(took / max(tokens, 1) * 1000)
        trainable = {
            name: sum(p.numel() for p in t.model.parameters() if p.requires_grad) for name, t in trainers.items()
        }
        ratio = statistics.median(lo / full for lo, full in zip(seconds["lora"], seconds["full"], strict=True))
        for name in trainers:
            print(
                f"  {algorithm:<11} {name:<5} step {statistics.median(seconds[name]):6.3f} s  "
                f"{statistics.median(per_kilotoken[name]):6.3f} s / 1k completion tokens  "
                f"trainable {trainable[name]:>11,}"
            )
        print(f"  {algorithm:<11} lora / full (paired): x{ratio:.2f}")


def memory(algorithms: list[str], model: str, r: int, overrides: list[str]) -> None:
    print(f"model={model}: peak resident memory after 3 training steps, each configuration in its own process")
    for algorithm in algorithms:
        peaks = {}
        for name, rank in (("full", 0), ("lora", r)):
            proc = subprocess.run(
                [sys.executable, __file__, "memory-one", algorithm, model, str(rank), *overrides],
                capture_output=True,
                text=True,
                env={**os.environ, "TQDM_DISABLE": "1"},
            )
            if proc.returncode:
                sys.exit(f"{algorithm} {name}: {proc.stderr[-2000:]}")
            peaks[name] = json.loads(proc.stdout.strip().splitlines()[-1])["peak_rss_mb"]
        print(
            f"  {algorithm:<11} full {peaks['full']:8.1f} MB   lora {peaks['lora']:8.1f} MB   "
            f"({peaks['lora'] - peaks['full']:+.1f} MB)"
        )


def memory_one(algorithm: str, model: str, r: int, overrides: list[str]) -> None:
    components = _components(algorithm, model, r, [*overrides, "algorithm.max_steps=3"])
    with tempfile.TemporaryDirectory() as tmp:
        build_trainer(workbench(components), Path(tmp)).train()
    print(json.dumps({"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))  # KiB on Linux


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "memory-one":
        algorithm, model, r, *overrides = sys.argv[2:]
        memory_one(algorithm, model, int(r), overrides)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["step-time", "memory"])
    parser.add_argument("--model", default="tiny", help="a model= option, e.g. tiny or smollm2_135m")
    parser.add_argument("--r", type=int, default=8, help="the LoRA rank compared with full fine-tuning")
    parser.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS), choices=list(ALGORITHMS))
    parser.add_argument("--repeats", type=int, default=6, help="step-time: paired steps measured per algorithm")
    args, overrides = parser.parse_known_args()
    if args.what == "step-time":
        step_time(args.algorithms, args.model, args.r, overrides, args.repeats)
    else:
        memory(args.algorithms, args.model, args.r, overrides)


if __name__ == "__main__":
    main()
