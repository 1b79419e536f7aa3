"""A secret given on the command line reaches each job of a sweep through the job's environment, never through a
file it reads: the local launcher's job files (``JobFiles``) and what hydra-submitit-launcher pickles into
``<sweep folder>/.submitit/`` (``submitted_without_secrets``) name it ``${oc.env:SOCRATIC_EXP_SECRET_<n>}``, and a
secret still in them is refused in one line (``refuse_leaks``) before anything is written."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from socratic_exp.core.secrets import (
    config_through_environment,
    leaked_secrets,
    secret_values,
    singleton_state_through_environment,
    through_environment,
)
from socratic_exp.multirun.settings import LauncherSettingError


def sweep_secrets(config: Any, job_overrides: Sequence[Sequence[str]]) -> list[str]:
    """The secrets of a sweep's command line: its jobs' overrides and Hydra's own (``hydra.job.env_set.<VAR>=...``)."""
    from omegaconf import OmegaConf

    hydra_overrides = OmegaConf.select(config, "hydra.overrides.hydra", default=None) or []
    return secret_values([str(o) for o in hydra_overrides] + [o for job in job_overrides for o in job])


@dataclass(frozen=True)
class JobFiles:
    """What each job of a sweep is handed: its pickled payload (the joblib launcher's ``execute_job`` arguments) and
    the environment variables that carry the command line's secrets.

    A payload is written to a file the job reads (here a temporary job file; under SLURM the plugin pickles the same
    things into a submission in the sweep folder), and holds the job's overrides, the sweep's config and Hydra's
    global state, each of which holds the command line. So a secret never goes in: it is written
    ``${oc.env:SOCRATIC_EXP_SECRET_<n>}`` (``secrets.through_environment``) and its value is put in the job's
    environment, where Hydra's ``oc.env`` resolver reads it back as the job composes its config. The job gets the
    same config; the files hold no secret.
    """

    payloads: list[bytes]
    variables: dict[str, str]

    @classmethod
    def of(cls, launcher: Any, jobs: Sequence[Sequence[str]], first_index: int, secrets: list[str]) -> JobFiles:
        """Every job's payload, checked to hold no secret: one that Hydra keeps somewhere the launcher does not clean
        is refused in one line (``LauncherSettingError``), never written."""
        import cloudpickle

        variables: dict[str, str] = {}
        config, state = without_secrets(launcher.config, variables, secrets)
        context, task = launcher.hydra_context, launcher.task_function
        payloads = [
            cloudpickle.dumps((index, through_environment(list(overrides), variables), context, config, task, state))
            for index, overrides in enumerate(jobs, start=first_index)
        ]
        for payload in payloads:
            refuse_leaks(payload, secrets, "its job files")
        return cls(payloads, variables)


def without_secrets(config: Any, variables: dict[str, str], secrets: list[str]) -> tuple[Any, Any]:
    """A sweep's config and Hydra's global state (``Singleton.get_state()``) as its jobs are handed them: without
    ``secrets``, Hydra's own overrides through the environment (``variables`` gets them; see ``JobFiles``)."""
    from hydra.core.singleton import Singleton

    clean = config_through_environment(config, variables, secrets)
    return clean, singleton_state_through_environment(Singleton.get_state(), variables, secrets)


def refuse_leaks(data: bytes, secrets: list[str], where: str) -> None:
    """One line, not a file holding a secret of the command line (``secrets.leaked_secrets``)."""
    if leaked_secrets(data, secrets):
        raise LauncherSettingError(
            f"a secret of the command line would be written into the sweep's files ({where}) (fix: give it through "
            "the environment instead: the variable its setting reads, e.g. HF_TOKEN, WANDB_API_KEY or "
            "teacher.api_key_env=<VARIABLE>)"
        )


@contextlib.contextmanager
def submitted_without_secrets(launcher: Any, job_overrides: Sequence[Sequence[str]]) -> Iterator[list[list[str]]]:
    """While hydra-submitit-launcher submits the jobs (it pickles itself, each job's overrides and Hydra's global
    state into ``<sweep folder>/.submitit/``): the launcher's config and Hydra's state without the command line's
    secrets, the jobs' overrides naming them ``${oc.env:SOCRATIC_EXP_SECRET_<n>}``, and the variables in this
    process's environment, which submitit's local executor and ``sbatch`` hand to the jobs (SLURM keeps a job's
    environment to requeue it). Yields the overrides to submit; a secret still in what will be pickled is refused in
    one line (``LauncherSettingError``) before anything is submitted."""
    import cloudpickle
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.singleton import Singleton

    secrets = sweep_secrets(launcher.config, job_overrides)
    variables: dict[str, str] = {}
    config, state = without_secrets(launcher.config, variables, secrets)
    overrides = [through_environment(list(job), variables) for job in job_overrides]
    hydra_config = HydraConfig.instance()  # the plugin pickles Singleton.get_state(), taken from this one
    sweep_config, hydra_state = launcher.config, hydra_config.cfg
    earlier = {name: os.environ.get(name) for name in variables}
    launcher.config = config
    hydra_config.cfg = getattr(state["instances"].get(HydraConfig), "cfg", hydra_state)
    try:
        refuse_leaks(cloudpickle.dumps((launcher, overrides, Singleton.get_state())), secrets, ".submitit/")
        os.environ.update(variables)
        yield overrides
    finally:
        launcher.config, hydra_config.cfg = sweep_config, hydra_state
        for name, value in earlier.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
