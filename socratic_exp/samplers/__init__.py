"""Samplers (config group ``sampler``): which prompts each training batch draws."""

from __future__ import annotations

import functools
import importlib

from socratic_exp.core.methods import Method, method_folders


@functools.cache
def declared() -> tuple[Method, ...]:
    """The declaration of every sampler folder (its ``declaration.py``'s ``METHOD``), by folder name."""
    return tuple(importlib.import_module(f"{__name__}.{name}.declaration").METHOD for name in method_folders(__path__))
