"""What VPD's run report shows of its E-step (every ``vpd/*`` metric against the step); its M-step's telemetry is
SDPO's (``algorithms/sdpo/telemetry.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def figures(records: list[dict[str, Any]], config: dict[str, Any], out: Path) -> list[tuple[str, Path | None]]:
    from socratic_exp.study.curves import plot_prefixed

    return [("VPD: E-step telemetry", plot_prefixed(records, "vpd/", "VPD E-step", out / "telemetry_vpd.png"))]
