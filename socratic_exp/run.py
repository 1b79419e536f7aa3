"""One run, as five stages: compose and validate, build, evaluate before training, train, evaluate after and write.

``run_job`` is what the Hydra app calls. Every failure ends the same way (``lifecycle.end_failed``): ``summary.json``
says ``failed`` with the error (and its traceback, for bugs), W&B is closed with a non-zero exit code, and one line
on stderr says what went wrong; a single run then exits non-zero, while in ``-m`` the sweep goes on with its other
jobs.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from socratic_exp.core import distributed
from socratic_exp.core.checkpoints import last_checkpoint
from socratic_exp.core.console import quiet_console, result_table, run_console
from socratic_exp.core.run_folder import MetricsSink, RunRecord, release_run_folder, resumed_metrics, run_name
from socratic_exp.loggers.base import Logger
from socratic_exp.runtime.compose import compose_and_validate, finished_in_sweep
from socratic_exp.runtime.lifecycle import (
    Job,
    closed_on_failure,
    end_failed,
    guard_process,
    sigterm_as_interrupt,
    start_tracker,
)
from socratic_exp.runtime.requirements import dry_run

if TYPE_CHECKING:
    from socratic_exp.core.console import ProgressDisplay
    from socratic_exp.runtime.assembly import Components, Workbench
    from socratic_exp.runtime.callbacks import RunCallbacks
    from socratic_exp.runtime.evaluation import CollapseGuard, Evaluator

log = logging.getLogger("socratic_exp")


def run_job(cfg: DictConfig) -> float | None:
    job = Job.current()
    # a sweep's job: the launcher prints its start and end, the job's own lines go to its log file
    try:
        with quiet_console(job.multirun), sigterm_as_interrupt():
            return _run_job(cfg, job)
    finally:
        release_run_folder(job.run_dir)  # claimed when Hydra first wrote into it (core.config's _output_subdir)


def _run_job(cfg: DictConfig, job: Job) -> float | None:
    guard_process(job)  # before anything reads the config: other ranks quiet, secrets kept out of every file
    record: RunRecord | None = None
    config: Any = {}
    try:
        config = OmegaConf.to_container(cfg, resolve=True)
        components, record = compose_and_validate(cfg, config, job)  # stage 1
        if finished_in_sweep(record, job):  # a resumed sweep skips its completed jobs
            log.info("%s already completed; nothing to resume", job.run_dir)
            return record.previous.get("objective")
        if cfg.dry_run:
            return dry_run(components, job)
        record.save()
        return train_and_evaluate(Run(cfg, job, components, record))
    except (KeyboardInterrupt, Exception) as err:  # report every failure the same way
        end_failed(job, record, config, err)  # exits, unless the run is a sweep's job
        return None


@dataclasses.dataclass
class Run:
    """What the stages hand on to each other: the job and its checked config, then what ``build`` makes."""

    cfg: DictConfig
    job: Job
    components: Components
    record: RunRecord
    display: ProgressDisplay | None = None
    tracker: Logger | None = None  # the main process's logger: it speaks for the run
    sink: MetricsSink | None = None
    checkpoint: str | None = None  # the latest readable checkpoint, which training resumes from
    name: str = ""
    bench: Workbench | None = None
    evaluator: Evaluator | None = None
    guard: CollapseGuard | None = None
    callbacks: RunCallbacks | None = None


def train_and_evaluate(run: Run) -> float:
    """Stages 2 to 5, the heavy part of a run (they import torch, transformers and TRL)."""
    with closed_on_failure(run):
        build(run)
        evaluate_before(run)
        trainer = train(run)
        return evaluate_after_and_write(run, trainer)


def build(run: Run) -> None:
    """Stage 2: the console, the metrics file (continued by a resumed run) and the tracker; then the teacher checked,
    the student and data loaded, the evaluator and the collapse guard."""
    from transformers import set_seed

    from socratic_exp.models.base import announce_load
    from socratic_exp.runtime.assembly import workbench
    from socratic_exp.runtime.evaluation import CollapseGuard, Evaluator

    cfg, c, job = run.cfg, run.components, run.job
    # in a sweep the jobs' progress goes to their log files; the launcher prints a line per job start and end
    console, verbose = job.is_main and not job.multirun, bool(cfg.get("verbose"))
    run.display = run_console(str(cfg.objective), console=console, verbose=verbose)
    set_seed(cfg.seed)
    run.checkpoint = last_checkpoint(job.run_dir, writes=job.is_main)
    evaluated = "initial" in run.record.data  # an earlier attempt got past the first evaluation
    metrics_file = resumed_metrics(job.run_dir, run.checkpoint, evaluated=evaluated, writes=job.is_main)
    run.name = run_name(c.choices, job.overrides)
    run.tracker = c.logger if job.is_main else None
    run.sink = MetricsSink(metrics_file, run.tracker or Logger(), run.display.observe)
    if job.is_main:
        start_tracker(cfg, c, job, run.record, run.name, run.checkpoint)
    c.teacher.preflight()  # a teacher server that does not answer fails the run before anything loads
    loading = time.monotonic()
    run.bench = workbench(c)
    if job.is_main:
        announce_load(run.bench.student, time.monotonic() - loading)
    run.evaluator = Evaluator(c.task, run.bench.splits["eval"], c.eval, c.teacher if c.teacher.present else None)
    run.guard = CollapseGuard(cfg.objective, c.eval.collapse_margin, c.eval.collapse_patience, c.model.lora.enabled)
    distributed.join()


def evaluate_before(run: Run) -> None:
    """Stage 3: the held-out evaluation before training, once (a resumed run has it already)."""
    from socratic_exp.runtime.evaluation import TRAIN_SECONDS

    if "initial" in run.record.data:
        return
    student, c = run.bench.student, run.components
    initial = run.evaluator.evaluate(student, stage="before training", assisted=c.eval.assisted_before_training)
    initial[TRAIN_SECONDS] = 0.0
    run.sink.log_evaluation(initial, 0, c.teacher.samples())
    run.record.update(initial=initial)
    run.guard.observe(0, initial, student.model)


def train(run: Run) -> Any:
    """Stage 4: the algorithm's TRL trainer with the run's callbacks, trained from the latest checkpoint if any."""
    from socratic_exp.core.progress_callbacks import drop_trainer_printing
    from socratic_exp.runtime.assembly import build_trainer
    from socratic_exp.runtime.callbacks import RunCallbacks

    c, job, student = run.components, run.job, run.bench.student
    run.callbacks = RunCallbacks(c, run.sink, run.evaluator, student, run.guard, run.display, run.tracker)
    trainer = build_trainer(run.bench, job.run_dir, run_name=run.name, seed=run.cfg.seed, callbacks=run.callbacks.all,
                            report_to=c.logger.report_to() if job.is_main else [], sink=run.sink)  # fmt: skip
    drop_trainer_printing(trainer)  # our progress line instead (verbose=true keeps transformers' own)
    run.record.update(launch=distributed.launch_layout(trainer))
    trainer.train(resume_from_checkpoint=run.checkpoint)
    student.model = trainer.accelerator.unwrap_model(trainer.model)
    return trainer


def evaluate_after_and_write(run: Run, trainer: Any) -> float:
    """Stage 5: the final evaluation (after a collapse, of the best weights), the final model if asked for, and the
    run folder's summary, learning curves and result table."""
    from socratic_exp.models.base import save_final_model
    from socratic_exp.runtime.evaluation import TRAIN_SECONDS
    from socratic_exp.study.curves import plot_learning_curves

    cfg, c, job, student = run.cfg, run.components, run.job, run.bench.student
    step = trainer.state.global_step
    final = run.guard.final(step, run.evaluator, student)
    final[TRAIN_SECONDS] = round(run.callbacks.clock.seconds, 3)
    run.sink.log_evaluation(final, step, c.teacher.samples())
    if cfg.save_final_model:
        save_final_model(trainer, student, c.model.lora, job.run_dir / "checkpoints" / "final")
    objective = final[cfg.objective]
    if job.is_main:
        run.record.complete(objective, final=final, steps=step, train=run.callbacks.metrics.last_logs,
                            choices=c.choices, student=student.info, collapse=run.guard.summary(),
                            peak_memory=distributed.peak_memory())  # fmt: skip
        plot_learning_curves(run.sink.file.read(), job.run_dir / "learning_curves.png")
        c.logger.finish(0, summary={"objective": objective, **final})
        before = run.record.data.get("initial", {})
        log.info("held-out results in %s\n%s", job.run_dir, result_table(before, final, c.eval.assisted_attempts))
    return objective
