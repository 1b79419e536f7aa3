"""``algorithm=entropy_masked``: its step time relative to ``algorithm=grpo``.

    python benchmarks/entropy_masked.py step-time [overrides]      # e.g. algorithm.rho=0.2 algorithm.mode=random
    python -m socratic_exp.report <sweep folder>   # +sweep=entropy_quantile's results: tables, curves, rho plot

``step-time`` builds both trainers from the same warm-started student and times what differs between them, the
loss and its backward pass, on one shared rollout batch (40 back-to-back pairs, alternating which goes first);
the rollout itself (identical for both) is timed once, which gives the whole step's ratio. The mask hook is also
timed alone: on a shared CPU whole losses vary by several percent from run to run, far more than the mask costs; so
is the ranking pre-pass that a generation batch split into several loss calls gets (``steps_per_generation > 1``).
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from paired_trainers import build_trainers

from socratic_exp.algorithms.entropy_masked.config import EntropyMask
from socratic_exp.core.config import compose
from socratic_exp.runtime.assembly import build_components, workbench

REPEATS, WARMUP = 40, 2


def step_time(overrides: list[str]) -> None:
    """The loss + backward of both trainers on one shared rollout batch, alternating, and the rollout's own time."""
    import torch

    common = ["logger=none", "algorithm.log_completions=false"]
    mask_keys = {f"algorithm.{f.name}" for f in dataclasses.fields(EntropyMask)}
    shared = [o for o in overrides if o.split("=", 1)[0] not in mask_keys]  # the mask's own settings: masked only
    options = {
        "grpo": build_components(compose("algorithm=grpo", *common, *shared)),
        "entropy_masked": build_components(compose("algorithm=entropy_masked", *common, *overrides)),
    }
    bench = workbench(options["grpo"])
    with tempfile.TemporaryDirectory() as tmp:
        trainers = build_trainers(options, bench, Path(tmp))
        algorithm = options["entropy_masked"].algorithm
        group = algorithm.num_generations
        rows = [bench.data["train"][i] for i in range(algorithm.batch_size // group) for _ in range(group)]
        start = time.perf_counter()
        with torch.no_grad():
            batch = trainers["grpo"]._generate_and_score_completions(rows)
        rollout = time.perf_counter() - start
        times: dict[str, list[float]] = defaultdict(list)
        for repeat in range(WARMUP + REPEATS):
            order = list(trainers.items())
            for name, trainer in order if repeat % 2 else order[::-1]:  # neither always goes first
                start = time.perf_counter()
                trainer.compute_loss(trainer.model, batch).backward()
                trainer.model.zero_grad()
                if repeat >= WARMUP:
                    times[name].append(time.perf_counter() - start)
        # The mask's own cost, free of the noise of whole losses: the hook alone on the batch's token mask.
        mask = batch["completion_mask"]
        entropies = torch.rand(mask.shape, generator=torch.Generator().manual_seed(0))
        start = time.perf_counter()
        for _ in range(REPEATS):
            trainers["entropy_masked"].get_high_entropy_mask(entropies, mask, 0.0)
        hook = (time.perf_counter() - start) / REPEATS
        # With steps_per_generation > 1 the generation batch is ranked once, before its loss calls, from one extra
        # no-grad forward pass: its cost per generation batch, on this batch taken as one.
        start = time.perf_counter()
        for _ in range(REPEATS):
            trainers["entropy_masked"]._weigh_generation_batch([dict(batch)])
        prepass = (time.perf_counter() - start) / REPEATS
    grpo, masked = statistics.median(times["grpo"]), statistics.median(times["entropy_masked"])
    # Each repeat times both back to back, so the load of a shared machine hits a pair alike: the median ratio of
    # the pairs is steadier than the ratio of the medians.
    ratio = statistics.median(m / g for m, g in zip(times["entropy_masked"], times["grpo"], strict=True))
    tokens = int(batch["completion_mask"].sum())
    print(
        f"loss + backward on one batch ({algorithm.batch_size} completions, {tokens} tokens, median of {REPEATS}): "
        f"grpo {grpo * 1000:.1f} ms, entropy_masked {masked * 1000:.1f} ms, paired ratio {ratio:.3f} "
        f"(rho={algorithm.rho} mode={algorithm.mode} normalize={algorithm.normalize})\n"
        f"rollout (generation + reward) {rollout:.2f} s: "
        f"whole-step ratio {(rollout + ratio * grpo) / (rollout + grpo):.4f}\n"
        f"the mask alone: {hook * 1000:.2f} ms per loss call, {hook / grpo:.2%} of grpo's loss + backward, "
        f"{hook / (rollout + grpo):.2%} of its step\n"
        f"the ranking pre-pass (steps_per_generation > 1, once per generation batch): {prepass * 1000:.1f} ms for "
        f"this batch, {prepass / grpo:.1%} of grpo's loss + backward on it, {prepass / (rollout + grpo):.2%} of a step"
    )


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "step-time":
        step_time(sys.argv[2:])
    else:
        sys.exit(__doc__.split("\n\n")[1])
