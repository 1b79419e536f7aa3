"""Trainer callbacks: TRL's logs into ``metrics.jsonl``, periodic held-out evaluation."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback

if TYPE_CHECKING:
    from socratic_exp.evaluation import Evaluator
    from socratic_exp.models.base import Student
    from socratic_exp.run import MetricsSink
    from socratic_exp.samplers.base import PromptSampler


class MetricsFileCallback(TrainerCallback):
    """Every trainer log line goes to ``metrics.jsonl`` (W&B receives it from transformers' own callback);
    the sampler's state is logged beside it, to both."""

    def __init__(self, sink: MetricsSink, sampler: PromptSampler):
        self.sink = sink
        self.sampler = sampler
        self.last_logs: dict[str, Any] = {}

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if not state.is_world_process_zero or not logs:
            return
        self.last_logs.update(logs)  # the latest value of every training metric, for the summary
        self.sink.file.write(state.global_step, logs)
        sampler_metrics = {f"sampler/{k}": v for k, v in self.sampler.metrics().items()}
        if sampler_metrics:
            self.sink.log(sampler_metrics, state.global_step)


class PeriodicEvalCallback(TrainerCallback):
    """Held-out evaluation every ``every_steps`` optimizer steps (the final one runs after training)."""

    def __init__(self, evaluator: Evaluator, student: Student, every_steps: int, sink: MetricsSink):
        self.evaluator = evaluator
        self.student = student
        self.every_steps = every_steps
        self.sink = sink

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        step = state.global_step
        if self.every_steps and step % self.every_steps == 0 and step < state.max_steps:
            metrics = self.evaluator.evaluate(self.student)
            if state.is_world_process_zero:
                self.sink.log(metrics, step)
