"""What a paper sweep needs of its setup, checked before any of its jobs starts.

A sweep file (``sweeps/<name>.yaml``) varies axes (and seeds); the setup (model, task, teacher, scale) is the
testbed's when no overlay is given, else the experiment overlay's (``experiment=<name>``). Its ``grid`` block says
what it needs of that setup:

- ``algorithms``: the methods whose ablation it is (a method and its presets, such as an official-code preset); an
  overlay made for another method, or another method chosen on the command line, is refused (its method settings
  would not apply). Empty: any setup.
- ``axes``: setup-specific axes, read from ``axes.<name>`` (``conf/config.yaml`` holds the testbed's values, which
  assume the testbed's arithmetic task: the rule teacher diagnoses arithmetic). An overlay that changes the task must
  give them (``axes.teachers: qwen27b,llm``), or the pair is refused.
- ``testbed_only``: the sweep measures the shipped students (the evidence scoreboards); every overlay is refused.

``job_overrides`` lists the jobs a ``-m`` launch would run, as Hydra's basic sweeper expands them (the composition
matrix in the tests, the docs' commands).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any, ClassVar

from omegaconf import DictConfig, OmegaConf

from socratic_exp.core.component import Component, setting
from socratic_exp.core.config import config_dir, sweeps_dir
from socratic_exp.core.errors import UserError

AXES_KEY = "axes"


@dataclasses.dataclass(kw_only=True)
class SweepAxes(Component):
    """The ``axes`` block (``--help`` reads its keys' help here): the setup-specific values of the paper sweeps' axes,
    comma-separated as a sweep axis is."""

    config_group: ClassVar[str] = "axes"

    teachers: str = setting(
        "", "the teacher axis: the setup's teacher, then self-guidance (llm: the student's own weights)"
    )
    algorithms: str = setting("", "the algorithm axis of the sampler comparison")
    samplers: str = setting("", "the sampler axis: the baseline, then the method")
    feedback_arms: str = setting(
        "", "the arms of the feedback-source ablation (the teacher-critique arms: the rule teacher)"
    )


@dataclasses.dataclass(frozen=True)
class Grid:
    """A sweep file's ``grid`` block (see the module docstring)."""

    name: str
    algorithms: tuple[str, ...] = ()
    axes: tuple[str, ...] = ()
    testbed_only: bool = False

    @classmethod
    def load(cls, name: str) -> Grid:
        path = sweeps_dir() / f"{name}.yaml"
        block = OmegaConf.to_container(OmegaConf.load(path)).get("grid") or {}  # type: ignore[union-attr]
        return cls(
            name, tuple(block.get("algorithms", ())), tuple(block.get("axes", ())), block.get("testbed_only", False)
        )


@functools.cache
def overlay(name: str) -> tuple[dict[str, str], dict[str, Any]]:
    """An experiment overlay's group choices (its defaults list's ``override /<group>: <option>``) and its keys."""
    data = OmegaConf.to_container(OmegaConf.load(config_dir() / "experiment" / f"{name}.yaml"))
    choices = {}
    for entry in data.pop("defaults", None) or []:  # type: ignore[union-attr]
        if isinstance(entry, dict):
            for key, option in entry.items():
                choices[key.removeprefix("override").strip().lstrip("/")] = str(option)
    return choices, data  # type: ignore[return-value]


def _task_target(option: str) -> str:
    return str(OmegaConf.load(config_dir() / "task" / f"{option}.yaml").get("_target_"))


def _default_choice(group: str) -> str:
    for entry in OmegaConf.load(config_dir() / "config.yaml").defaults:
        if isinstance(entry, DictConfig) and group in entry:
            return str(entry[group])
    raise KeyError(group)


def check_setup(
    sweep: str, experiment: str | None, overrides: Sequence[str] = (), algorithm: str | None = None
) -> None:
    """Refuse, in one line naming both, a sweep over an overlay it makes no sense on (see the module docstring).
    ``overrides``: the command line's, whose ``axes.<name>=...`` gives an axis as an overlay would; ``algorithm``:
    the method the jobs compose to (the overlay's, or the command line's)."""
    grid = Grid.load(sweep)
    if experiment in (None, "", "None", "null"):
        if grid.algorithms and algorithm is not None and algorithm not in grid.algorithms:
            raise UserError(
                f"+sweep={sweep} with algorithm={algorithm}: the sweep ablates "
                + " or ".join(f"algorithm={a}" for a in grid.algorithms),
                f"drop algorithm={algorithm}, or choose algorithm={grid.algorithms[0]}",
            )
        return
    pair = f"+sweep={sweep} with experiment={experiment}"
    if grid.testbed_only:
        raise UserError(
            f"{pair}: the sweep measures the testbed's shipped students, the overlay is another setup",
            f"run +sweep={sweep} without experiment=",
        )
    choices, keys = overlay(experiment)
    method = choices.get("algorithm")
    if grid.algorithms and method is not None and method not in grid.algorithms:
        ours = " or ".join(f"algorithm={a}" for a in grid.algorithms)
        raise UserError(
            f"{pair}: the sweep ablates {ours}, the overlay is a setup for algorithm={method}",
            f"run +sweep={sweep} without experiment=, or with an overlay for {grid.algorithms[0]}",
        )
    given = set(keys.get(AXES_KEY) or {})
    typed = (o.split("=", 1)[0].lstrip("+") for o in overrides if "=" in o)
    given |= {key.removeprefix(f"{AXES_KEY}.") for key in typed if key.startswith(f"{AXES_KEY}.")}
    testbed_task = "task" not in choices or _task_target(choices["task"]) == _task_target(_default_choice("task"))
    missing = [axis for axis in grid.axes if axis not in given]
    if missing and not testbed_task:
        axis = missing[0]
        raise UserError(
            f"{pair}: the overlay gives no values for the sweep's setup-specific axis {AXES_KEY}.{axis} (the "
            f"testbed's, '{OmegaConf.select(OmegaConf.load(config_dir() / 'config.yaml'), f'{AXES_KEY}.{axis}')}', "
            f"are for task={_default_choice('task')})",
            f"set {AXES_KEY}.{axis}=<values> on the command line, or in conf/experiment/{experiment}.yaml",
        )


def job_overrides(*overrides: str) -> list[list[str]]:
    """The jobs of ``python -m socratic_exp -m <overrides>`` (a ``+sweep=`` among them), each as its overrides,
    expanded as Hydra's basic sweeper does: the sweep file's params (setup-specific axes resolved), then the command
    line's own sweeps, their product in Hydra's order."""
    from hydra import compose, initialize_config_dir
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from socratic_exp.core.config import register_resolvers, register_sweeps

    register_resolvers()
    register_sweeps()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose(config_name="config", overrides=list(overrides), return_hydra_config=True)
    params = OmegaConf.to_container(cfg.hydra.sweeper.params or {}, resolve=True)
    arguments = [f"{key}={value}" for key, value in params.items()] + list(overrides)  # type: ignore[union-attr]
    parsed = OverridesParser.create().parse_overrides(arguments)
    (batch,) = BasicSweeper.split_arguments(parsed, max_batch_size=None)
    return [list(job) for job in batch]
