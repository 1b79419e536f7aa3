"""``sampler=goldilocks``: its overhead as a share of the step time.

    python benchmarks/goldilocks.py overhead [overrides]        # e.g. algorithm=socraticpo teacher=rule
    python -m socratic_exp.report <sweep folder>   # +sweep=goldilocks_vs_uniform's results: tables, curves, plots

``overhead`` trains for ``algorithm.max_steps`` (default here 30) steps with ``sampler=goldilocks`` and times, per
optimizer step, the step itself and what the sampler did on the trainer's thread: choosing the batch (candidate
draw + predictions), taking in the feedback (targets, buffer, the error on unseen questions), and any wait for a
refit still running when the next batch is chosen. The refits themselves run in a thread beside the step; their
time is reported too (on a machine with idle cores it is hidden, on a saturated one it competes for the CPU). The
one-off question features (one forward pass over the training prompts at the start) are reported apart.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from socratic_exp.core.config import compose
from socratic_exp.runtime.assembly import build_components, build_trainer, workbench

WARMUP_STEPS = 2  # the first steps pay one-off costs (the predictor's first Adam step imports torch internals)
ON_THREAD = ("selection_s", "feedback_s", "wait_s")


def overhead(overrides: list[str]) -> None:
    from transformers import TrainerCallback

    defaults = ["algorithm=grpo", "sampler=goldilocks", "logger=none", "algorithm.max_steps=30",
                "algorithm.save_steps=10000", "algorithm.log_completions=false"]  # fmt: skip
    given = {override.split("=", 1)[0] for override in overrides}
    cfg = compose(*[d for d in defaults if d.split("=", 1)[0] not in given], *overrides)
    c = build_components(cfg, {"algorithm": cfg.algorithm._target_.rsplit(".", 1)[-1]})
    bench = workbench(c)

    class StepTimer(TrainerCallback):
        """From one step's end to the next: the whole loop, the fetch of the next batch (and its choice) included."""

        def __init__(self) -> None:
            self.rows: list[dict[str, float]] = []

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.mark = (time.perf_counter(), dict(c.sampler.selector.totals))

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            now, totals = time.perf_counter(), dict(c.sampler.selector.totals)
            row = {key: totals.get(key, 0.0) - self.mark[1].get(key, 0.0) for key in (*ON_THREAD, "update_s")}
            self.rows.append({"step_s": now - self.mark[0], **row})
            self.mark = (now, totals)

    timer = StepTimer()
    with tempfile.TemporaryDirectory() as tmp:
        trainer = build_trainer(bench, Path(tmp), run_name="bench", seed=cfg.seed, callbacks=[timer])
        started = time.perf_counter()
        trainer.train()
        total = time.perf_counter() - started
        selector = c.sampler.selector
        selector.close()
    # The features are computed when the dataloader is built, before training begins.
    features_s = total - sum(r["step_s"] for r in timer.rows)
    rows = timer.rows[WARMUP_STEPS:]
    step = sum(r["step_s"] for r in rows)
    on_thread = {key: sum(r[key] for r in rows) for key in ON_THREAD}
    refit = sum(r["update_s"] for r in rows)
    settings = c.sampler
    print(
        f"{len(rows)} steps after {WARMUP_STEPS} warm-up ({c.choices['algorithm']}, batch {c.algorithm.batch_size}, "
        f"{trainer.args.generation_batch_size // trainer.num_generations} prompts per batch from "
        f"{settings.candidates} candidates each (pool={settings.pool}), {len(bench.data['train'])} questions, refit "
        f"every {settings.update_every} questions x {settings.update_steps} steps, background={settings.background}):\n"
        f"  step time: mean {step / len(rows):.3f} s, median {statistics.median(r['step_s'] for r in rows):.3f} s\n"
        f"  on the trainer's thread: selection {on_thread['selection_s'] * 1000 / len(rows):.2f} ms/step, feedback "
        f"{on_thread['feedback_s'] * 1000 / len(rows):.2f} ms/step, waiting for a refit "
        f"{on_thread['wait_s'] * 1000 / len(rows):.2f} ms/step: {sum(on_thread.values()) / step:.2%} of the step time\n"
        f"  refits ({selector.fits} in all, in the background thread): {refit * 1000 / len(rows):.2f} ms/step, "
        f"{refit / step:.2%} of the step time\n"
        f"  one-off question features + dataloader start: {features_s:.2f} s "
        f"({features_s / total:.2%} of this {total:.0f} s run)"
    )


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "overhead":
        overhead(sys.argv[2:])
    else:
        sys.exit(__doc__.split("\n\n")[1])
