"""What the entropy mask shows while a run trains (the kept share of tokens) and in its run report (the token-entropy
distribution and the kept threshold), wherever the mask runs: its own algorithm or an overlay on another."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from socratic_exp.core.console import Signal

SIGNALS = {"entropy_mask/": (Signal("kept", "entropy_mask/kept_fraction"),)}


def figures(records: list[dict[str, Any]], config: dict[str, Any], out: Path) -> list[tuple[str, Path | None]]:
    algorithm = config.get("algorithm") or {}
    overlay = algorithm.get("entropy_mask")  # the mask on another algorithm: its rho is the overlay's
    rho = overlay.get("rho") if isinstance(overlay, dict) else None
    rho = algorithm.get("rho") if rho is None else rho
    return [
        ("Entropy mask: token entropy and the kept threshold",
         plot_entropy_mask(records, rho, out / "telemetry_entropy_mask.png"))
    ]  # fmt: skip


def plot_entropy_mask(records: list[dict[str, Any]], rho: float | None, path: Path) -> Path | None:
    """The token-entropy distribution (its logged percentiles, early and late in training) with the kept threshold
    (the 1 - rho quantile: tokens above it are trained on), and the kept / dropped tokens' entropy over steps."""
    from socratic_exp.study.curves import lines, pyplot, save

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
