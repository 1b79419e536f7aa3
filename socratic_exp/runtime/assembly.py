"""From a config to a trainer: the run's components built and checked (``build_components``, without heavy
imports: a wrong key or combination fails before torch loads), then the student and data a run trains on and the
trainer its algorithm builds from them (``workbench``, ``build_trainer``). The run, the tests and the benchmarks all
build through here, so they train what a run trains."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from socratic_exp.core.errors import NO_VALUE, ConfigError, UserError
from socratic_exp.runtime.evaluation import EvalSettings

if TYPE_CHECKING:
    from datasets import DatasetDict

    from socratic_exp.algorithms.base import Algorithm
    from socratic_exp.core.metrics import MetricsSink
    from socratic_exp.distillers.base import Distiller
    from socratic_exp.loggers.base import Logger
    from socratic_exp.models.base import ModelSpec, Student
    from socratic_exp.samplers.base import PromptSampler
    from socratic_exp.tasks.base import Task
    from socratic_exp.teachers.base import Teacher

GROUPS = ("task", "model", "algorithm", "teacher", "sampler", "distiller", "logger")


@dataclasses.dataclass
class Components:
    task: Task
    model: ModelSpec
    algorithm: Algorithm
    teacher: Teacher
    sampler: PromptSampler
    distiller: Distiller
    logger: Logger
    eval: EvalSettings
    choices: dict[str, str]  # the option chosen in each group, e.g. {"algorithm": "grpo"}


def build_components(cfg: DictConfig, choices: dict[str, str] | None = None) -> Components:
    """Instantiate every group's option (which checks types and ranges) and check the choices fit together."""
    choices = dict(choices or {})
    for key in sorted(OmegaConf.missing_keys(cfg)):  # a mandatory value (???) left unset
        raise ConfigError(key, NO_VALUE, "has no value", f"set it on the command line: {key}=<value>")
    _check_run_keys(cfg)  # first: options get the seed by interpolation (${seed}) and would report it as their own
    built: dict[str, Any] = {}
    for group in GROUPS:
        node = cfg.get(group)
        if node is None or "_target_" not in node:
            raise ConfigError(group, None, "no option selected", f"choose one with {group}=<option> (see --help)")
        built[group] = instantiate_option(group, node)
        choices.setdefault(group, type(built[group]).__name__)
    settings = OmegaConf.to_container(cfg.get("eval") or {}, resolve=True)
    try:
        eval_settings = EvalSettings(**settings)
    except TypeError as err:
        raise _unknown_key("eval", err, EvalSettings) from None
    components = Components(**built, eval=eval_settings, choices=choices)
    check_compatible(components)
    _check_top_level(cfg, eval_settings, components.task, has_teacher=components.teacher.present)
    return components


def instantiate_option(group: str, node: DictConfig) -> Any:
    from hydra.errors import InstantiationException
    from hydra.utils import get_class, instantiate

    target = node["_target_"]
    try:
        cls = get_class(target)
    except Exception:
        raise ConfigError(
            f"{group}._target_", target, "is not an importable class", "fix the YAML's _target_"
        ) from None
    try:
        return instantiate(node, _convert_="all")
    except InstantiationException as err:
        cause = err.__cause__
        if isinstance(cause, UserError):
            raise cause from None
        if isinstance(cause, TypeError) and "unexpected keyword argument" in str(cause):
            raise _unknown_key(group, cause, cls) from None
        raise UserError(f"{group}: could not build {target}: {cause or err}") from None


def _unknown_key(group: str, err: TypeError, cls: type) -> ConfigError:
    from socratic_exp.core.methods import moved_key
    from socratic_exp.runtime.methods import declared_methods

    key = str(err).rsplit("'", 2)[-2] if "'" in str(err) else "?"
    # a setting a method took over: where it lives now
    if (moved := moved_key(f"{group}.{key}", declared_methods())) is not None:
        return moved
    known = ", ".join(f.name for f in dataclasses.fields(cls))
    return ConfigError(f"{group}.{key}", NO_VALUE, "unknown key", f"remove it; {group} keys are: {known}")


def check_compatible(components: Components) -> None:
    """Reject choices that do not fit together, before anything loads."""
    algorithm = components.algorithm
    name = components.choices["algorithm"]
    # An algorithm that trains without a teacher still accepts one: it then serves the assisted evaluation only.
    has_teacher = components.teacher.present
    if algorithm.requires_teacher and not has_teacher:
        raise ConfigError("teacher", "none", f"algorithm={name} needs a teacher", "choose one, e.g. teacher=rule")
    if components.distiller.distills and not algorithm.uses_distiller:
        raise ConfigError(
            "distiller",
            components.choices["distiller"],
            f"algorithm={name} has no distillation phase",
            "use distiller=none, or an algorithm with one",
        )
    algorithm.check_compatible(components)


def _check_run_keys(cfg: DictConfig) -> None:
    """The top-level keys that no option's dataclass checks."""
    seed = cfg.get("seed")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ConfigError("seed", seed, "must be an integer >= 0")
    if not isinstance(cfg.get("verbose", False), bool):
        raise ConfigError("verbose", cfg.get("verbose"), "must be true or false")


def _check_top_level(cfg: DictConfig, eval_settings: EvalSettings, task: Task, has_teacher: bool) -> None:
    objective = cfg.get("objective")
    known = eval_settings.metric_names(teacher=has_teacher, parsers=task.answer_parsers)
    grouped = task.metric_group is not None  # such tasks also report <metric>/group_mean (e.g. across domains)
    base = (str(objective).removesuffix("/group_mean") if grouped else str(objective)).rsplit("/d", 1)[0]
    if base not in known:
        raise ConfigError("objective", objective, "is not a metric the evaluation reports", f"use one of {known}")
    resume = cfg.get("resume")
    if resume not in (None, "auto") and not isinstance(resume, str):
        raise ConfigError("resume", resume, "must be null, auto or a run folder")


# --- from the components to a trainer ----------------------------------------------------------------------------
@dataclasses.dataclass
class Workbench:
    """The components with their student loaded (its teacher attached) and the task's data."""

    components: Components
    splits: DatasetDict  # as the task builds them (rows with prompt, answer, ...)
    student: Student
    data: DatasetDict  # rendered for the trainer: chat messages or plain prompts, as evaluation renders them


def workbench(components: Components) -> Workbench:
    from socratic_exp.tasks.base import render_splits

    splits = components.task.build()
    student = components.model.load(components.task)
    components.teacher.attach(components.task, student)
    data = render_splits(splits, components.task.instruction(), student.chat)
    return Workbench(components=components, splits=splits, student=student, data=data)


def build_trainer(
    bench: Workbench,
    run_dir: Path,
    *,
    run_name: str = "run",
    seed: int = 0,
    callbacks: list[Any] | None = None,
    report_to: list[str] | None = None,
    sink: MetricsSink | None = None,
) -> Any:
    """The algorithm's TRL trainer on the workbench's student and data, its checkpoints under ``run_dir``; it calls
    ``callbacks`` in their order (an algorithm may put its own first), before those it adds itself."""
    from socratic_exp.algorithms import builder
    from socratic_exp.algorithms.base import RunContext

    context = RunContext(components=bench.components, data=bench.data, student=bench.student, run_dir=run_dir,
                         run_name=run_name, seed=seed, callbacks=list(callbacks or []), report_to=report_to or [],
                         sink=sink)  # fmt: skip
    return builder(bench.components.algorithm).build(context)


def trainer_from(*overrides: str, run_dir: Path | None = None) -> Any:
    """The trainer of the config that ``overrides`` compose (no run folder, logger or evaluation around it)."""
    from socratic_exp.core.config import compose

    bench = workbench(build_components(compose(*overrides)))
    return build_trainer(bench, run_dir or Path(tempfile.mkdtemp()))
