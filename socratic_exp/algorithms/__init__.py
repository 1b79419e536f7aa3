"""Algorithms (config group ``algorithm``): a folder each, its settings in ``config.py``, what builds its TRL trainer
in ``build.py`` beside the trainer, and what it declares to the rest of the package in ``declaration.py``."""

from __future__ import annotations

import functools
import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

from socratic_exp.core.methods import Method, method_folders

if TYPE_CHECKING:
    from socratic_exp.algorithms.base import Algorithm


@functools.cache
def declared() -> tuple[Method, ...]:
    """The declaration of every algorithm folder (its ``declaration.py``'s ``METHOD``), by folder name."""
    return tuple(importlib.import_module(f"{__name__}.{name}.declaration").METHOD for name in method_folders(__path__))


def builder(settings: Algorithm) -> Any:
    """What builds the trainer of ``settings``: the ``BUILD`` of the ``build.py`` beside its settings class (or, for
    a settings class whose folder has none, beside the nearest base class's), made with the settings. Found by the
    settings class's folder, so that no config names its trainer."""
    for cls in type(settings).__mro__:
        package = cls.__module__.rpartition(".")[0]
        if package.startswith(f"{__name__}.") and importlib.util.find_spec(f"{package}.build") is not None:
            return importlib.import_module(f"{package}.build").BUILD(settings)
    raise TypeError(f"{type(settings).__name__} has no build.py beside its settings or theirs it extends")
