"""Overhead of socratic_exp over a plain TRL script: GRPO step time through ``algorithm=grpo`` divided by a
hand-written ``GRPOTrainer`` on the same model, data and batch, in one process (blocks alternate to cancel drift).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from paired_trainers import on_own_copy  # benchmarks/ is on the path of a script run from it
from transformers import TrainerCallback

from socratic_exp.core.config import compose
from socratic_exp.core.console import ProgressDisplay
from socratic_exp.core.metrics import MetricsFile, MetricsSink
from socratic_exp.loggers.base import Logger
from socratic_exp.runtime.assembly import Workbench, build_components, build_trainer, workbench
from socratic_exp.runtime.callbacks import RunCallbacks
from socratic_exp.runtime.evaluation import CollapseGuard, Evaluator

STEPS, BLOCKS = 15, 3


class StepTimer(TrainerCallback):
    def __init__(self):
        self.times: list[float] = []

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append(time.perf_counter() - self._start)


def plain_trl(student, data, task, algo, out: str, timer: StepTimer):
    from trl import GRPOConfig, GRPOTrainer

    def accuracy(completions, answer, **_):
        return [task.score(c, a) for c, a in zip(completions, answer, strict=True)]

    args = GRPOConfig(
        output_dir=out,
        max_steps=algo.max_steps,  # the same steps as the run's (STEPS unless overridden)
        learning_rate=algo.learning_rate,
        per_device_train_batch_size=algo.batch_size,
        num_generations=algo.num_generations,
        max_completion_length=algo.max_completion_length,
        beta=0.0,
        bf16=False,
        logging_steps=algo.logging_steps,
        save_strategy="no",
        report_to=[],
        lr_scheduler_type="constant",
        seed=0,  # the run's seed, so both trainers draw the same prompts
    )
    return GRPOTrainer(
        model=student.model,
        reward_funcs=[accuracy],
        args=args,
        train_dataset=data["train"],
        processing_class=student.tokenizer,
        callbacks=[timer],
    )


def through_socratic_exp(bench: Workbench, out: Path, timer: StepTimer):
    """The run's trainer, as the run assembles it: the run's callbacks (``RunCallbacks``: metrics file, clock,
    periodic evaluation, progress display off the console, ...), its sink, and the step timer last."""
    c = bench.components
    sink = MetricsSink(MetricsFile(out / "metrics.jsonl"), Logger())
    evaluator = Evaluator(c.task, bench.splits["eval"], c.eval)
    guard = CollapseGuard("eval/greedy_acc", margin=None)
    display = ProgressDisplay(console=False)
    callbacks = RunCallbacks(c, sink, evaluator, bench.student, guard, display, tracker=None).all
    return build_trainer(bench, out, run_name="bench", seed=0, callbacks=[*callbacks, timer], sink=sink)


def main() -> None:
    c = build_components(
        compose(
            "algorithm=grpo",  # the run's default is socraticpo; the plain script it is held against is GRPO
            "logger=none",
            f"algorithm.max_steps={STEPS}",
            "algorithm.save_steps=1000",
            "algorithm.log_completions=false",
            "eval.every_steps=0",  # step times, not held-out evaluations
            *sys.argv[1:],
        )
    )
    bench = workbench(c)
    plain_times, ours_times = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for block in range(BLOCKS):
            for label, sink in (("plain", plain_times), ("socratic_exp", ours_times)):
                own = on_own_copy(bench)  # fresh weights for each trainer
                timer = StepTimer()
                out = Path(tmp) / f"{label}-{block}"
                out.mkdir()
                if label == "plain":
                    trainer = plain_trl(own.student, own.data, c.task, c.algorithm, str(out), timer)
                else:
                    trainer = through_socratic_exp(own, out, timer)
                trainer.train()
                sink += timer.times[2:]  # skip warm-up steps
                print(f"block {block} {label:<13} median step {statistics.median(timer.times[2:]):.3f} s", flush=True)
    ratio = statistics.median(ours_times) / statistics.median(plain_times)
    print(
        f"step time: plain TRL {statistics.median(plain_times):.3f} s, socratic_exp "
        f"{statistics.median(ours_times):.3f} s, ratio {ratio:.3f} (batch {c.algorithm.batch_size}, "
        f"G={c.algorithm.num_generations}, {len(ours_times)} steps each)"
    )


if __name__ == "__main__":
    main()
