"""One run, as five stages: compose and validate, build, evaluate before training, train, evaluate after and write
(``runtime/stages/``, a module each).

``run_job`` is what the Hydra app calls. Every failure ends the same way (``lifecycle.end_failed``): ``summary.json``
says ``failed`` with the error (and its traceback, for bugs), W&B is closed with a non-zero exit code, and one line
on stderr says what went wrong; a single run then exits non-zero, while in ``-m`` the sweep goes on with its other
jobs.
"""

from __future__ import annotations

import logging
from typing import Any

from omegaconf import DictConfig, OmegaConf

from socratic_exp.core.console import quiet_console
from socratic_exp.core.run_folder import RunRecord, release_run_folder
from socratic_exp.runtime.lifecycle import (
    Job,
    closed_on_failure,
    end_failed,
    guard_process,
    sigterm_as_interrupt,
)
from socratic_exp.runtime.requirements import dry_run
from socratic_exp.runtime.stages.build import Run, build
from socratic_exp.runtime.stages.compose import compose_and_validate, finished_in_sweep
from socratic_exp.runtime.stages.evaluate_after import evaluate_after_and_write
from socratic_exp.runtime.stages.evaluate_before import evaluate_before
from socratic_exp.runtime.stages.train import train

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


def train_and_evaluate(run: Run) -> float:
    """Stages 2 to 5, the heavy part of a run (they import torch, transformers and TRL)."""
    with closed_on_failure(run):
        build(run)
        evaluate_before(run)
        trainer = train(run)
        return evaluate_after_and_write(run, trainer)
