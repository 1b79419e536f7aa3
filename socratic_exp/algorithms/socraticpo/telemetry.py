"""What SocraticPO shows while it trains (the progress line), in its run report (the correction rate by attempt, the
guided accuracy) and in a sweep's report (unassisted against guided accuracy, per variant)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from socratic_exp.core.console import Signal

if TYPE_CHECKING:
    from socratic_exp.study.report import Variant

SIGNALS = {
    "socraticpo/": (
        Signal("unassisted", "socraticpo/unassisted_acc"),
        Signal("guided", "socraticpo/guided_acc/step*"),
        Signal("attempts", "socraticpo/attempts_per_rollout", 1),
    )
}
SWEEP_TITLE = "SocraticPO: unassisted vs guided accuracy"


def figures(records: list[dict[str, Any]], config: dict[str, Any], out: Path) -> list[tuple[str, Path | None]]:
    return [("SocraticPO: correction rate by attempt", plot_corrections(records, out / "telemetry_socraticpo.png"))]


def plot_corrections(records: list[dict[str, Any]], path: Path) -> Path | None:
    """The correction rate p_k by attempt (mean over training, and over steps) and the guided accuracy."""
    from socratic_exp.core.curves import lines, numbered, pyplot, save, series

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


def sweep_figures(variants: Sequence[Variant], out: Path) -> list[tuple[str, Path | None]]:
    """Per variant (mean over its runs, +- std): the training rollouts' unassisted accuracy (attempt 1) and guided
    accuracy (solved within the last attempt K), and the held-out assisted accuracy (the teacher's help at
    evaluation). Drawn when a run logged SocraticPO's rollouts."""
    from socratic_exp.core.curves import numbered, plot_curves

    records = [record for variant in variants for run in variant.runs for record in run.records]
    if not any("socraticpo/unassisted_acc" in record for record in records):
        return [(SWEEP_TITLE, None)]
    metrics = ["socraticpo/unassisted_acc", *numbered(records, "socraticpo/guided_acc/step")[-1:], "eval/assisted_acc"]
    return [(SWEEP_TITLE, plot_curves(variants, metrics, out / "sweep_socraticpo.png"))]
