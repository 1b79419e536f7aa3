"""Stage 3 of a run: the evaluator and the collapse guard, the held-out evaluation before training, and the metrics
file it starts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from socratic_exp.core.metrics import MetricsSink, resumed_metrics
from socratic_exp.loggers.base import Logger

if TYPE_CHECKING:
    from socratic_exp.runtime.stages.build import Run


def evaluate_before(run: Run) -> None:
    """The held-out evaluation before training, once: a resumed run has it already and continues its metrics file
    (without the lines logged after its checkpoint); a new one starts the file with it."""
    from socratic_exp.runtime.evaluation import TRAIN_SECONDS, CollapseGuard, Evaluator

    cfg, c, job, student = run.cfg, run.components, run.job, run.bench.student
    run.evaluator = Evaluator(c.task, run.bench.splits["eval"], c.eval, c.teacher if c.teacher.present else None)
    run.guard = CollapseGuard(cfg.objective, c.eval.collapse_margin, c.eval.collapse_patience, c.model.lora.enabled)
    evaluated = "initial" in run.record.data  # an earlier attempt got past this evaluation
    initial = None
    if not evaluated:
        initial = run.evaluator.evaluate(student, stage="before training", assisted=c.eval.assisted_before_training)
        initial[TRAIN_SECONDS] = 0.0
        run.guard.observe(0, initial, student.model)
    metrics_file = resumed_metrics(job.run_dir, run.checkpoint, evaluated=evaluated, writes=job.is_main)
    run.sink = MetricsSink(metrics_file, run.tracker or Logger(), run.display.observe)
    if initial is not None:
        run.sink.log_evaluation(initial, 0, c.teacher.samples())
        run.record.update(initial=initial)
