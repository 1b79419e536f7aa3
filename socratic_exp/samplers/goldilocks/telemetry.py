"""What the Goldilocks sampler shows while a run trains (the zero-variance share of the groups) and in its run
report (predicted against realised utility)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from socratic_exp.core.console import Signal

# sampler/updates: the sampler's own counter (sampler/zero_variance_share alone does not say which sampler ran)
SIGNALS = {"sampler/updates": (Signal("zero-var", "sampler/zero_variance_share"),)}


def figures(records: list[dict[str, Any]], config: dict[str, Any], out: Path) -> list[tuple[str, Path | None]]:
    return [("Goldilocks: predicted vs realised utility", plot_utility(records, out / "telemetry_goldilocks.png"))]


def plot_utility(records: list[dict[str, Any]], path: Path) -> Path | None:
    """Predicted vs realised utility of the chosen questions (each point: one logging interval's means), and the
    zero-variance share of the groups over steps."""
    from socratic_exp.study.curves import lines, pyplot, save

    predicted = [(r.get("sampler/predicted_utility"), r.get("sampler/realised_utility"), r["step"]) for r in records]
    pairs = [(p, q, s) for p, q, s in predicted if isinstance(p, int | float) and isinstance(q, int | float)]
    if not pairs:
        return None
    fig, (scatter, over_time) = pyplot().subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    points = scatter.scatter([p for p, _, _ in pairs], [q for _, q, _ in pairs], c=[s for _, _, s in pairs], s=14)
    top = max(max(p, q) for p, q, _ in pairs) or 1.0
    scatter.plot([0, top], [0, top], ":", color="gray", label="y = x")
    scatter.set(title="predicted vs realised utility", xlabel="predicted", ylabel="realised (p(1-p) of the group)")
    scatter.legend(fontsize=7)
    fig.colorbar(points, ax=scatter, label="step")
    lines(over_time, records, ["sampler/zero_variance_share", "sampler/predicted_utility", "sampler/realised_utility"],
          "over training", lambda m: m.removeprefix("sampler/"))  # fmt: skip
    return save(fig, path)
