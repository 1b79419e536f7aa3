"""What dynamic sampling (``algorithm.dynamic_sampling``, on any algorithm) shows while a run trains (the rounds a
batch took, the zero-variance share of the groups generated) and in its run report (its counts over the steps)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from socratic_exp.core.console import Signal

SIGNALS = {
    "dynamic_sampling/": (
        Signal("rounds", "dynamic_sampling/rounds", 1),
        Signal("zero-var", "dynamic_sampling/zero_variance_share"),
    )
}


def figures(records: list[dict[str, Any]], config: dict[str, Any], out: Path) -> list[tuple[str, Path | None]]:
    from socratic_exp.core.curves import plot_prefixed

    figure = plot_prefixed(records, "dynamic_sampling/", "dynamic sampling", out / "telemetry_dynamic_sampling.png")
    return [("Dynamic sampling: rounds and groups", figure)]
