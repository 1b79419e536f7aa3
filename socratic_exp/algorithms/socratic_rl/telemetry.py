"""What Socratic-RL shows while it trains (|V| and the viewpoints' utility) and in its run report (the viewpoint
timeline)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from socratic_exp.core.console import Signal

SIGNALS = {
    "socratic_rl/": (Signal("|V|", "socratic_rl/active", 0), Signal("utility", "socratic_rl/utility_mean", 3)),
}


def figures(records: list[dict[str, Any]], config: dict[str, Any], out: Path) -> list[tuple[str, Path | None]]:
    return [("Socratic-RL: viewpoint timeline", plot_viewpoints(records, out / "telemetry_viewpoints.png"))]


def plot_viewpoints(records: list[dict[str, Any]], path: Path) -> Path | None:
    """The knowledge base's active / queued / retired / distilled counts, and the viewpoints' measured utility (mean
    with min-max band) at each probe."""
    from socratic_exp.core.curves import lines, pyplot, save, series

    if not series(records, "socratic_rl/kb_size")[0] and not series(records, "socratic_rl/active")[0]:
        return None
    fig, (counts, utility) = pyplot().subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    lines(counts, records, ["socratic_rl/active", "socratic_rl/kb_queued", "socratic_rl/kb_retired",
                            "socratic_rl/kb_distilled", "socratic_rl/kb_size"], "viewpoints |V| over training",
          lambda m: m.removeprefix("socratic_rl/"))  # fmt: skip
    steps, means = series(records, "socratic_rl/utility_mean")
    if steps:
        low = dict(zip(*series(records, "socratic_rl/utility_min"), strict=True))
        high = dict(zip(*series(records, "socratic_rl/utility_max"), strict=True))
        utility.plot(steps, means, marker="o", ms=3, label="mean U(v)")
        if all(s in low and s in high for s in steps):
            utility.fill_between(steps, [low[s] for s in steps], [high[s] for s in steps], alpha=0.2, label="min-max")
        utility.axhline(0.0, color="gray", ls=":")
        utility.legend(fontsize=7)
    utility.set(title="viewpoint utility U(v) at each probe", xlabel="step")
    return save(fig, path)
