"""``hydra/launcher=slurm``: hydra-submitit-launcher's SLURM launcher, whose jobs can each be several processes.

A SLURM task of the plugin runs its job in the task's own process. With ``processes_per_job`` > 1 (or an
``accelerate_config``) the task instead starts the job as a single-machine ``torchrun`` / ``accelerate launch`` over
the GPUs SLURM gave it, as the local launcher does (``socratic_exp.multirun.processes.run_job_processes``), and returns
rank 0's result: one SLURM task per job, the launch tool making the ranks. ``tasks_per_node`` ranks made by SLURM itself
would need every rank's ``RANK`` / ``MASTER_ADDR`` exported from SLURM's variables before accelerate reads them, and
would get DDP only, where ``accelerate launch`` also configures DeepSpeed and FSDP from a profile.

``hydra/launcher=socratic_exp_submitit_local`` is the same launcher on submitit's local executor: the SLURM job's
path (pickled launcher, a task process, its launch of N processes) on this machine, without a cluster.

The plugin is the optional extra ``.[slurm]``; without it this module defines nothing (Hydra imports every module
under ``hydra_plugins`` at start-up, and would warn about a failed import on every command).
"""

# no ``from __future__ import annotations``: Hydra executes plugin modules before they are in ``sys.modules``, where
# dataclasses cannot resolve string annotations
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is not None:
    from dataclasses import dataclass
    from typing import Optional

    from hydra.core.config_store import ConfigStore
    from hydra.core.utils import JobReturn
    from hydra_plugins.hydra_submitit_launcher import config as submitit_config
    from hydra_plugins.hydra_submitit_launcher import submitit_launcher as submitit_base

    class MultiProcessJobs:
        """The submitit launchers' behaviour, with a job that can be a multi-process launch on its node."""

        def __init__(self, processes_per_job: int = 1, accelerate_config: str | None = None, **params: Any) -> None:
            super().__init__(**params)  # submitit's launcher: its own keys only (it passes them all to submitit)
            self.processes_per_job = processes_per_job
            self.accelerate_config = accelerate_config
            self.process_launch: Any = None

        def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
            """Check the settings in the submitting process (one line and exit 2, nothing submitted), then submit
            the jobs without the command line's secrets in what submitit pickles (they reach the jobs through their
            environment: ``socratic_exp.multirun.job_secrets.submitted_without_secrets``)."""
            from socratic_exp.core.secrets import scrub_hydra_files
            from socratic_exp.multirun.job_secrets import submitted_without_secrets, sweep_secrets
            from socratic_exp.multirun.settings import LauncherSettingError
            from socratic_exp.multirun.slurm import check_submitit_job

            # multirun.yaml holds the command line: scrubbed now, not at the sweep's end (SLURM jobs can take days)
            scrub_hydra_files(Path(str(self.config.hydra.sweep.dir)), sweep_secrets(self.config, job_overrides))
            try:
                self.process_launch = check_submitit_job(self.processes_per_job, self.accelerate_config, self.params)
                with submitted_without_secrets(self, job_overrides) as overrides:
                    return super().launch(overrides, initial_job_idx)
            except LauncherSettingError as err:
                print(f"error: {err}", file=sys.stderr)
                sys.exit(2)

        def __call__(
            self, sweep_overrides: list[str], job_dir_key: str, job_num: int, job_id: str, singleton_state: Any
        ) -> JobReturn:
            """In the SLURM task: the job itself (one process), or its launch of ``processes_per_job`` processes.
            Its secrets came in its environment: they reach neither the task's log nor its console."""
            from socratic_exp.core.secrets import protect_console

            protect_console([])
            if self.process_launch is None or not self.process_launch.distributed:
                return super().__call__(sweep_overrides, job_dir_key, job_num, job_id, singleton_state)
            from socratic_exp.multirun.slurm import run_submitted_job

            return run_submitted_job(self, self.process_launch, sweep_overrides, job_num, singleton_state)

    class SlurmLauncher(MultiProcessJobs, submitit_base.SlurmLauncher):
        """``hydra/launcher=slurm``: each job a SLURM array task, one process or a launch of several."""

    class SubmititLocalLauncher(MultiProcessJobs, submitit_base.LocalLauncher):
        """``hydra/launcher=socratic_exp_submitit_local``: the same jobs on submitit's local executor."""

    _BASE, _SLURM = submitit_config.BaseQueueConf, submitit_config.SlurmQueueConf

    @dataclass
    class CountedSettings:
        """The plugin's numeric keys, typed ``Any``: OmegaConf's own check of an ``int`` key (``Value 'x' could not
        be converted to Integer``) says neither the allowed range nor the fix; ``check_submitit_job`` checks them all
        before anything is submitted, in one line naming the key, its value, the range and the fix."""

        timeout_min: Any = _BASE.timeout_min
        cpus_per_task: Any = _BASE.cpus_per_task
        gpus_per_node: Any = _BASE.gpus_per_node
        tasks_per_node: Any = _BASE.tasks_per_node
        mem_gb: Any = _BASE.mem_gb
        nodes: Any = _BASE.nodes
        processes_per_job: Any = 1  # > 1: each job a torchrun / accelerate launch of that many processes

    @dataclass
    class SlurmConf(CountedSettings, submitit_config.SlurmQueueConf):
        """The plugin's SLURM keys (partition, account, ...) and ours; ``conf/hydra/launcher/slurm.yaml`` sets
        the values."""

        _target_: str = "hydra_plugins.socratic_exp_launcher.submitit_launcher.SlurmLauncher"
        cpus_per_gpu: Any = _SLURM.cpus_per_gpu
        gpus_per_task: Any = _SLURM.gpus_per_task
        signal_delay_s: Any = _SLURM.signal_delay_s
        max_num_timeout: Any = _SLURM.max_num_timeout
        array_parallelism: Any = _SLURM.array_parallelism
        accelerate_config: Optional[str] = None  # noqa: UP045  # OmegaConf's dataclass types: no X | None

    @dataclass
    class SubmititLocalConf(CountedSettings, submitit_config.LocalQueueConf):
        """submitit's local executor, with our keys."""

        _target_: str = "hydra_plugins.socratic_exp_launcher.submitit_launcher.SubmititLocalLauncher"
        accelerate_config: Optional[str] = None  # noqa: UP045

    ConfigStore.instance().store(group="hydra/launcher", name="socratic_exp_slurm", node=SlurmConf())
    ConfigStore.instance().store(group="hydra/launcher", name="socratic_exp_submitit_local", node=SubmititLocalConf())
