"""Time of one warm-start step of ``model=tiny`` (forward, backward, AdamW; bf16 autocast on CPU) by packing width
and attention implementation, on the same 64-trace batches. Each variant is ``WIDTH:ATTENTION``: WIDTH is the row
width of ``PackingCollator`` (0: the batch's longest trace), ATTENTION a transformers attention implementation.
``--threads`` and ``--batch-size`` measure data parallelism over the cores: two processes with ``--threads 1
--batch-size 32`` at once against one with the defaults.
Usage: ``python benchmarks/warmstart_packing.py [256:sdpa 0:sdpa 256:eager ...] [--steps N] [--threads N]
[--batch-size N]``."""

from __future__ import annotations

import argparse
import random
import time

import torch

from socratic_exp.components import build_components
from socratic_exp.hydra_support import compose
from socratic_exp.models.char_tokenizer import build_char_tokenizer
from socratic_exp.models.tiny import PackingCollator, encode_examples

WARMUP_STEPS = 3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("variants", nargs="*", default=["256:sdpa", "0:sdpa", "256:eager"])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per variant (after 3 warm-up steps)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's, one per core)")
    parser.add_argument("--batch-size", type=int, default=None, help="traces a step (default: the warm-start's, 64)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    components = build_components(compose())
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
        optimizer = torch.optim.AdamW(model.parameters(), lr=components.model.warmstart_lr)
        batches = [
            PackingCollator(tokenizer.pad_token_id, int(width) or max(len(f["input_ids"]) for f in s))(s)
            for s in samples
        ]
        for index, batch in enumerate(batches):
            if index == WARMUP_STEPS:
                started = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        per_step = (time.perf_counter() - started) / args.steps
        rows = sum(b["input_ids"].shape[0] for b in batches) / len(batches)
        print(f"{variant:<10} {per_step * 1000:5.0f} ms a step, {rows:5.1f} rows of a batch of {batch_size} traces, "
              f"{torch.get_num_threads()} threads", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
