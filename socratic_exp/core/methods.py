"""Each method's own modules, found in the method folders, so that shared code names no method.

A method is a folder under ``algorithms/`` or ``samplers/``. Besides its config and trainer it may hold:

- ``telemetry.py``: ``SIGNALS`` (``{metric prefix: (console.Signal, ...)}``: what the progress line shows once a
  metric with that prefix is logged) and ``figures(records, config, out) -> [(title, path or None)]`` (the run
  report's plots of its own metrics; None where the run did not log them);
- ``evidence.py``: ``ORDER`` (where the method's rows stand: premises are measured in this order, which their
  figures depend on, since the teacher's draws follow one another), ``PROMISES`` and ``premises(bench)`` (its
  paper's precondition, measured by ``study.premises``), ``CLAIMS`` (its paper's claims, scored by
  ``study.evidence``).

Adding a method touches its folder, its YAMLs and its docs page: the console, the run report, the premises and the
scoreboard find it here.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import pkgutil
from types import ModuleType

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
