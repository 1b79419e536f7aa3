"""Goldilocks: what the method declares (``socratic_exp.core.methods.Method``): its console signals, its report
figures, its paper's premise and its paper's claims.
"""

from __future__ import annotations

from socratic_exp.core.methods import Method
from socratic_exp.samplers.goldilocks import evidence, telemetry

METHOD = Method(
    name="goldilocks",
    docs="goldilocks.md",
    paper="Goldilocks",
    signals=telemetry.SIGNALS,
    figures=telemetry.figures,
    sweep_figures=telemetry.sweep_figures,
    order=5,
    premises=evidence.premises,
    promises=evidence.PROMISES,
    claims=evidence.CLAIMS,
)
