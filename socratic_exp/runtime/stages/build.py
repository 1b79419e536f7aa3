"""Stage 2 of a run: the console and the tracker started, the teacher checked, the student and data loaded."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

from omegaconf import DictConfig

from socratic_exp.core import distributed
from socratic_exp.core.checkpoints import last_checkpoint
from socratic_exp.core.console import run_console
from socratic_exp.core.run_folder import RunRecord, run_name
from socratic_exp.loggers.base import Logger
from socratic_exp.runtime.lifecycle import Job, start_tracker

if TYPE_CHECKING:
    from socratic_exp.core.console import ProgressDisplay
    from socratic_exp.core.metrics import MetricsSink
    from socratic_exp.runtime.assembly import Components, Workbench
    from socratic_exp.runtime.callbacks import RunCallbacks
    from socratic_exp.runtime.evaluation import CollapseGuard, Evaluator


@dataclasses.dataclass
class Run:
    """What the stages hand on to each other: the job and its checked config, then what each stage makes."""

    cfg: DictConfig
    job: Job
    components: Components
    record: RunRecord
    display: ProgressDisplay | None = None  # stage 2 (build)
    tracker: Logger | None = None  # the main process's logger: it speaks for the run
    checkpoint: str | None = None  # the latest readable checkpoint, which training resumes from
    name: str = ""
    bench: Workbench | None = None
    evaluator: Evaluator | None = None  # stage 3 (evaluate before)
    guard: CollapseGuard | None = None
    sink: MetricsSink | None = None
    callbacks: RunCallbacks | None = None  # stage 4 (train)


def build(run: Run) -> None:
    """The console, the latest checkpoint and the tracker (continued by a resumed run); then the teacher checked and
    the student and data loaded."""
    from transformers import set_seed

    from socratic_exp.core.methods import signals_of
    from socratic_exp.models.base import announce_load
    from socratic_exp.runtime.assembly import workbench
    from socratic_exp.runtime.methods import declared_methods

    cfg, c, job = run.cfg, run.components, run.job
    if not (getattr(c.algorithm, "use_vllm", False) or getattr(c.teacher, "backend", "") == "vllm"):
        import_trl_without_vllm()
    # in a sweep the jobs' progress goes to their log files; the launcher prints a line per job start and end
    console, verbose = job.is_main and not job.multirun, bool(cfg.get("verbose"))
    signals = signals_of(declared_methods())
    run.display = run_console(str(cfg.objective), console=console, verbose=verbose, signals=signals)
    set_seed(cfg.seed)
    run.checkpoint = last_checkpoint(job.run_dir, writes=job.is_main)
    run.name = run_name(c.choices, job.overrides)
    run.tracker = c.logger if job.is_main else None
    if job.is_main:
        start_tracker(c, job, run.record, run.name, run.checkpoint)
    c.teacher.preflight()  # a teacher server that does not answer fails the run before anything loads
    loading = time.monotonic()
    run.bench = workbench(c)
    if job.is_main:
        announce_load(run.bench.student, time.monotonic() - loading)
    distributed.join()


def import_trl_without_vllm() -> None:
    """Import TRL's generation modules as if vLLM were absent, for a run that uses no vLLM: where vLLM is installed,
    TRL imports it with its trainers whether a run uses it or not, 5-6 s of every start on 2 cores, in each process.
    Only where TRL's generation is not imported yet; its modules keep the answer they got, so a later vLLM run in the
    same process meets TRL's own "vLLM is not available" (each command-line run is a process of its own)."""
    import importlib
    import sys

    if "trl.generation" in sys.modules:
        return
    import_utils = importlib.import_module("trl.import_utils")
    is_vllm_available = import_utils.is_vllm_available
    import_utils.is_vllm_available = lambda min_version=None: False
    try:
        importlib.import_module("trl.generation.vllm_generation")  # trl.generation.vllm_client with it
    finally:
        import_utils.is_vllm_available = is_vllm_available
