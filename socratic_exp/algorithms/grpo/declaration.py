"""GRPO: what the method declares (``socratic_exp.core.methods.Method``): its console signals and its report
figures.
"""

from __future__ import annotations

from socratic_exp.algorithms.grpo import telemetry
from socratic_exp.core.methods import Method

METHOD = Method(
    name="grpo",
    docs="dynamic-sampling.md",
    paper="GRPO",
    signals=telemetry.SIGNALS,
    figures=telemetry.figures,
)
