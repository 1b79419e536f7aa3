"""What self-distillation shows while it trains (the teacher's reward margin) and in its run report (every
``self_distillation/*`` metric against the step), for SDPO and for VPD's M-step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from socratic_exp.core.console import Signal

SIGNALS = {"self_distillation/": (Signal("margin", "self_distillation/reward_margin", 3),)}


def figures(records: list[dict[str, Any]], config: dict[str, Any], out: Path) -> list[tuple[str, Path | None]]:
    from socratic_exp.study.curves import plot_prefixed

    path = out / "telemetry_self_distillation.png"
    return [("Self-distillation telemetry", plot_prefixed(records, "self_distillation/", "self-distillation", path))]
