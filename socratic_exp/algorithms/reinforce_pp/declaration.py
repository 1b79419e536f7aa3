"""REINFORCE++: what the method declares (``socratic_exp.core.methods.Method``): its console signals and its report
figures.
"""

from __future__ import annotations

from socratic_exp.algorithms.reinforce_pp import telemetry
from socratic_exp.core.methods import Method

METHOD = Method(
    name="reinforce_pp",
    docs="reinforce-pp.md",
    paper="REINFORCE++",
    signals=telemetry.SIGNALS,
    figures=telemetry.figures,
)
