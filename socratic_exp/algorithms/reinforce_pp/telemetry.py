"""What REINFORCE++ shows while it trains: the mean KL to the initial policy folded into its returns. Its run report
has no plots of its own beyond the learning curves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from socratic_exp.core.console import Signal

SIGNALS = {"reinforce_pp/": (Signal("kl", "reinforce_pp/reward_kl", 4),)}


def figures(records: list[dict[str, Any]], config: dict[str, Any], out: Path) -> list[tuple[str, Path | None]]:
    return []
