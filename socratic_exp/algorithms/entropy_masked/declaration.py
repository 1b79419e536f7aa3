"""80/20: what the method declares (``socratic_exp.core.methods.Method``): its console signals, its report figures,
its paper's premise and its paper's claims.
"""

from __future__ import annotations

from socratic_exp.algorithms.entropy_masked import evidence, telemetry
from socratic_exp.core.methods import Method

METHOD = Method(
    name="entropy_masked",
    docs="entropy-masking.md",
    paper="80/20",
    signals=telemetry.SIGNALS,
    figures=telemetry.figures,
    sweep_figures=telemetry.sweep_figures,
    order=4,
    premises=evidence.premises,
    promises=evidence.PROMISES,
    claims=evidence.CLAIMS,
)
