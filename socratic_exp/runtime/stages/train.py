"""Stage 4 of a run: the algorithm's TRL trainer with the run's callbacks, trained from the latest checkpoint if any."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from socratic_exp.core import distributed

if TYPE_CHECKING:
    from socratic_exp.runtime.stages.build import Run


def train(run: Run) -> Any:
    """The trainer built and trained; the student afterwards holds the trained model. Returns the trainer."""
    from socratic_exp.core.progress_callbacks import drop_trainer_printing
    from socratic_exp.models.generation import decoding_dtype
    from socratic_exp.models.vllm_engine import VLLMEngine
    from socratic_exp.runtime.assembly import build_trainer
    from socratic_exp.runtime.callbacks import RunCallbacks
    from socratic_exp.runtime.stages.evaluate_before import evaluate_initial

    c, job, student = run.components, run.job, run.bench.student
    run.callbacks = RunCallbacks(c, run.sink, run.evaluator, student, run.guard, run.display, run.tracker)
    trainer = build_trainer(run.bench, job.run_dir, run_name=run.name, seed=run.cfg.seed, callbacks=run.callbacks.all,
                            report_to=c.logger.report_to() if job.is_main else [], sink=run.sink)  # fmt: skip
    student.engine = VLLMEngine.of(trainer)  # evaluations generate with the run's vLLM engine, if any
    run.record.update(evaluation_generation="vllm" if student.engine else "transformers",
                      evaluation_dtype=decoding_dtype(student))  # fmt: skip
    evaluate_initial(run)  # where the engine had to start first (stage 3 made it otherwise)
    drop_trainer_printing(trainer)  # our progress line instead (verbose=true keeps transformers' own)
    run.record.update(launch=distributed.launch_layout(trainer))
    trainer.train(resume_from_checkpoint=run.checkpoint)
    student.model = trainer.accelerator.unwrap_model(trainer.model)
    return trainer
