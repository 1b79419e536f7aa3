"""What VPD's run report shows of its E-step (every ``vpd/*`` metric against the step), and a sweep's report (the
E-step per variant); its M-step's telemetry is SDPO's (``algorithms/sdpo/telemetry.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from socratic_exp.study.report import Variant

E_STEP = ("e_step_loss", "classifier_accuracy", "reward_success", "reward_failure", "shift", "skipped")


def figures(records: list[dict[str, Any]], config: dict[str, Any], out: Path) -> list[tuple[str, Path | None]]:
    from socratic_exp.core.curves import plot_prefixed

    return [("VPD: E-step telemetry", plot_prefixed(records, "vpd/", "VPD E-step", out / "telemetry_vpd.png"))]


def sweep_figures(variants: Sequence[Variant], out: Path) -> list[tuple[str, Path | None]]:
    """The E-step per variant (mean over its runs, +- std, at the steps it ran): its loss, the classifier's accuracy,
    the implicit rewards of correct and incorrect rollouts, the shift, and the share of E-steps skipped (a batch
    without both). None when no run logged them."""
    from socratic_exp.core.curves import plot_curves

    path = out / "sweep_vpd.png"
    return [("VPD: E-step per variant", plot_curves(variants, [f"vpd/{key}" for key in E_STEP], path))]
