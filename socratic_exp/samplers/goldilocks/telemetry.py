"""What the Goldilocks sampler shows while a run trains (the zero-variance share of the groups), in its run report
(predicted against realised utility) and in a sweep's report (accuracy and zero-variance share against the rollouts
spent, per variant)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from socratic_exp.core.console import Signal

if TYPE_CHECKING:
    from socratic_exp.core.curves import Records
    from socratic_exp.study.report import Variant

# sampler/updates: the sampler's own counter (sampler/zero_variance_share alone does not say which sampler ran)
SIGNALS = {"sampler/updates": (Signal("zero-var", "sampler/zero_variance_share"),)}
SWEEP_TITLE = "Goldilocks: accuracy and zero-variance groups against the rollouts spent"


def figures(records: list[dict[str, Any]], config: dict[str, Any], out: Path) -> list[tuple[str, Path | None]]:
    return [("Goldilocks: predicted vs realised utility", plot_utility(records, out / "telemetry_goldilocks.png"))]


def plot_utility(records: list[dict[str, Any]], path: Path) -> Path | None:
    """Predicted vs realised utility of the chosen questions (each point: one logging interval's means), and the
    zero-variance share of the groups over steps."""
    from socratic_exp.core.curves import lines, pyplot, save

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


def sweep_figures(variants: Sequence[Variant], out: Path) -> list[tuple[str, Path | None]]:
    """Per variant (mean over its runs, +- std): held-out accuracy against the rollouts spent (every sampler spends
    them alike, it only chooses the questions), and the share of zero-variance groups (no gradient) along training,
    a 5-log moving mean. Drawn when a run used this sampler; the other samplers' runs are drawn beside it."""
    used = any("sampler/updates" in record for variant in variants for run in variant.runs for record in run.records)
    return [(SWEEP_TITLE, plot_rollouts(variants, out / "sweep_goldilocks.png") if used else None)]


def by_rollouts(records: Records) -> list[dict[str, Any]]:
    """The records with the rollouts spent by their step as ``step`` (step 0: before training)."""
    train = [r for r in records if isinstance(r.get("sampler/rollouts"), int | float) and r["step"]]
    if not train:
        return []
    per_step = train[-1]["sampler/rollouts"] / train[-1]["step"]
    return [{**record, "step": record["step"] * per_step} for record in records]


def plot_rollouts(variants: Sequence[Variant], path: Path) -> Path:
    from socratic_exp.core.curves import mean_line, pyplot, save

    objective = next(run.objective_key for variant in variants for run in variant.runs)
    fig, (accuracy, zero_variance) = pyplot().subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    for index, variant in enumerate(variant for variant in variants if variant.runs):
        runs = [by_rollouts(run.records) for run in variant.runs]
        style = {"label": f"{variant.name} (n={len(variant.runs)})", "band": True, "color": f"C{index % 10}"}
        mean_line(accuracy, runs, objective, marker="o", **style)
        mean_line(zero_variance, runs, "sampler/zero_variance_share", window=5, **style)
    accuracy.set(title=f"held-out {objective}", xlabel="rollouts spent")
    zero_variance.set(title="share of zero-variance groups (no gradient)", xlabel="rollouts spent")
    for ax in (accuracy, zero_variance):
        if ax.has_data():
            ax.legend(fontsize=7)
    return save(fig, path)
