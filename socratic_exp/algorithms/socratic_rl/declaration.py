"""Socratic-RL: what the method declares (``socratic_exp.core.methods.Method``): its console signals, its report
figures, its paper's premise, its paper's claims and the settings it took over.
"""

from __future__ import annotations

from socratic_exp.algorithms.socratic_rl import evidence, telemetry
from socratic_exp.algorithms.socratic_rl.config import META_SETTINGS
from socratic_exp.core.methods import Method

METHOD = Method(
    name="socratic_rl",
    docs="socratic-rl.md",
    paper="Socratic-RL",
    signals=telemetry.SIGNALS,
    figures=telemetry.figures,
    order=6,
    premises=evidence.premises,
    promises=evidence.PROMISES,
    claims=evidence.CLAIMS,
    moved_keys={f"teacher.{setting}": f"algorithm.{setting}" for setting in META_SETTINGS},
)
