"""Time of one warm-start step of ``model=tiny`` (forward, backward, AdamW; bf16 autocast on CPU) by packing width
and attention implementation, on the same 64-trace batches. Each variant is ``WIDTH:ATTENTION``: WIDTH is the row
width of ``PackingCollator`` (0: the batch's longest trace), ATTENTION a transformers attention implementation.
``--threads`` and ``--batch-size`` measure data parallelism over the cores: two processes with ``--threads 1
--batch-size 32`` at once against one with the defaults.
Usage: ``python research/warmstart_packing.py [256:sdpa 0:sdpa 256:eager ...] [--steps N] [--threads N]
[--batch-size N] [--set model.num_layers=3 ...] [--profile]``. ``--set`` composes the student with overrides (another
shape); ``--profile`` splits the first variant's step time by kind of operation (torch's profiler, self CPU time)."""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable

import torch

from socratic_exp.core.config import compose
from socratic_exp.models.char_tokenizer import build_char_tokenizer
from socratic_exp.models.tiny.warmstart import PackingCollator, encode_examples
from socratic_exp.runtime.assembly import build_components

WARMUP_STEPS = 3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("variants", nargs="*", default=["256:sdpa", "0:sdpa", "256:eager"])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per variant (after 3 warm-up steps)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's, one per core)")
    parser.add_argument("--batch-size", type=int, default=None, help="traces a step (default: the warm-start's, 64)")
    parser.add_argument("--set", action="append", default=[], help="a config override of the student (repeatable)")
    parser.add_argument("--profile", action="store_true", help="where the first variant's step time goes")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    components = build_components(compose(*args.set))
    tokenizer = build_char_tokenizer()
    max_length = components.model.max_length
    features = encode_examples(components.task.warmstart_examples(8000, 0), tokenizer, max_length)
    batch_size = args.batch_size or components.model.warmstart_batch_size
    samples = [random.Random(i).sample(features, batch_size) for i in range(WARMUP_STEPS + args.steps)]
    for variant in args.variants:
        width, attention = variant.split(":")
        torch.manual_seed(0)
        model = components.model.build_untrained(tokenizer)
        model.config.use_cache = False  # as in the warm-start: packed position ids need it
        model.set_attn_implementation(attention)
        step = training_step(model, components.model.warmstart_lr)
        batches = [
            PackingCollator(tokenizer.pad_token_id, int(width) or max(len(f["input_ids"]) for f in s))(s)
            for s in samples
        ]
        for batch in batches[:WARMUP_STEPS]:
            step(batch)
        started = time.perf_counter()
        for batch in batches[WARMUP_STEPS:]:
            step(batch)
        per_step = (time.perf_counter() - started) / args.steps
        rows = sum(b["input_ids"].shape[0] for b in batches) / len(batches)
        size = f"{torch.get_num_threads()} threads, {model.num_parameters() / 1e6:.2f}M parameters"
        print(f"{variant:<10} {per_step * 1000:5.0f} ms a step, {rows:5.1f} rows of {batch_size} traces, {size}")
        if args.profile and variant == args.variants[0]:
            print_profile(step, batches[WARMUP_STEPS:])


Step = Callable[[dict[str, torch.Tensor]], None]


def training_step(model: torch.nn.Module, learning_rate: float) -> Step:
    """One warm-start update as the Trainer makes it: bf16 autocast, backward, gradient clipping at 1.0, AdamW."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)

    def step(batch: dict[str, torch.Tensor]) -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()

    return step


def print_profile(step: Step, batches: list[dict[str, torch.Tensor]]) -> None:
    """Self CPU time by kind of operation, as a share of the steps' total."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for batch in batches:
            step(batch)
    kinds: dict[str, float] = {}
    for event in profiler.key_averages():
        kind = next((k for k, names in OPERATION_KINDS.items() if any(n in event.key for n in names)), OTHER)
        kinds[kind] = kinds.get(kind, 0.0) + event.self_cpu_time_total
    total = sum(kinds.values())
    for kind, micros in sorted(kinds.items(), key=lambda item: -item[1]):
        print(f"    {kind:<62} {micros / total:6.1%}  {micros / 1000 / len(batches):6.1f} ms a step")


# torch operator names by the part of the step they belong to (matched as substrings of the profiler's keys)
OTHER = "elementwise and the rest (norms, RoPE, SiLU, residuals, loss)"
OPERATION_KINDS = {
    "attention (SDPA kernel, fwd + bwd)": ("scaled_dot_product",),
    "matrix products (linear, fwd + bwd)": ("aten::mm", "aten::addmm", "aten::bmm"),
    "bf16 casts and copies (autocast)": ("aten::copy_", "aten::_to_copy", "aten::to"),
    "optimizer (AdamW, grad clipping)": ("Optimizer", "aten::lerp", "aten::sqrt", "aten::addcdiv", "foreach"),
}


if __name__ == "__main__":
    main()
