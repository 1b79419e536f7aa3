"""Each method's own modules, found in the method folders, so that shared code names no method.

A method is a folder under ``algorithms/`` or ``samplers/``. Besides its config and trainer it may hold:

- ``telemetry.py``: ``SIGNALS`` (``{metric prefix: (console.Signal, ...)}``: what the progress line shows once a
  metric with that prefix is logged), ``figures(records, config, out) -> [(title, path or None)]`` (the run
  report's plots of its own metrics; None where the run did not log them) and, optionally,
  ``sweep_figures(variants, out) -> [(title, path or None)]`` (the comparison report's plots of its own across the
  variants of a sweep, ``study.report.Variant``: name, settings, completed runs; None where no run used the
  method);
- ``evidence.py``: ``ORDER`` (where the method's rows stand: premises are measured in this order, which their
  figures depend on, since the teacher's draws follow one another), ``PROMISES`` and ``premises(bench)`` (its
  paper's precondition, measured by ``study.premises``), ``CLAIMS`` (its paper's claims, scored by
  ``study.evidence``);
- ``config.py`` (its settings), optionally with ``MOVED_KEYS`` (``{old key: its key now}``, e.g.
  ``{"teacher.meta_margin": "algorithm.meta_margin"}``): settings that were another group's once and are the method's
  now; a user who types the old key is told where it is set (``moved_key``).

Adding a method touches its folder, its YAMLs and its docs page: the console, the run and sweep reports, the premises
and the scoreboard find it here.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import pkgutil
from types import ModuleType

from socratic_exp.core.errors import NO_VALUE, ConfigError

METHOD_GROUPS = ("socratic_exp.algorithms", "socratic_exp.samplers")


@functools.cache
def method_modules(name: str) -> tuple[ModuleType, ...]:
    """The ``name`` module of every method folder that has one: algorithms, then samplers, each by folder name;
    modules with an ``ORDER`` by it."""
    found = []
    for group in METHOD_GROUPS:
        package = importlib.import_module(group)
        for folder in sorted(info.name for info in pkgutil.iter_modules(package.__path__) if info.ispkg):
            if importlib.util.find_spec(f"{group}.{folder}.{name}") is not None:
                found.append(importlib.import_module(f"{group}.{folder}.{name}"))
    return tuple(sorted(found, key=lambda module: getattr(module, "ORDER", 0)))


def moved_key(key: str) -> ConfigError | None:
    """The one-line error for a key that a method took over (its ``config.py``'s ``MOVED_KEYS``), naming where the
    setting lives now and which option has it; None for any other key."""
    for module in method_modules("config"):
        new = getattr(module, "MOVED_KEYS", {}).get(key)
        if new is not None:
            group, option = module.__name__.split(".")[1:3]  # socratic_exp.<group>s.<option>.config
            where = f"{new}, a setting of {group.removesuffix('s')}={option}"
            return ConfigError(key, NO_VALUE, f"has moved to {where}", f"set {new}=<value> instead")
    return None
