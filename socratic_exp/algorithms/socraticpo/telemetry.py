"""What SocraticPO shows while it trains (the progress line) and in its run report (the correction rate by attempt,
the guided accuracy)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from socratic_exp.core.console import Signal

SIGNALS = {
    "socraticpo/": (
        Signal("unassisted", "socraticpo/unassisted_acc"),
        Signal("guided", "socraticpo/guided_acc/step*"),
        Signal("attempts", "socraticpo/attempts_per_rollout", 1),
    )
}


def figures(records: list[dict[str, Any]], config: dict[str, Any], out: Path) -> list[tuple[str, Path | None]]:
    return [("SocraticPO: correction rate by attempt", plot_corrections(records, out / "telemetry_socraticpo.png"))]


def plot_corrections(records: list[dict[str, Any]], path: Path) -> Path | None:
    """The correction rate p_k by attempt (mean over training, and over steps) and the guided accuracy."""
    from socratic_exp.study.curves import lines, numbered, pyplot, save, series

    rates = numbered(records, "socraticpo/correction_rate/step")
    if not rates:
        return None
    fig, (bars, over_time, guided) = pyplot().subplots(1, 3, figsize=(15, 4), constrained_layout=True)
    means = [sum(series(records, m)[1]) / max(1, len(series(records, m)[1])) for m in rates]
    attempts = [int(m.rsplit("step", 1)[1]) for m in rates]
    bars.bar(attempts, means, color="tab:green")
    bars.set(title="correction rate by attempt (mean over training)", xlabel="attempt k", ylabel="p_k", ylim=(0, 1))
    bars.set_xticks(attempts)
    lines(over_time, records, rates, "correction rate p_k", lambda m: f"attempt {m.rsplit('step', 1)[1]}")
    lines(guided, records, ["socraticpo/unassisted_acc", *numbered(records, "socraticpo/guided_acc/step")],
          "unassisted vs guided accuracy (training rollouts)", lambda m: m.removeprefix("socraticpo/"))  # fmt: skip
    return save(fig, path)
