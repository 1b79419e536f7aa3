"""Stage 3 of a run: the evaluator and the collapse guard, the held-out evaluation before training, and the metrics
file it starts. With a colocated vLLM engine (``algorithm.use_vllm``) the evaluation before training waits for the
trainer, which starts the engine (stage 4 calls ``evaluate_initial``), so that every evaluation of the run generates
with the same engine."""

from __future__ import annotations

from typing import TYPE_CHECKING

from socratic_exp.core.metrics import MetricsSink, resumed_metrics
from socratic_exp.loggers.base import Logger

if TYPE_CHECKING:
    from socratic_exp.runtime.stages.build import Run


def evaluate_before(run: Run) -> None:
    """The evaluator, the guard and the metrics file; then the held-out evaluation before training, once (a resumed
    run has it already and continues its metrics file without the lines logged after its checkpoint), unless the
    run's vLLM engine is still to start."""
    from socratic_exp.runtime.evaluation import CollapseGuard, Evaluator

    cfg, c, job = run.cfg, run.components, run.job
    run.evaluator = Evaluator(c.task, run.bench.splits["eval"], c.eval, c.teacher if c.teacher.present else None)
    run.guard = CollapseGuard(cfg.objective, c.eval.collapse_margin, c.eval.collapse_patience, c.model.lora.enabled)
    evaluated = "initial" in run.record.data  # an earlier attempt got past this evaluation
    metrics_file = resumed_metrics(job.run_dir, run.checkpoint, evaluated=evaluated, writes=job.is_main)
    run.sink = MetricsSink(metrics_file, run.tracker or Logger(), run.display.observe)
    if not generates_with_vllm(run):
        evaluate_initial(run)


def generates_with_vllm(run: Run) -> bool:
    """Whether the trainer starts a vLLM engine in this process, which evaluations then generate with."""
    algorithm = run.components.algorithm
    return bool(getattr(algorithm, "use_vllm", False)) and getattr(algorithm, "vllm_mode", "") == "colocate"


def evaluate_initial(run: Run) -> None:
    """The held-out evaluation before training, logged at step 0 and kept in the run record; none where an earlier
    attempt of the run made it."""
    from socratic_exp.runtime.evaluation import TRAIN_SECONDS, TRAIN_TOKENS

    c, student = run.components, run.bench.student
    if "initial" in run.record.data:
        return
    initial = run.evaluator.evaluate(student, stage="before training", assisted=c.eval.assisted_before_training)
    initial[TRAIN_SECONDS] = 0.0
    initial[TRAIN_TOKENS] = 0
    run.guard.observe(0, initial, student.model)
    run.sink.log_evaluation(initial, 0, c.teacher.samples())
    run.record.update(initial=initial)
