"""What self-distillation shows while it trains (the teacher's reward margin), in its run report (every
``self_distillation/*`` metric against the step) and in a sweep's report (the teacher's telemetry per variant), for
SDPO and for VPD's M-step."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from socratic_exp.core.console import Signal

if TYPE_CHECKING:
    from socratic_exp.study.report import Variant

SIGNALS = {"self_distillation/": (Signal("margin", "self_distillation/reward_margin", 3),)}


def figures(records: list[dict[str, Any]], config: dict[str, Any], out: Path) -> list[tuple[str, Path | None]]:
    from socratic_exp.core.curves import plot_prefixed

    path = out / "telemetry_self_distillation.png"
    return [("Self-distillation telemetry", plot_prefixed(records, "self_distillation/", "self-distillation", path))]


SWEEP_METRICS = ("reward_margin", "teacher_entropy", "teacher_student_kl", "usable_feedback_share")


def sweep_figures(variants: Sequence[Variant], out: Path) -> list[tuple[str, Path | None]]:
    """The teacher per variant (mean over its runs, +- std): its reward margin (log q/pi, correct - incorrect
    rollouts), its entropy on the distilled tokens, KL(student || teacher) and the share of rollouts with usable
    feedback. None when no run logged them."""
    from socratic_exp.core.curves import plot_curves

    metrics = [f"self_distillation/{name}" for name in SWEEP_METRICS]
    path = out / "sweep_self_distillation.png"
    return [("Self-distillation: the teacher per variant", plot_curves(variants, metrics, path))]
