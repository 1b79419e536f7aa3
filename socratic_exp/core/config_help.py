"""What ``python -m socratic_exp --help`` lists: the configuration groups (the sweeps' internal ones apart) and, under
"Config", the composed config, each key with its help text.

Hydra's own listing prints the composed config without a word about any key (OmegaConf drops YAML comments). Here
every key of a chosen option gets the help text its dataclass field declares (``setting(..., help=...)``, the same
words as its YAML comment) and its bounds; the top-level keys get theirs from ``TOP_LEVEL_HELP``. The option
classes are imported, never instantiated: their modules import no torch, transformers, trl or wandb.
"""

from __future__ import annotations

import dataclasses
import importlib
import typing
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from socratic_exp.core.component import Component, _nested_component

# the keys of conf/config.yaml outside any option (the same words as their YAML comments)
TOP_LEVEL_HELP = {
    "seed": "the run's seed (transformers.set_seed; teachers and tasks get it as ${seed}); sweep it for replicates",
    "resume": "null: a fresh run | auto: continue the latest interrupted run with the same overrides | a run folder",
    "dry_run": "validate the config and the machine, print each process's memory, exit before anything loads",
    "objective": "the final metric returned to Hydra sweepers (e.g. Optuna)",
    "save_final_model": "save the final weights (the best ones after a collapse stop) to checkpoints/final",
    "verbose": "true: TRL's progress bar and per-step metric dictionaries on the console (always in the log file)",
}
# top-level blocks without a _target_ that an option class still describes
SECTIONS = {"eval": "socratic_exp.runtime.evaluation.EvalSettings", "axes": "socratic_exp.multirun.grid.SweepAxes"}
BOUND_WORDS = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}


def annotated_config(root: DictConfig) -> str:
    """The composed config (``hydra`` aside, interpolations as written) as YAML with a help comment on each key."""
    lines: list[str] = []
    for key in root:
        if key == "hydra":
            continue
        node = root._get_node(key)
        value = OmegaConf.to_container(node, resolve=False) if OmegaConf.is_config(node) else node._value()
        if isinstance(value, dict) and ("_target_" in value or key in SECTIONS):
            cls = _option_class(value.get("_target_") or SECTIONS[str(key)])
            lines += _block(str(key), value, cls, 0, _class_help(cls, value.get("_target_")))
        else:
            lines += _leaf(str(key), value, 0, TOP_LEVEL_HELP.get(str(key), ""))
    return "\n".join(lines)


def field_comment(field: dataclasses.Field) -> str:
    """A field's help text, with its bounds: ``optimizer steps [>= 1]``."""
    bounds = field.metadata.get("bounds") or {}
    shown = ", ".join(f"{BOUND_WORDS[name]} {bound}" for name, bound in bounds.items())
    help_text = field.metadata.get("help", "")
    return f"{help_text} [{shown}]" if shown else help_text


def _block(key: str, value: dict[str, Any], cls: type | None, indent: int, comment: str) -> list[str]:
    lines = [_with_comment(" " * indent + f"{key}:", comment)]
    fields = {f.name: f for f in dataclasses.fields(cls)} if cls is not None else {}
    hints = _hints(cls)
    for name, item in value.items():
        field = fields.get(name)
        nested = _nested_component(hints[name]) if name in hints else None
        if nested is not None and isinstance(item, dict):  # a nested block of settings (e.g. entropy_mask)
            lines += _block(name, item, nested, indent + 2, field_comment(field) if field else "")
            continue
        help_text = "the option's class" if name == "_target_" else field_comment(field) if field else ""
        lines += _leaf(name, item, indent + 2, help_text)
    return lines


def _leaf(key: str, value: Any, indent: int, comment: str) -> list[str]:
    rendered = yaml.dump({key: value}, Dumper=_Dumper, sort_keys=False, width=10_000).rstrip("\n").split("\n")
    pad = " " * indent
    return [_with_comment(pad + rendered[0], comment), *(pad + line for line in rendered[1:])]


def _with_comment(line: str, comment: str) -> str:
    return f"{line:<40}  # {comment}" if comment else line


def _option_class(target: str) -> type | None:
    module, _, name = str(target).rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except Exception:  # the run reports a bad _target_ in one line; --help still lists the rest
        return None
    return cls if isinstance(cls, type) and issubclass(cls, Component) else None


def _class_help(cls: type | None, target: str | None) -> str:
    if cls is None:
        return str(target or "")
    doc = cls.__doc__ or ""
    first = "" if doc.startswith(f"{cls.__name__}(") else doc.strip().split("\n")[0]  # not dataclass's signature
    return f"{cls.__module__}.{cls.__qualname__}" + (f": {first.replace('``', '')}" if first else "")


def _hints(cls: type | None) -> dict[str, Any]:
    if cls is None:
        return {}
    try:
        return typing.get_type_hints(cls)
    except Exception:
        return {}


class _Dumper(yaml.SafeDumper):
    """YAML as a person writes it: multi-line strings (prompt templates) as ``|`` blocks, not folded quotes."""


def _represent_str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


_Dumper.add_representer(str, _represent_str)


def help_resolver(*, _root_: DictConfig) -> str:
    """``${sx_config_help:}`` in ``hydra.help.template``; ``$`` doubled for Hydra's string.Template."""
    return annotated_config(_root_).replace("$", "$$")


def config_groups(conf: Path) -> dict[str, list[str]]:
    """Each config group under ``conf`` (nested ones as ``group/sub``) with its options, as Hydra names them."""
    groups: dict[str, list[str]] = {}
    for folder in sorted(p for p in conf.rglob("*") if p.is_dir() and p.relative_to(conf).parts[0] != "hydra"):
        options = sorted(f.stem for f in folder.glob("*.yaml"))
        if options:
            groups[folder.relative_to(conf).as_posix()] = options
    return groups


def sweep_arm_groups(conf: Path, sweeps: Path) -> dict[str, list[str]]:
    """The groups only the paper sweeps choose (each job gets one arm): absent from ``config.yaml``'s defaults and
    added by a sweep's grid (``+group: a,b`` under ``hydra.sweeper.params``); each with the sweeps that choose it."""
    defaults = yaml.safe_load((conf / "config.yaml").read_text())["defaults"]
    default_groups = {next(iter(entry)).split(" ")[-1] for entry in defaults if isinstance(entry, dict)}
    arms: dict[str, list[str]] = {}
    for sweep in sorted(sweeps.glob("*.yaml")):
        params = (yaml.safe_load(sweep.read_text()).get("hydra") or {}).get("sweeper", {}).get("params") or {}
        for key in params:
            group = str(key).lstrip("+")
            if str(key).startswith("+") and group not in default_groups and (conf / group).is_dir():
                arms.setdefault(group, []).append(sweep.stem)
    return arms


def groups_help(conf: Path, sweeps: Path) -> str:
    """The groups a user composes a run from, then the sweeps' arm groups apart."""
    arms = sweep_arm_groups(conf, sweeps)
    lines, internal = [], []
    for group, options in config_groups(conf).items():
        arm_of = arms.get(group.split("/")[0])
        line = f"{group}: {', '.join(options)}"
        if arm_of:
            internal.append(f"{line}   (+sweep={' / '.join(arm_of)})")
        else:
            lines.append(line)
    return "\n".join(
        [*lines, "", "Sweep arms (internal: each job of a paper sweep gets one, the sweep chooses it):", *internal]
    )
