"""Stage 5 of a run: the final evaluation, the final model if asked for, and the run folder's summary, learning
curves and result table."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from socratic_exp.core import distributed
from socratic_exp.core.console import result_table
from socratic_exp.core.run_folder import read_metrics

if TYPE_CHECKING:
    from socratic_exp.runtime.stages.build import Run

log = logging.getLogger("socratic_exp")


def evaluate_after_and_write(run: Run, trainer: Any) -> float:
    """The final evaluation (after a collapse, of the best weights), logged; the final model saved if asked for; then,
    on the main process, ``summary.json`` completed, ``learning_curves.png``, the tracker closed and the table of
    held-out results before and after. Returns the run's objective."""
    from socratic_exp.core.curves import plot_learning_curves
    from socratic_exp.models.base import save_final_model
    from socratic_exp.runtime.evaluation import TRAIN_SECONDS, TRAIN_TOKENS

    cfg, c, job, student = run.cfg, run.components, run.job, run.bench.student
    step = trainer.state.global_step
    final = run.guard.final(step, run.evaluator, student)
    collapse = run.guard.summary
    final[TRAIN_SECONDS] = round(run.callbacks.clock.seconds, 3)
    final[TRAIN_TOKENS] = int(trainer.state.num_input_tokens_seen)
    run.sink.log_evaluation(final, step, c.teacher.samples())
    if cfg.save_final_model:
        save_final_model(trainer, student, c.model.lora, job.run_dir / "checkpoints" / "final")
    objective = final[cfg.objective]
    if job.is_main:
        run.record.complete(objective, final=final, steps=step, train=run.callbacks.metrics.last_logs,
                            choices=c.choices, student=student.info, collapse=collapse,
                            peak_memory=distributed.peak_memory())  # fmt: skip
        records = read_metrics(job.run_dir)
        plot_learning_curves(records, job.run_dir / "learning_curves.png")
        c.logger.finish(0, summary={"objective": objective, **final})
        before = run.record.data.get("initial", {})
        log.info("held-out results in %s\n%s", job.run_dir, result_table(before, final, c.eval.assisted_attempts))
    return objective
