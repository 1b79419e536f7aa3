"""One run: validate, then build the components, train, evaluate and write the run folder.

``run_job`` is what the Hydra app calls. Every failure ends the same way (``lifecycle.end_failed``): ``summary.json``
says ``failed`` with the error (and its traceback, for bugs), W&B is closed with a non-zero exit code, and one line
on stderr says what went wrong; a single run then exits non-zero, while in ``-m`` the sweep goes on with its other
jobs.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from omegaconf import DictConfig, OmegaConf

from socratic_exp import distributed
from socratic_exp.assembly import Components
from socratic_exp.checkpoints import last_checkpoint
from socratic_exp.console import drop_trainer_printing, quiet_console, result_table, run_console, say_last
from socratic_exp.lifecycle import (
    Job,
    check_run_folder,
    closed_on_failure,
    end_failed,
    guard_process,
    sigterm_as_interrupt,
    start_tracker,
    validate,
)
from socratic_exp.loggers.base import Logger
from socratic_exp.run_folder import (
    MetricsSink,
    RunRecord,
    release_run_folder,
    resumed_metrics,
    run_name,
)

log = logging.getLogger("socratic_exp")


def run_job(cfg: DictConfig) -> float | None:
    job = Job.current()
    # a sweep's job: the launcher prints its start and end, the job's own lines go to its log file
    try:
        with quiet_console(job.multirun), sigterm_as_interrupt():
            return _run_job(cfg, job)
    finally:
        release_run_folder(job.run_dir)  # claimed when Hydra first wrote into it (hydra_support._output_subdir)


def _run_job(cfg: DictConfig, job: Job) -> float | None:
    guard_process(job)  # before anything reads the config: other ranks quiet, secrets kept out of every file
    record: RunRecord | None = None
    config: Any = {}
    try:
        config = OmegaConf.to_container(cfg, resolve=True)
        components = validate(cfg, job)
        record = RunRecord(job.run_dir, config, job.overrides, writes=job.is_main)
        if record.previous.get("status") == "completed" and job.multirun:  # a resumed sweep skips its completed jobs
            log.info("%s already completed; nothing to resume", job.run_dir)
            return record.previous.get("objective")
        check_run_folder(record, job)  # nothing in the folder is rewritten before it passes (a dry run checks it too)
        if cfg.dry_run:
            from socratic_exp.models.memory import launch_settings, plan_memory

            components.teacher.preflight()  # a teacher server that does not answer, as the run checks it
            if job.is_main:  # what each process will hold, read from the model's config (no weights loaded)
                plan = plan_memory(components, **launch_settings()).table()
                if job.multirun:  # a sweep's job: its log file (the console keeps one line a job)
                    log.info("%s", plan)
                else:
                    say_last(plan, logging.INFO, sys.stdout)
            say_last(f"config OK: {' '.join(f'{g}={c}' for g, c in job.choices.items())}", logging.INFO, sys.stdout)
            return None
        record.save()
        return train_and_evaluate(cfg, components, record, job)
    except (KeyboardInterrupt, Exception) as err:  # report every failure the same way
        end_failed(job, record, config, err)  # exits, unless the run is a sweep's job
        return None


def train_and_evaluate(cfg: DictConfig, c: Components, record: RunRecord, job: Job) -> float:
    """The heavy part of a run (imports torch, transformers and TRL)."""
    from transformers import set_seed

    from socratic_exp.assembly import build_trainer, workbench
    from socratic_exp.callbacks import TRAIN_SECONDS, CollapseGuard, RunCallbacks, announce_load, save_final_model
    from socratic_exp.evaluation import Evaluator
    from socratic_exp.study.curves import plot_learning_curves

    # in a sweep the jobs' progress goes to their log files; the launcher prints a line per job start and end
    display = run_console(
        str(cfg.objective), console=job.is_main and not job.multirun, verbose=bool(cfg.get("verbose", False))
    )
    set_seed(cfg.seed)
    checkpoint = last_checkpoint(job.run_dir, writes=job.is_main)  # the latest readable one
    # an earlier attempt that got past the first evaluation goes on from its checkpoint
    metrics_file = resumed_metrics(job.run_dir, checkpoint, evaluated="initial" in record.data, writes=job.is_main)
    name = run_name(c.choices, job.overrides)
    tracker = c.logger if job.is_main else None  # the main process speaks for the run
    sink = MetricsSink(metrics_file, tracker or Logger(), display.observe)
    if job.is_main:
        start_tracker(cfg, c, job, record, name, checkpoint)
    with closed_on_failure(display, tracker, c.teacher):
        c.teacher.preflight()  # a teacher server that does not answer fails the run before anything loads
        loading = time.monotonic()
        bench = workbench(c)
        student = bench.student
        if job.is_main:
            announce_load(student, time.monotonic() - loading)
        assistant = c.teacher if c.teacher.present else None
        evaluator = Evaluator(c.task, bench.splits["eval"], c.eval, assistant)
        guard = CollapseGuard(
            cfg.objective, c.eval.collapse_margin, c.eval.collapse_patience, lora=c.model.lora.enabled
        )
        distributed.join()
        if "initial" not in record.data:
            assisted = c.eval.assisted_before_training
            initial = evaluator.evaluate(student, stage="before training", assisted=assisted) | {TRAIN_SECONDS: 0.0}
            sink.log_evaluation(initial, 0, c.teacher.samples())
            record.update(initial=initial)
            guard.observe(0, initial, student.model)
        callbacks = RunCallbacks(c, sink, evaluator, student, guard, display, tracker)
        trainer = build_trainer(
            bench,
            job.run_dir,
            run_name=name,
            seed=cfg.seed,
            callbacks=callbacks.all,
            report_to=c.logger.report_to() if job.is_main else [],
            sink=sink,
        )
        drop_trainer_printing(trainer)  # our progress line instead (verbose=true keeps transformers' own)
        record.update(launch=distributed.launch_layout(trainer))
        trainer.train(resume_from_checkpoint=checkpoint)
        step = trainer.state.global_step
        student.model = trainer.accelerator.unwrap_model(trainer.model)
        final = guard.final(step, evaluator, student)
        final[TRAIN_SECONDS] = round(callbacks.clock.seconds, 3)
        sink.log_evaluation(final, step, c.teacher.samples())
        if cfg.save_final_model:
            save_final_model(trainer, student, c.model.lora, job.run_dir / "checkpoints" / "final")
        objective = final[cfg.objective]
        if job.is_main:
            record.complete(
                objective,
                final=final,
                steps=step,
                train=callbacks.metrics.last_logs,
                choices=c.choices,
                student=student.info,
                collapse=guard.summary(),
                peak_memory=distributed.peak_memory(),
            )
            plot_learning_curves(metrics_file.read(), job.run_dir / "learning_curves.png")
            c.logger.finish(0, summary={"objective": objective, **final})
            before = record.data.get("initial", {})
            log.info("held-out results in %s\n%s", job.run_dir, result_table(before, final, c.eval.assisted_attempts))
        return objective
