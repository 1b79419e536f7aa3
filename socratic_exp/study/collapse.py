"""Claims that one arm collapses later than another, read on long runs' curves (Part 3 of
research/results/evidence_rates/PREREGISTRATION.md).

``python -m socratic_exp.report <sweep folder> --collapse`` reads the sweep's run folders and writes
``collapse.md`` and ``collapse.csv`` (a row per claim of the methods' ``collapse_claims``) and ``collapse.png``
(each seed's collapse step of B against A's).

A run collapses at its first evaluation ``COLLAPSE_DROP`` (10 points) or more below its accuracy at step 0 (the
scoreboard's ``collapse_step``); a run that never does is counted one evaluation past its last (``censored_step``).
Per seed, A delays B's collapse when its step is later. The rule, fixed before any run:

- there is a collapse to delay when at least ``COLLAPSED_AT_LEAST`` of B's runs collapse; otherwise the claim is
  "untestable here";
- else a one-sided sign test over the seeds whose steps differ (``sign_test``), Holm over the claims measured:
  "reproduced" when Holm rejects "A collapses no later", "not reproduced" when A collapses earlier on at least as many
  seeds as later, "inconclusive" otherwise.

How far each run falls: its best evaluation minus its last (``drop_from_best``), per arm the mean, and A - B paired by
seed with a 95% t-interval, for display.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from socratic_exp.core.curves import pyplot, save
from socratic_exp.core.errors import UserError
from socratic_exp.core.methods import CollapseClaim, in_order
from socratic_exp.study.evidence import (
    ALPHA,
    COLLAPSE_DROP,
    METRIC,
    Arms,
    Interval,
    OneSidedTest,
    collapse_step,
    evaluations,
    holm,
    interval_text,
    paired_interval,
)
from socratic_exp.study.runs import Run
from socratic_exp.study.tables import markdown_table, number, write_csv

COLLAPSED_AT_LEAST = 3  # B's runs that must collapse for a delay to be measurable


def collapse_claims() -> tuple[CollapseClaim, ...]:
    from socratic_exp.runtime.methods import declared_methods

    return tuple(claim for method in in_order(declared_methods()) for claim in method.collapse_claims)


def censored_step(run: Run) -> int | None:
    """The run's collapse step, or one evaluation past its last for a run that never collapses (None without two
    evaluations)."""
    found = evaluations(run)
    if len(found) < 2:
        return None
    step = collapse_step(run)
    return step if step is not None else found[-1]["step"] + (found[-1]["step"] - found[-2]["step"])


def drop_from_best(run: Run) -> float | None:
    found = [r[METRIC] for r in evaluations(run)]
    return max(found) - found[-1] if found else None


def sign_test(later: int, earlier: int) -> float:
    """One-sided sign test: P(at least ``later`` of ``later + earlier`` fair coin flips)."""
    flips = later + earlier
    return sum(math.comb(flips, k) for k in range(later, flips + 1)) / 2**flips if flips else 1.0


@dataclass
class CollapseRow:
    claim: CollapseClaim
    seeds: tuple[int, ...] = ()
    later: int = 0  # seeds where A collapses later than B (or not at all, while B does)
    earlier: int = 0
    b_collapsed: int = 0
    drop_a: float = math.nan  # mean drop from the best evaluation to the last
    drop_b: float = math.nan
    drop_diff: Interval | None = None  # A - B, paired
    test: OneSidedTest | None = None
    status: str = "run"
    steps: list[tuple[int, int]] = field(default_factory=list)  # (B's step, A's step) per seed

    @property
    def verdict(self) -> str:
        if self.status != "run":
            return self.status
        if self.b_collapsed < COLLAPSED_AT_LEAST:
            return f"untestable here (no collapse to delay: {self.b_collapsed} of {len(self.seeds)} runs collapse)"
        if self.test is not None and self.test.rejected:
            return "reproduced"
        return "not reproduced" if self.earlier >= self.later else "inconclusive"


def score(claim: CollapseClaim, arms: Arms) -> CollapseRow:
    missing = [arm for arm in (claim.a, claim.b) if not arms.runs.get(arm)]
    if missing:
        return CollapseRow(claim, status=f"not run ({', '.join(missing)} missing)")
    row = CollapseRow(claim)
    drops: list[tuple[float, float]] = []
    for seed in sorted(set(arms.runs[claim.a]) & set(arms.runs[claim.b])):
        a, b = arms.runs[claim.a][seed], arms.runs[claim.b][seed]
        a_step, b_step, a_drop, b_drop = censored_step(a), censored_step(b), drop_from_best(a), drop_from_best(b)
        if a_step is None or b_step is None or a_drop is None or b_drop is None:
            continue
        row.seeds += (seed,)
        row.steps.append((b_step, a_step))
        row.later += a_step > b_step
        row.earlier += a_step < b_step
        row.b_collapsed += collapse_step(b) is not None
        drops.append((a_drop, b_drop))
    if not drops:
        return CollapseRow(claim, status="not run (no seed completed in both arms)")
    row.drop_a, row.drop_b = statistics.fmean(d[0] for d in drops), statistics.fmean(d[1] for d in drops)
    row.drop_diff = paired_interval([a - b for a, b in drops])
    if row.b_collapsed >= COLLAPSED_AT_LEAST:
        row.test = OneSidedTest("reproduced", ">", 0.0, sign_test(row.later, row.earlier))
    return row


def score_all(runs: Sequence[Run], chosen: Sequence[CollapseClaim] | None = None) -> list[CollapseRow]:
    """Every collapse claim whose arms the sweep ran, Holm over those measured."""
    arms = Arms.of(runs)
    rows = [score(claim, arms) for claim in (collapse_claims() if chosen is None else chosen)
            if {claim.a, claim.b} <= arms.swept]  # fmt: skip
    if not rows:
        raise UserError(f"no collapse claim has both its arms among these {len(runs)} runs",
                        "point --collapse at a sweep that ran both arms of a method's collapse claim")  # fmt: skip
    holm([row.test for row in rows if row.test is not None], ALPHA)
    return rows


def collapse_markdown(rows: Sequence[CollapseRow]) -> str:
    header = ["claim", "source", "A vs B", "n", f"B collapsed (>= {COLLAPSED_AT_LEAST})", "A later / earlier",
              "sign test p, raw -> Holm", "verdict", "drop from best: A / B", "A - B drop [95% CI]"]  # fmt: skip
    table = [
        [f"`{r.claim.id}`", r.claim.source, f"{r.claim.a} vs {r.claim.b}", len(r.seeds), r.b_collapsed,
         f"{r.later} / {r.earlier}", f"{r.test.p:.3g} -> {r.test.p_holm:.3g}" if r.test else "-", f"**{r.verdict}**",
         f"{number(r.drop_a)} / {number(r.drop_b)}", interval_text(r.drop_diff)]
        for r in rows
    ]  # fmt: skip
    return (
        f"# Collapse\n\nA run collapses at its first evaluation {COLLAPSE_DROP * 100:.0f} points or more below its "
        "accuracy at step 0; one "
        "that never does counts one evaluation past its last. A delays B's collapse on a seed where its step is "
        f"later. With fewer than {COLLAPSED_AT_LEAST} of B's runs collapsing there is nothing to delay (untestable "
        "here); else a one-sided sign test over the seeds whose steps differ, Holm over the claims measured: "
        f"reproduced when Holm rejects at {ALPHA}, not reproduced when A collapses earlier on at least as many seeds "
        "as later, inconclusive otherwise. Drop from best: a run's best evaluation minus its last (mean per arm; A - "
        f"B paired by seed, for display).\n\n{markdown_table(header, table)}\n"
    )


def plot_steps(rows: Sequence[CollapseRow], path: Path) -> Path:
    plt = pyplot()
    figure, ax = plt.subplots(figsize=(6, 6))
    steps = [step for row in rows for pair in row.steps for step in pair]
    for row in rows:
        if row.steps:
            ax.scatter([b for b, _ in row.steps], [a for _, a in row.steps], label=row.claim.id, alpha=0.7)
    if steps:
        ax.plot([0, max(steps)], [0, max(steps)], color="grey", linewidth=1)  # above the line: A collapses later
    ax.set_xlabel("B's collapse step (never: one evaluation past the end)")
    ax.set_ylabel("A's collapse step")
    ax.set_title("Collapse step per seed (above the line: A later)")
    ax.legend(fontsize=7)
    figure.tight_layout()
    return save(figure, path)


def write_collapse(runs: Sequence[Run], out: Path) -> tuple[str, list[Path]]:
    rows = score_all(runs)
    out.mkdir(parents=True, exist_ok=True)
    markdown = collapse_markdown(rows)
    (out / "collapse.md").write_text(markdown, encoding="utf-8")
    write_csv(out / "collapse.csv", [_csv_row(row) for row in rows])
    return markdown, [out / "collapse.md", out / "collapse.csv", plot_steps(rows, out / "collapse.png")]


def _csv_row(row: CollapseRow) -> dict[str, Any]:
    diff = row.drop_diff or Interval(0, math.nan, math.nan, math.nan)
    return {"claim": row.claim.id, "source": row.claim.source, "a": row.claim.a, "b": row.claim.b,
            "n": len(row.seeds), "b_collapsed": row.b_collapsed, "later": row.later, "earlier": row.earlier,
            "p": row.test.p if row.test else math.nan, "p_holm": row.test.p_holm if row.test else math.nan,
            "verdict": row.verdict, "drop_a": row.drop_a, "drop_b": row.drop_b, "drop_diff": diff.mean,
            "drop_diff_low": diff.low, "drop_diff_high": diff.high}  # fmt: skip
