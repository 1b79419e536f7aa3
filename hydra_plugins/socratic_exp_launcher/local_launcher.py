"""``hydra/launcher=local``: Hydra finds launcher plugins only in the ``hydra_plugins`` namespace, so the class lives
here; the work is in ``socratic_exp.multirun.local``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class LocalLauncher(Launcher):
    """joblib-scheduled jobs, each in its own fresh process or multi-process launch
    (``socratic_exp.multirun.local``)."""

    def __init__(
        self,
        n_jobs: int | None = None,
        threads_per_job: int | None = None,
        gpus_per_job: int | None = None,
        timeout: float | None = None,
        processes_per_job: int = 1,
        accelerate_config: str | None = None,
    ) -> None:
        self.n_jobs = n_jobs
        self.threads_per_job = threads_per_job
        self.gpus_per_job = gpus_per_job  # None: one per process of a job
        self.timeout = timeout
        self.processes_per_job = processes_per_job  # > 1: each job a torchrun / accelerate launch of that many
        self.accelerate_config = accelerate_config  # set: jobs start with accelerate launch --config_file <it>
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.task_function = task_function
        self.hydra_context = hydra_context

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from socratic_exp.multirun.local import launch

        result: Any = launch(self, job_overrides, initial_job_idx)
        return result
