"""Every method's declaration, the algorithms' and the samplers', for the run and the study to read
(``socratic_exp.core.methods``)."""

from __future__ import annotations

from socratic_exp import algorithms, samplers
from socratic_exp.core.methods import Method


def declared_methods() -> tuple[Method, ...]:
    """The declarations of the algorithms, then the samplers, each group by folder name (the reports' order;
    ``core.methods.in_order`` gives the premises' and the scoreboard's)."""
    return algorithms.declared() + samplers.declared()
