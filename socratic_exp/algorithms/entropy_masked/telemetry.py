"""What the entropy mask shows while a run trains (the kept share of tokens), in its run report (the token-entropy
distribution and the kept threshold) and in a sweep's report (the objective against rho, per mode), wherever the mask
runs: its own algorithm or an overlay on another."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from socratic_exp.core.console import Signal

if TYPE_CHECKING:
    from socratic_exp.study.report import Variant
    from socratic_exp.study.runs import Run

SIGNALS = {"entropy_mask/": (Signal("kept", "entropy_mask/kept_fraction"),)}
SWEEP_TITLE = "Entropy mask: the objective against rho, per mode"
BASELINE = "rho=1 (GRPO)"  # every token trained on: plain GRPO in every mode


def mask_of(config: dict[str, Any]) -> tuple[float | None, str | None]:
    """The mask's rho and mode in a run's config: the overlay's on another algorithm, else the algorithm's own."""
    algorithm = config.get("algorithm") or {}
    overlay = algorithm.get("entropy_mask")
    mask = overlay if isinstance(overlay, dict) and overlay.get("rho") is not None else algorithm
    return mask.get("rho"), mask.get("mode")


def figures(records: list[dict[str, Any]], config: dict[str, Any], out: Path) -> list[tuple[str, Path | None]]:
    rho, _ = mask_of(config)
    return [
        ("Entropy mask: token entropy and the kept threshold",
         plot_entropy_mask(records, rho, out / "telemetry_entropy_mask.png"))
    ]  # fmt: skip


def plot_entropy_mask(records: list[dict[str, Any]], rho: float | None, path: Path) -> Path | None:
    """The token-entropy distribution (its logged percentiles, early and late in training) with the kept threshold
    (the 1 - rho quantile: tokens above it are trained on), and the kept / dropped tokens' entropy over steps."""
    from socratic_exp.core.curves import lines, pyplot, save

    quantiles = sorted(
        (int(k.removeprefix("entropy_mask/entropy_p")), k)
        for k in {k for r in records for k in r if k.startswith("entropy_mask/entropy_p")}
        if k.removeprefix("entropy_mask/entropy_p").isdigit()
    )
    if not quantiles:
        return None
    logged = [r for r in records if all(isinstance(r.get(k), int | float) for _, k in quantiles)]
    fig, (dist, over_time) = pyplot().subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    for record, style in ((logged[0], ":"), (logged[-1], "-")) if logged else ():
        dist.plot([q for q, _ in quantiles], [record[k] for _, k in quantiles], style, marker="o",
                  label=f"step {record['step']}")  # fmt: skip
    if rho is not None:
        dist.axvline(
            100 * (1 - rho), color="tab:red", ls="--", label=f"kept: top {rho:.0%} (above p{100 * (1 - rho):.0f})"
        )
    dist.set(title="token entropy by percentile", xlabel="percentile of completion tokens", ylabel="entropy (nats)")
    dist.legend(fontsize=7)
    shown = ["entropy_mask/kept_entropy", "entropy_mask/dropped_entropy", "entropy_mask/kept_fraction"]
    lines(over_time, records, shown, "kept vs dropped tokens", lambda m: m.removeprefix("entropy_mask/"))
    return save(fig, path)


def sweep_figures(variants: Sequence[Variant], out: Path) -> list[tuple[str, Path | None]]:
    """The objective after training and its gain over the run's own start against rho, a line per mode (mean +- std
    over the runs at each rho); the rho=1 runs, plain GRPO in every mode, pooled into one dashed baseline. Drawn
    when the runs vary rho."""
    runs = [run for variant in variants for run in variant.runs if mask_of(run.summary.get("config") or {})[0]]
    if len({mask_of(run.summary["config"])[0] for run in runs}) < 2:
        return [(SWEEP_TITLE, None)]
    return [(SWEEP_TITLE, plot_rho(runs, out / "sweep_entropy_mask.png"))]


def plot_rho(runs: Sequence[Run], path: Path) -> Path:
    from socratic_exp.core.curves import mean_std, pyplot, save

    objective = runs[0].objective_key
    fig, panels = pyplot().subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    for ax, metric in zip(panels, (objective, f"{objective} gain"), strict=True):
        points: dict[str, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))  # mode -> rho -> values
        for run in runs:
            rho, mode = mask_of(run.summary["config"])
            if run.value(metric) is not None:
                points[BASELINE if rho == 1.0 else str(mode)][rho].append(run.value(metric))
        for mode, by_rho in points.items():
            stats = [mean_std(values) for _, values in sorted(by_rho.items())]
            if mode == BASELINE:
                ax.axhline(stats[0][0], color="grey", ls="--", label=mode)
                continue
            ax.errorbar(sorted(by_rho), [mean for mean, _, _ in stats], marker="o", capsize=3, label=mode,
                        yerr=[0.0 if math.isnan(std) else std for _, std, _ in stats])  # fmt: skip
        ax.set(title=metric, xlabel="rho (share of completion tokens in the policy loss)", ylabel=metric)
        ax.legend(title="mode", fontsize=7)
    return save(fig, path)
