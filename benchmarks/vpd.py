"""``algorithm=vpd`` and ``algorithm=sdpo``: step time and memory relative to ``algorithm=grpo``, and what each
feedback context gives the teacher.

    python benchmarks/vpd.py step-time [overrides]      # e.g. algorithm.feedback=teacher teacher=rule
    python benchmarks/vpd.py memory [overrides]         # peak RSS of grpo / sdpo / vpd (shared and copy teacher)
    python benchmarks/vpd.py contexts                   # the teacher's accuracy in each feedback context
    python -m socratic_exp.report <sweep folder>        # +sweep=vpd_ablation's results: tables, curves, plots

``step-time`` builds every trainer from the same warm-started student and runs whole steps on the same prompts
(rollout with the teacher contexts and, for VPD, an E-step at every step, timed on its own; then loss and backward;
the optimizer step, the same for all, is left out), rotating which goes first; the ratio to GRPO is the median of
back-to-back ratios, and VPD's amortised step is its step without the E-step plus 1 / ``e_step_every`` of it. ``memory``
runs each configuration in a process of its own for a few whole training steps and reads the process's peak resident
memory (CPU here; on a GPU the same runs read ``torch.cuda.max_memory_allocated``).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from paired_trainers import build_trainers, paired_steps

from socratic_exp.core.config import compose
from socratic_exp.runtime.assembly import build_components, build_trainer, workbench

REPEATS, WARMUP = 10, 1
CONFIGS = {  # name -> overrides (the shared ones come from the command line); VPD's M-step is sdpo_official's
    "grpo": ["algorithm=grpo"],
    "sdpo": ["algorithm=sdpo_official"],
    "vpd (shared)": ["algorithm=vpd"],
    "vpd (copy)": ["algorithm=vpd", "algorithm.teacher_weights=copy", "algorithm.teacher_regularization=ema"],
}


def _components(name: str, overrides: list[str]):
    """The configuration's components; GRPO takes the overrides it has keys for (not the feedback's, nor a teacher)."""
    import dataclasses

    from socratic_exp.algorithms.grpo.config import GRPO

    grpo_keys = {f"algorithm.{f.name}" for f in dataclasses.fields(GRPO)}
    own = [
        o
        for o in overrides
        if name != "grpo" or (o.split("=", 1)[0] in grpo_keys or not o.startswith(("algorithm.", "teacher")))
    ]
    return build_components(compose(*CONFIGS[name], "logger=none", "algorithm.log_completions=false", *own))


def step_time(overrides: list[str]) -> None:
    options = {name: _components(name, overrides) for name in CONFIGS}
    base = options["sdpo"]
    bench = workbench(base)
    with tempfile.TemporaryDirectory() as tmp:
        trainers = build_trainers(options, bench, Path(tmp))
        e_steps = {name: _timed_e_step(trainer) for name, trainer in trainers.items()}
        algorithm = base.algorithm
        group = algorithm.num_generations
        prompts = algorithm.batch_size // group
        times: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for step in paired_steps(trainers, bench.data["train"], prompts, group, WARMUP + REPEATS):
            e_step_time = sum(e_steps[step.name])
            e_steps[step.name].clear()
            if step.round < WARMUP:
                continue
            times[step.name]["rollout"].append(step.rollout_s)
            times[step.name]["loss"].append(step.loss_s)
            times[step.name]["step"].append(step.step_s)
            times[step.name]["e_step"].append(e_step_time)
    print(f"one step on {algorithm.batch_size} rollouts ({prompts} prompts x {group}), median of {REPEATS}:")
    grpo = times["grpo"]["step"]
    for name, parts in times.items():
        median = {k: statistics.median(v) for k, v in parts.items()}
        ratio = statistics.median(s / g for s, g in zip(parts["step"], grpo, strict=True))
        print(
            f"  {name:<13} step {median['step']:.3f} s = rollout (+ contexts, E-step) {median['rollout']:.3f} s + "
            f"loss and backward {median['loss']:.3f} s   x{ratio:.2f} of grpo (paired)"
        )
        every = getattr(options[name].algorithm, "e_step_every", None)
        if every:
            amortised = [s - e + e / every for s, e in zip(parts["step"], parts["e_step"], strict=True)]
            ratio = statistics.median(a / g for a, g in zip(amortised, grpo, strict=True))
            print(
                f"  {'':<13} of which the E-step {median['e_step']:.3f} s; amortised over e_step_every={every}: "
                f"{statistics.median(amortised):.3f} s   x{ratio:.2f} of grpo (paired)"
            )


def _timed_e_step(trainer) -> list[float]:
    """Wraps the trainer's E-step (if any) so that the wall time of each one it runs lands in the returned list."""
    spent: list[float] = []
    if not hasattr(trainer, "e_step"):
        return spent
    method = type(trainer).e_step

    def timed(output):
        start = time.perf_counter()
        try:
            return method(trainer, output)
        finally:
            spent.append(time.perf_counter() - start)

    trainer.e_step = timed
    return spent


def memory(overrides: list[str]) -> None:
    """Each configuration in its own process: peak RSS after a few whole training steps."""
    results = {}
    for name in CONFIGS:
        proc = subprocess.run(
            [sys.executable, __file__, "memory-one", name, *overrides],
            capture_output=True,
            text=True,
            env={**os.environ, "TQDM_DISABLE": "1"},
        )
        if proc.returncode:
            sys.exit(f"{name}: {proc.stderr[-2000:]}")
        results[name] = json.loads(proc.stdout.strip().splitlines()[-1])
    base = results["grpo"]["peak_rss_mb"]
    print("peak resident memory after 3 training steps (each in its own process):")
    for name, result in results.items():
        print(
            f"  {name:<13} {result['peak_rss_mb']:8.1f} MB  (+{result['peak_rss_mb'] - base:6.1f} MB over grpo)  "
            f"{result.get('teacher', '')}"
        )


def memory_one(name: str, overrides: list[str]) -> None:
    import resource

    components = _components(name, [*overrides, "algorithm.max_steps=3", "algorithm.save_steps=1000"])
    with tempfile.TemporaryDirectory() as tmp:
        trainer = build_trainer(workbench(components), Path(tmp))
        trainer.train()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    teacher = getattr(trainer, "memory", {}).get("description", "no teacher")
    print(json.dumps({"peak_rss_mb": peak_mb, "teacher": teacher}))


def contexts() -> None:
    """For each feedback context: the share of rollouts it covers, the student's accuracy on them (of those rollouts,
    and greedy on their questions), the greedy accuracy of the teacher (the student reading that context) on the same
    questions, and the teacher's mean per-token log q/pi on the rollouts themselves (all tokens, and the final ``A:``
    line): what the distillation will push."""
    import torch

    from socratic_exp.algorithms.sdpo.contexts import (
        PLAIN_TEMPLATES,
        ContextSettings,
        Rollout,
        Templates,
        build_contexts,
    )
    from socratic_exp.models.generation import generate
    from socratic_exp.teachers.base import Attempt, GuidanceRequest

    c = build_components(compose("algorithm=grpo", "teacher=rule", "logger=none"))
    data = c.task.build()
    student = c.model.load(c.task)
    c.teacher.attach(c.task, student)
    tokenizer, model = student.tokenizer, student.model
    rows, group = data["eval"].select(range(200)).to_list(), 4
    samples = generate(
        student, [r["prompt"] for r in rows], max_new_tokens=48, batch_size=200, sample=True,
        num_return_sequences=group, seed=1,
    )  # fmt: skip
    rollouts, answers = [], []
    for i, row in enumerate(rows):
        for text in samples[group * i : group * (i + 1)]:
            verdict = c.task.verify(text, row["answer"])
            rollouts.append(Rollout(row["prompt"], text, verdict.score, verdict.reason, verdict.extracted))
            answers.append(row["answer"])

    def critic(indices: list[int]) -> list[str]:
        attempts = [(rollouts[i].prompt, Attempt(rollouts[i].completion, 0.0, rollouts[i].reason)) for i in indices]
        return c.teacher.guide([GuidanceRequest(prompt, (attempt,)) for prompt, attempt in attempts])

    def token_logps(context: str, completion: str) -> torch.Tensor:
        ids = tokenizer(context, add_special_tokens=False)["input_ids"]
        target = tokenizer(completion, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids + target])).logits[0, len(ids) - 1 : -1]
        return logits.log_softmax(-1).gather(1, torch.tensor(target)[:, None])[:, 0]

    retry = Templates("{solution}{prompt}{feedback}", PLAIN_TEMPLATES.solution, "{attempt}\n{feedback_raw}\n")
    layouts = {
        "sibling": (("sibling",), PLAIN_TEMPLATES),
        "environment": (("environment",), PLAIN_TEMPLATES),
        "teacher": (("teacher",), PLAIN_TEMPLATES),
        "environment (retry layout)": (("environment",), retry),
        "teacher (retry layout)": (("teacher",), retry),
    }
    print(f"{len(rollouts)} sampled rollouts of {len(rows)} held-out questions; student sampled accuracy "
          f"{sum(r.score for r in rollouts) / len(rollouts):.3f}")  # fmt: skip
    greedy = generate(student, [r["prompt"] for r in rows], max_new_tokens=48, batch_size=200)
    greedy_score = [c.task.score(text, row["answer"]) for text, row in zip(greedy, rows, strict=True)]
    header = f"{'usable':>8}{'rollouts':>10}{'greedy':>8}{'teacher':>9}{'log q/pi':>10}{'A: line':>9}"
    print(f"{'context':<28}{header}   (accuracy of the rollouts, of the student's greedy answer, of the teacher's)")
    for name, (sources, templates) in layouts.items():
        built = build_contexts(rollouts, group, ContextSettings(sources, templates), critic)
        usable = [i for i, context in enumerate(built) if context.usable]
        outputs = generate(student, [built[i].prompt for i in usable], max_new_tokens=48, batch_size=200)
        teacher = sum(c.task.score(o, answers[i]) for o, i in zip(outputs, usable, strict=True)) / len(usable)
        own = sum(rollouts[i].score for i in usable) / len(usable)
        plain_greedy = sum(greedy_score[i // group] for i in usable) / len(usable)
        ratios, answer_lines = [], []
        for i in usable:
            text = rollouts[i].completion
            ratio = token_logps(built[i].prompt, text) - token_logps(rollouts[i].prompt, text)
            ratios.append(float(ratio.mean()))
            last = text.rstrip("\n").rsplit("\n", 1)[-1]
            if last.startswith("A:"):
                answer_lines.append(float(ratio[text.rindex(last) :][: len(last)].mean()))
        print(
            f"{name:<28}{len(usable) / len(rollouts):>8.3f}{own:>10.3f}{plain_greedy:>8.3f}{teacher:>9.3f}"
            f"{statistics.mean(ratios):>+10.3f}{statistics.mean(answer_lines):>+9.3f}"
        )


if __name__ == "__main__":
    command, arguments = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("", [])
    if command == "step-time":
        step_time(arguments)
    elif command == "memory":
        memory(arguments)
    elif command == "memory-one":
        memory_one(arguments[0], arguments[1:])
    elif command == "contexts":
        contexts()
    else:
        sys.exit(__doc__.split("\n\n")[1])
