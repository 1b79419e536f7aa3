"""VPD: what the method declares (``socratic_exp.core.methods.Method``): its report figures and its paper's claims."""

from __future__ import annotations

from socratic_exp.algorithms.vpd import evidence, telemetry
from socratic_exp.core.methods import Method

METHOD = Method(
    name="vpd",
    docs="sdpo-vpd.md",
    paper="VPD",
    figures=telemetry.figures,
    sweep_figures=telemetry.sweep_figures,
    order=3,
    claims=evidence.CLAIMS,
    collapse_claims=evidence.COLLAPSE_CLAIMS,
)
