"""Warm-start wall time and loss of ``model=tiny`` in float32 and under bf16 autocast (``model.warmstart_bf16``),
each built from scratch in a temporary cache. Usage: ``python research/warmstart_precision.py [steps]``."""

from __future__ import annotations

import sys
import tempfile

from socratic_exp.core.config import compose
from socratic_exp.runtime.assembly import build_components


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    for bf16 in (False, True):
        with tempfile.TemporaryDirectory() as cache:
            c = build_components(compose(f"model.warmstart_steps={steps}", f"model.warmstart_bf16={bf16}",
                                         f"model.cache_dir={cache}"))  # fmt: skip
            info = c.model.load(c.task).info
            label = "bf16 autocast" if bf16 else "float32"
            print(f"{label:<14} {steps} steps: {info['seconds']:6.1f} s, mean training loss {info['train_loss']:.4f}")


if __name__ == "__main__":
    main()
