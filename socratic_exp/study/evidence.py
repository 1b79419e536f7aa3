"""The evidence scoreboard: every paper's claim measured side by side at equal rollouts (``sweeps/evidence.yaml``).

``python -m socratic_exp.report <sweep folder> --scoreboard`` reads the sweep's run folders (one ``+evidence_arm``
per run) and writes ``scoreboard.md``, ``scoreboard.csv``, ``evaluations.jsonl.gz`` (every run's evaluations: the
scoreboard rebuilds from it alone, ``socratic_exp.study.evaluations``), ``scoreboard_arms.csv``, ``scoreboard.png``
(a forest plot of the paired differences) and ``evidence_curves.png`` (held-out accuracy against the step and
against the training time, mean over seeds per arm).

Each claim (a method's ``CLAIMS``, in its folder's ``evidence.py``; the evidence page's table is generated from
them) says arm A beats arm B (``better``) or does no worse (``not_worse``). Its number is the mean over seeds of A's
final ``eval/greedy_acc`` minus B's, paired by seed, with a 95% t-interval. B is read at A's final step (equal
rollouts: every arm spends ``batch_size`` rollouts per step), which for the grpo arm, trained 3x longer, is an
evaluation in the middle of its run; against grpo the difference is also given at equal training wall time: GRPO's
last evaluation whose ``eval/train_seconds`` is at most A's final one. The verdict rule, fixed before any run:

- ``better``: reproduced when the interval's lower bound is above 0; not reproduced when its upper bound is below
  ``MARGIN`` (the data exclude an effect of 2 points); inconclusive otherwise (one seed: inconclusive);
- ``not_worse``: reproduced when the lower bound is above ``-MARGIN``; not reproduced when the upper bound is below
  0; inconclusive otherwise;
- ``worse`` (A behind B): the mirror of ``better``.

Where the data reject both "no effect" and the margin, the verdict says how big: "reproduced, smaller than the
paper's" (the interval between 0 and the paper's effect; "smaller than 2 points" where the margin is the smallest
effect of interest), "reproduced, larger than the paper's" (the interval above it), and for ``not_worse``
"reproduced, though behind" (within the margin, yet below B).

``MARGIN`` is each claim's own where its paper reports the effect (``Claim.margin``, with its source).

Each verdict rests on a one-sided test of its own hypothesis (``one_sided_tests``): "reproduced" on the effect being
above the claim's floor (0; minus the margin for ``not_worse``), "not reproduced" on its being below the ceiling (the
margin; 0 for ``not_worse``). The raw verdicts read the 95% interval, which is each test at one-sided level 0.025.
Holm's step-down procedure then runs over the family of every hypothesis the scoreboard tests (two per measured
claim, ``holm``), at family-wise level ``ALPHA``; a claim's Holm verdict is the one whose hypothesis Holm rejects,
else inconclusive. Beside each margin the scoreboard prints the smallest effect the seeds could detect with 80% power
(``detectable_effect``), raw and at Holm's strictest level, and marks a row whose raw bound lies within
``KNIFE_EDGE`` of its threshold.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from socratic_exp.core.curves import mean_line, pyplot, save
from socratic_exp.core.errors import UserError
from socratic_exp.core.methods import MARGIN, Claim, in_order
from socratic_exp.study.evaluations import EVALUATIONS_FILE, RecordedRun, run_line, write_evaluations
from socratic_exp.study.runs import Run
from socratic_exp.study.tables import markdown_table, number, signed, write_csv

METRIC = "eval/greedy_acc"  # the held-out accuracy every claim is judged on (unassisted, greedy)
TIME = "eval/train_seconds"  # training wall time at each evaluation (callbacks.TrainClock)
TOKENS = "eval/train_tokens"  # tokens generated and read in training so far: compute, whatever the machine's load
ARM_KEY = "evidence_arm"  # the override that names a run's arm
BASELINE = "grpo"  # the arm trained longer: compared at equal rollouts and at equal wall time
SIGNS = {"better": ">", "not_worse": ">=", "worse": "<"}  # how a claim's comparison reads
ALPHA = 0.05  # the family-wise error rate of the Holm verdicts (the raw intervals are 95%: one-sided tests at 0.025)
RAW_LEVEL = 0.025  # the one-sided level of each raw verdict (a bound of the two-sided 95% interval)
POWER = 0.8  # the power at which the detectable effect is given
KNIFE_EDGE = 0.001  # a raw bound this close to its threshold (0.1 points) is marked
COLLAPSE_DROP = 0.10  # a run has collapsed at its first evaluation this far below its accuracy before training
# two-sided 95% quantiles of Student's t for 1..30 degrees of freedom (no scipy); beyond 30, df 30's (a bit wider)
# fmt: off
T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
       2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
# fmt: on


def claims() -> tuple[Claim, ...]:
    """Every method's claims (its declaration's), in the methods' order."""
    from socratic_exp.runtime.methods import declared_methods

    return tuple(claim for method in in_order(declared_methods()) for claim in method.claims)


def t_quantile(df: int) -> float:
    return T95[min(df, len(T95)) - 1]


@dataclass
class Interval:
    """Mean of paired differences with its 95% t-interval (nan bounds for fewer than two pairs)."""

    n: int
    mean: float
    low: float
    high: float


def paired_interval(diffs: Sequence[float]) -> Interval:
    if not diffs:
        return Interval(0, math.nan, math.nan, math.nan)
    mean = statistics.fmean(diffs)
    if len(diffs) < 2:
        return Interval(1, mean, math.nan, math.nan)
    half = t_quantile(len(diffs) - 1) * statistics.stdev(diffs) / math.sqrt(len(diffs))
    return Interval(len(diffs), mean, mean - half, mean + half)


def verdict(interval: Interval, kind: str, margin: float = MARGIN, margin_name: str = "2 points") -> str:
    """The fixed rule (module docstring): reproduced (with its size where the margin is rejected too) / not
    reproduced / inconclusive, with the claim's margin (``margin_name``: the paper's, or 2 points)."""
    if interval.n < 2:
        return "inconclusive"
    if kind == "worse":  # A behind B: the mirror of "better"
        interval = Interval(interval.n, -interval.mean, -interval.high, -interval.low)
    floor, ceiling = thresholds(kind, margin)
    if interval.low > floor:
        return sized(kind, below=interval.high < ceiling, above=interval.low > margin, margin_name=margin_name)
    if interval.high < ceiling:
        return "not reproduced"
    return "inconclusive"


def sized(kind: str, below: bool, above: bool, margin_name: str) -> str:
    """ "reproduced" with how big, where the data say it: ``below`` the ceiling too (both hypotheses hold), or, for a
    ``better`` / ``worse`` claim, ``above`` the margin."""
    if below:
        return "reproduced, though behind" if kind == "not_worse" else f"reproduced, smaller than {margin_name}"
    if above and kind != "not_worse":
        return f"reproduced, larger than {margin_name}"
    return "reproduced"


def standard_error(interval: Interval) -> float:
    """The paired differences' standard error, from their 95% t-interval."""
    return (interval.high - interval.low) / 2 / t_quantile(interval.n - 1)


@dataclass
class OneSidedTest:
    """A one-sided test of the hypothesis one verdict rests on: the effect is above (``>``) or below (``<``)
    ``threshold``; ``p`` raw, ``p_holm`` Holm-adjusted over the family (``holm``), ``rejected`` by Holm."""

    verdict: Literal["reproduced", "not reproduced"]
    direction: Literal[">", "<"]
    threshold: float
    p: float
    p_holm: float = math.nan
    rejected: bool = False


def thresholds(kind: str, margin: float) -> tuple[float, float]:
    """(floor, ceiling) of a claim, on the effect as the claim reads it (``worse``: B - A): reproduced above the
    floor, not reproduced below the ceiling."""
    return (-margin, 0.0) if kind == "not_worse" else (0.0, margin)


def one_sided_tests(interval: Interval, kind: str, margin: float) -> list[OneSidedTest]:
    """The two hypotheses a claim's verdicts rest on, each tested one-sided (Student's t, n - 1 degrees of freedom)
    on the paired differences; none below two pairs."""
    if interval.n < 2:
        return []
    from scipy.stats import t

    mean = -interval.mean if kind == "worse" else interval.mean  # the effect as the claim reads it
    floor, ceiling = thresholds(kind, margin)
    se, df = standard_error(interval), interval.n - 1

    def p_above(threshold: float) -> float:  # H0: effect <= threshold
        if se == 0:
            return 0.0 if mean > threshold else 1.0
        return float(t.sf((mean - threshold) / se, df))

    def p_below(threshold: float) -> float:  # H0: effect >= threshold
        if se == 0:
            return 0.0 if mean < threshold else 1.0
        return float(t.cdf((mean - threshold) / se, df))

    return [
        OneSidedTest("reproduced", ">", floor, p_above(floor)),
        OneSidedTest("not reproduced", "<", ceiling, p_below(ceiling)),
    ]


def holm(tests: Sequence[OneSidedTest], alpha: float = ALPHA) -> None:
    """Holm's step-down procedure over ``tests`` (the family), in place: ranked by raw p, the k-th of m is rejected
    when it and every test before it have p <= alpha / (m - j + 1); its adjusted p is the running maximum of
    min(1, (m - j + 1) p_j)."""
    ranked = sorted(tests, key=lambda test: test.p)
    running, rejecting = 0.0, True
    for step, test in enumerate(ranked):
        tests_left = len(ranked) - step
        running = max(running, min(1.0, tests_left * test.p))
        rejecting = rejecting and test.p <= alpha / tests_left
        test.p_holm, test.rejected = running, rejecting


def detectable_effect(interval: Interval, level: float, power: float = POWER) -> float:
    """The smallest effect a one-sided paired t-test at ``level`` detects with ``power`` on these seeds:
    (t_(1 - level) + t_power) x the standard error of the mean difference, n - 1 degrees of freedom."""
    if interval.n < 2:
        return math.nan
    from scipy.stats import t

    df = interval.n - 1
    return float((t.ppf(1 - level, df) + t.ppf(power, df)) * standard_error(interval))


# --- reading the runs --------------------------------------------------------------------------------------------
def evaluations(run: Run) -> list[dict[str, Any]]:
    """The run's evaluations in ``metrics.jsonl`` (records with the metric), in step order."""
    return sorted((r for r in run.records if r.get(METRIC) is not None), key=lambda r: r["step"])


def at_step(run: Run, step: int) -> dict[str, Any] | None:
    """The run's last evaluation at or before ``step`` (None if none)."""
    found = [r for r in evaluations(run) if r["step"] <= step]
    return found[-1] if found else None


def within(run: Run, key: str, budget: float) -> tuple[dict[str, Any] | None, bool]:
    """The run's last evaluation whose ``key`` (training time, ``TIME``, or tokens, ``TOKENS``) is at most
    ``budget``, and whether the run stopped before spending that much (then its last evaluation: capped)."""
    spent = [r for r in evaluations(run) if r.get(key) is not None]
    if not spent:
        return None, False
    found = [r for r in spent if r[key] <= budget]
    return (found[-1] if found else None), spent[-1][key] < budget


def collapse_step(run: Run) -> int | None:
    """The step of the run's first evaluation ``COLLAPSE_DROP`` or more below its accuracy at step 0 (None if it
    never falls that far, or has no evaluation at step 0): VPD's "steps until collapse"."""
    found = evaluations(run)
    if not found or found[0]["step"] != 0:
        return None
    start = found[0][METRIC]
    return next((r["step"] for r in found[1:] if r[METRIC] <= start - COLLAPSE_DROP + 1e-12), None)


def final_step(run: Run) -> int:
    steps = run.summary.get("steps")
    return int(steps) if isinstance(steps, int | float) else (evaluations(run) or [{"step": 0}])[-1]["step"]


def seed_of(run: Run) -> int | None:
    seed = run.overrides.get("seed", (run.summary.get("config") or {}).get("seed"))
    return int(seed) if seed is not None else None


@dataclass
class Arms:
    """The completed runs of each arm by seed, the failed (or interrupted) ones counted, and every arm with a run."""

    runs: dict[str, dict[int, Run]]
    failed: dict[str, int]
    swept: frozenset[str] = frozenset()  # arms with any run folder (completed, failed or under way)

    @classmethod
    def of(cls, runs: Sequence[Run]) -> Arms:
        by_arm: dict[str, dict[int, Run]] = defaultdict(dict)
        failed: dict[str, int] = defaultdict(int)
        swept = set()
        for run in runs:
            arm, seed = run.overrides.get(ARM_KEY), seed_of(run)
            if arm is None or seed is None:
                continue
            swept.add(arm)
            if run.status == "completed":
                by_arm[arm][seed] = run
            elif run.status != "running":  # a sweep still under way is not a failure
                failed[arm] += 1
        return cls(dict(by_arm), dict(failed), frozenset(swept))


# --- the scoreboard ----------------------------------------------------------------------------------------------
@dataclass
class Row:
    """One claim's result (``scoreboard.csv``)."""

    claim: Claim
    status: str  # "run", or "not run (<arms> missing)"
    a_mean: float = math.nan  # A's final accuracy, mean over the paired seeds
    b_mean: float = math.nan  # B's at A's final step
    rollouts: Interval | None = None  # A - B at equal rollouts
    time: Interval | None = None  # A - B at equal training time (B = grpo only)
    tokens: Interval | None = None  # A - B at equal training tokens (B = grpo only; runs that record them)
    capped: int = 0  # seeds where GRPO's whole run trained less time than A (its last evaluation used)
    notes: str = ""
    tests: list[OneSidedTest] = field(default_factory=list)  # the verdicts' one-sided tests at equal rollouts
    family: int = 0  # the hypotheses of the Holm family this row was judged in (``judge``)
    seeds: tuple[int, ...] = ()  # the paired seeds
    construction: str = "-"  # whether the claim holds by construction on those seeds' students (``construction``)

    @property
    def verdict(self) -> str:
        return self._judged(self.rollouts) or self.status

    @property
    def holm_verdict(self) -> str:
        """The verdict whose hypothesis Holm rejects ("reproduced" first), else inconclusive; "" when untested."""
        if not self.tests:
            return ""
        rejected = [test.verdict for test in self.tests if test.rejected]
        text = rejected[0] if rejected else "inconclusive"
        if len(rejected) == 2:  # both hypotheses: reproduced, and smaller than the margin
            text = sized(self.claim.kind, below=True, above=False, margin_name=self.claim.margin_name)
        return text.replace("reproduced", "supported") if self.claim.hypothesis else text

    @property
    def knife_edge(self) -> bool:
        """A raw bound within ``KNIFE_EDGE`` of the threshold it is compared with."""
        interval = self.rollouts
        if interval is None or interval.n < 2:
            return False
        low, high = (-interval.high, -interval.low) if self.claim.kind == "worse" else (interval.low, interval.high)
        floor, ceiling = thresholds(self.claim.kind, self.claim.margin)
        return abs(low - floor) < KNIFE_EDGE or abs(high - ceiling) < KNIFE_EDGE

    def detectable(self) -> tuple[float, float]:
        """The effect detectable with 80% power: raw (one-sided 0.025) and at Holm's strictest level."""
        if self.rollouts is None:
            return math.nan, math.nan
        strictest = ALPHA / self.family if self.family else math.nan
        return detectable_effect(self.rollouts, RAW_LEVEL), detectable_effect(self.rollouts, strictest)

    @property
    def time_verdict(self) -> str:
        return self._judged(self.time)

    @property
    def tokens_verdict(self) -> str:
        return self._judged(self.tokens)

    def _judged(self, interval: Interval | None) -> str:
        """The claim's verdict on ``interval`` ("" without one), in the claim's words: a hypothesis (a proposal's,
        never measured by its authors) is supported or not, a paper's result reproduced or not."""
        if interval is None or not interval.n:
            return ""
        text = verdict(interval, self.claim.kind, self.claim.margin, self.claim.margin_name)
        return text.replace("reproduced", "supported") if self.claim.hypothesis else text


def score(claim: Claim, arms: Arms) -> Row:
    missing = [arm for arm in (claim.a, claim.b) if not arms.runs.get(arm)]
    if missing:
        return Row(claim, f"not run ({', '.join(missing)} missing)")
    a_runs, b_runs = arms.runs[claim.a], arms.runs[claim.b]
    pairs, a_values, b_values, timed, tokened, notes, capped, seeds = [], [], [], [], [], [], 0, []
    for seed in sorted(set(a_runs) & set(b_runs)):
        a, b = a_runs[seed], b_runs[seed]
        a_value, step = a.value(METRIC), final_step(a)
        b_eval = at_step(b, step)
        if a_value is None or b_eval is None:
            continue
        seeds.append(seed)
        if b_eval["step"] != step:
            notes.append(f"seed {seed}: {claim.b} has no evaluation at step {step} (step {b_eval['step']} used)")
        pairs.append(a_value - b_eval[METRIC])
        a_values.append(a_value)
        b_values.append(b_eval[METRIC])
        a_seconds, a_tokens = a.value(TIME), a.value(TOKENS)
        if claim.b == BASELINE and a_seconds is not None:
            b_timed, short = within(b, TIME, a_seconds)
            if b_timed is not None:
                timed.append(a_value - b_timed[METRIC])
                capped += short
        if claim.b == BASELINE and a_tokens is not None:
            b_tokened, _ = within(b, TOKENS, a_tokens)
            if b_tokened is not None:
                tokened.append(a_value - b_tokened[METRIC])
    if not pairs:
        return Row(claim, "not run (no seed completed in both arms)")
    if capped:
        notes.append(f"{capped} seed(s): GRPO trained less time than {claim.a} in all (its final evaluation used)")
    rollouts = paired_interval(pairs)
    return Row(
        claim,
        "run",
        statistics.fmean(a_values),
        statistics.fmean(b_values),
        rollouts,
        paired_interval(timed) if claim.b == BASELINE else None,
        paired_interval(tokened) if tokened else None,
        capped,
        "; ".join(notes),
        tests=one_sided_tests(rollouts, claim.kind, claim.margin),
        seeds=tuple(seeds),
    )


Premises = Mapping[int, Mapping[str, float]]  # seed -> the premise figures of the student that seed trained


def construction(row: Row, premises: Premises | None) -> str:
    """Whether the row's claim holds by construction on the students of its seeds (``Claim.by_construction``): on
    how many, with the figure's range; "-" for a claim without such a check, "not measured" without the figures."""
    check = row.claim.by_construction
    if check is None:
        return "-"
    values = [premises[seed][check.key] for seed in row.seeds if check.key in (premises or {}).get(seed, {})]
    if not values:
        return "not measured"
    held = sum(value < check.below for value in values)
    return (
        f"{held} of {len(values)} students: {check.key} {min(values):.3f}-{max(values):.3f} (below "
        f"{check.below:g}: {check.why})"
    )


def read_premises(path: Path) -> dict[int, dict[str, float]]:
    """The premise figures per seed of ``research/premises_students.py``'s file (``{"figures": {seed: {...}}}``)."""
    import json

    try:
        figures = json.loads(path.read_text(encoding="utf-8"))["figures"]
        return {int(seed): {str(k): float(v) for k, v in values.items()} for seed, values in figures.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise UserError(f"{path}: not a readable premises file ({err.__class__.__name__}: {err})",
                        "point --premises at a file research/premises_students.py wrote") from None  # fmt: skip


def judge(rows: Sequence[Row]) -> None:
    """Holm over the family of every hypothesis the rows test (two per measured claim), in place."""
    family = [test for row in rows for test in row.tests]
    holm(family)
    for row in rows:
        row.family = len(family)


def arm_rows(arms: Arms) -> list[dict[str, Any]]:
    """Per arm: completed and failed runs, steps, final accuracy, the mean accuracy at each evaluated step, how many
    runs collapsed and when, training and whole-job wall time (means)."""
    rows = []
    for arm in sorted(set(arms.runs) | set(arms.failed), key=_arm_order):
        runs = list(arms.runs.get(arm, {}).values())
        mean = lambda values: statistics.fmean(values) if values else math.nan  # noqa: E731
        accuracy = [v for v in (run.value(METRIC) for run in runs) if v is not None]
        collapses = [collapse_step(run) for run in runs]
        rows.append({
            "arm": arm,
            "n": len(runs),
            "failed": arms.failed.get(arm, 0),
            "steps": mean([final_step(run) for run in runs]),
            f"{METRIC} mean": mean(accuracy),
            f"{METRIC} std": statistics.stdev(accuracy) if len(accuracy) > 1 else math.nan,
            "accuracy by step": accuracy_by_step(runs),
            "collapsed": sum(step is not None for step in collapses),
            "collapse_step mean": mean([step for step in collapses if step is not None]),
            "train_seconds mean": mean([v for v in (run.value(TIME) for run in runs) if v is not None]),
            "job_seconds mean": mean([v for v in (run.value("wall_time_s") for run in runs) if v is not None]),
        })  # fmt: skip
    return rows


def accuracy_by_step(runs: Sequence[Run]) -> str:
    """The mean accuracy at each step every run evaluated, as "step: accuracy" pairs."""
    by_step: dict[int, list[float]] = defaultdict(list)
    for run in runs:
        for record in evaluations(run):
            by_step[int(record["step"])].append(record[METRIC])
    shared = [step for step, values in sorted(by_step.items()) if len(values) == len(runs)]
    return ", ".join(f"{step}: {statistics.fmean(by_step[step]):.3f}" for step in shared)


def _arm_order(arm: str) -> tuple[int, str]:
    order = [BASELINE] + [arm for claim in claims() for arm in (claim.a, claim.b)]
    return (order.index(arm), arm) if arm in order else (len(order), arm)


def csv_row(row: Row) -> dict[str, Any]:
    claim = row.claim
    record: dict[str, Any] = {
        "claim": claim.id, "source": claim.source, "statement": claim.statement, "a": claim.a, "b": claim.b,
        "kind": claim.kind, "margin": claim.margin, "margin_source": claim.margin_source,
        "differences": claim.differences, "metric": METRIC,
        "n": row.rollouts.n if row.rollouts else 0, "a_mean": row.a_mean,
        "b_mean": row.b_mean,
    }  # fmt: skip
    for name, interval in (("diff", row.rollouts), ("diff_equal_time", row.time), ("diff_equal_tokens", row.tokens)):
        record |= {name: math.nan, f"{name}_low": math.nan, f"{name}_high": math.nan}
        if interval is not None:
            record |= {name: interval.mean, f"{name}_low": interval.low, f"{name}_high": interval.high}
    for test in row.tests or [
        OneSidedTest("reproduced", ">", math.nan, math.nan),
        OneSidedTest("not reproduced", "<", math.nan, math.nan),
    ]:
        name = test.verdict.replace(" ", "_")
        record |= {f"p_{name}": test.p, f"p_holm_{name}": test.p_holm, f"threshold_{name}": test.threshold}
    raw, strictest = row.detectable()
    record |= {"holm_family": row.family, "detectable_effect": raw, "detectable_effect_holm": strictest,
               "knife_edge": row.knife_edge}  # fmt: skip
    record |= {"verdict": row.verdict, "verdict_holm": row.holm_verdict, "verdict_equal_time": row.time_verdict,
               "verdict_equal_tokens": row.tokens_verdict, "by_construction": row.construction,
               "notes": row.notes}  # fmt: skip
    return record


def interval_text(interval: Interval | None) -> str:
    if interval is None or not interval.n:
        return "-"
    if interval.n < 2:
        return f"{signed(interval.mean)} (n=1)"
    return f"{signed(interval.mean)} [{signed(interval.low)}, {signed(interval.high)}]"


def _tests_text(row: Row) -> str:
    """Each verdict's one-sided p, raw -> Holm-adjusted."""
    if not row.tests:
        return "-"
    return "; ".join(f"{test.direction}{test.threshold:+.3f}: {test.p:.4f} -> {test.p_holm:.4f}" for test in row.tests)


def _detectable_text(row: Row) -> str:
    raw, strictest = row.detectable()
    return "-" if math.isnan(raw) else f"{raw:.3f} / {strictest:.3f} (margin {row.claim.margin:.3f})"


def claims_markdown(shown: Sequence[Claim] | None = None) -> str:
    """The claims as a table (for docs/evidence.md)."""
    rows = [[f"`{c.id}`", c.source, c.statement, f"`{c.a}` {SIGNS[c.kind]} `{c.b}`"]
            for c in (claims() if shown is None else shown)]  # fmt: skip
    return markdown_table(["claim", "source", "statement", "arms"], rows)


def sweep_command(folder: Path) -> str | None:
    """The command of the sweep in ``folder``, from its ``multirun.yaml`` (the launch's overrides)."""
    import yaml

    launch = folder / "multirun.yaml"
    if not launch.is_file():
        return None
    # read as written: its interpolations (${seed}) are the command's
    overrides = ((yaml.safe_load(launch.read_text()) or {}).get("hydra") or {}).get("overrides", {})
    overrides = overrides.get("task") or []
    return "python -m socratic_exp " + " ".join(f"'{o}'" if "$" in o else o for o in overrides)


def sweep_commands(runs: Sequence[Run]) -> dict[Path, str | None]:
    """The command of each sweep the runs come from (a run read back from an evaluations file keeps its own)."""
    recorded = {run.path.parent: run.command for run in runs if isinstance(run, RecordedRun)}
    return {folder: recorded.get(folder) or sweep_command(folder) for folder in sorted({r.path.parent for r in runs})}


def evaluation_lines(runs: Sequence[Run], commands: dict[Path, str | None]) -> list[dict[str, Any]]:
    """Each run of an arm, as one line of the sweep's evaluations file."""
    return [
        run_line(run, run.overrides[ARM_KEY], seed, (METRIC, TIME, TOKENS), commands[run.path.parent])
        for run in runs
        if ARM_KEY in run.overrides and (seed := seed_of(run)) is not None
    ]


def _elsewhere_text(claims_left_out: Sequence[Claim]) -> str:
    if not claims_left_out:
        return ""
    names = ", ".join(f"`{claim.id}`" for claim in claims_left_out)
    return f"Not in this sweep (an arm of theirs has no run here): {names}.\n\n"


READING = (  # how the scoreboard is read, above its table
    f"Metric: final `{METRIC}`; A - B is the mean over seeds of the paired difference (same seed), with its 95% "
    "t-interval. Equal rollouts: B's evaluation at A's final step. Equal time: GRPO's last evaluation whose "
    f"training time (`{TIME}`, evaluations excluded) is at most A's. Equal tokens: GRPO's last evaluation whose "
    f"tokens generated and read in training (`{TOKENS}`, a measure of compute the machine's load does not change; "
    "'-' where the runs did not record it) are at most A's. Verdict (fixed in advance), with each "
    f"claim's margin (its paper's effect where it reports one, else {MARGIN}; `margin` in scoreboard.csv): a "
    "claim that A beats B is reproduced when the lower bound is > 0, not reproduced when the upper bound is below "
    "the margin (an effect that size is excluded), inconclusive otherwise; a claim that A does no worse (>=) is "
    "reproduced when the lower bound is above minus the margin, not reproduced when the upper bound is < 0; a "
    "claim that A is behind B (<) is the mirror of 'beats'. Each verdict is a one-sided test of its own "
    "hypothesis (the effect above the floor for 'reproduced', below the ceiling for 'not reproduced'; the raw "
    "interval's bounds are these tests at one-sided level 0.025). Holm: the family is every hypothesis this "
    f"scoreboard tests (two per measured claim); ranked by raw p, the k-th of m is rejected at {ALPHA} / "
    "(m - k + 1), so that the Holm verdicts together keep a 5% family-wise error rate; a claim whose hypotheses "
    "Holm rejects neither is inconclusive. Detectable: the smallest effect a one-sided test finds with 80% power "
    "on these seeds, raw and at Holm's strictest level (0.05 / m); a row whose raw bound is within "
    f"{KNIFE_EDGE * 100:.1f} points of its threshold is marked knife-edge. Holds by construction: for a claim "
    "that a student can make true before any run, on how many of the paired seeds' students it does, from their "
    "premise figures ('not measured' without them; '-': a claim without such a check).\n\n"
)


def scoreboard_markdown(
    rows: Sequence[Row],
    arm_table: Sequence[dict[str, Any]],
    source: str,
    commits: Sequence[str] = (),
    commands: Sequence[str] = (),
    elsewhere: Sequence[Claim] = (),
) -> str:
    header = ["claim", "source", "A vs B", "n", "A", "B", "A - B, equal rollouts [95% CI]", "verdict",
              "one-sided p, raw -> Holm (effect >floor; <ceiling)", "verdict (Holm)",
              "detectable with 80% power: raw / Holm-strictest (margin)", "A - B, equal time [95% CI]",
              "verdict (time)", "A - B, equal tokens [95% CI]", "verdict (tokens)", "holds by construction",
              "notes"]  # fmt: skip
    table = [
        [f"`{r.claim.id}`", r.claim.source, f"{r.claim.a} {SIGNS[r.claim.kind]} {r.claim.b}",
         r.rollouts.n if r.rollouts else 0, number(r.a_mean), number(r.b_mean), interval_text(r.rollouts),
         f"**{r.verdict}**" + (" (knife-edge)" if r.knife_edge else ""), _tests_text(r), r.holm_verdict,
         _detectable_text(r), interval_text(r.time), r.time_verdict, interval_text(r.tokens), r.tokens_verdict,
         r.construction, "; ".join(filter(None, [f"also differs: {r.claim.differences}" if r.claim.differences else "",
                                 r.notes])).replace("|", "/")]
        for r in rows
    ]  # fmt: skip
    arm_header = ["arm", "n", "failed", "steps", f"{METRIC} (mean +- std)", "by step (mean)",
                  f"collapsed (>= {COLLAPSE_DROP * 100:.0f} points below step 0): runs, mean step",
                  "training s (mean)", "job s (mean)"]  # fmt: skip
    arms = [
        [a["arm"], a["n"], a["failed"], number(a["steps"], 0),
         f"{number(a[f'{METRIC} mean'])}" + (f" +- {a[f'{METRIC} std']:.3f}" if a["n"] > 1 else ""),
         a["accuracy by step"], f"{a['collapsed']}" + (f", {a['collapse_step mean']:.0f}" if a["collapsed"] else ""),
         number(a["train_seconds mean"], 1), number(a["job_seconds mean"], 1)]
        for a in arm_table
    ]  # fmt: skip
    sweeps = "; ".join(f"`{command}`" for command in commands) or "not recorded"
    return (
        f"# Evidence scoreboard\n\nRuns from: {source}\n\nSweep: {sweeps}\n\nCode: "
        f"{', '.join(commits) or 'not recorded'} (the runs' `git_commit`; each run's composed config is in its "
        "`summary.json`)\n\n"
        f"{READING}"
        f"{markdown_table(header, table)}\n\n{_elsewhere_text(elsewhere)}"
        f"## Arms\n\nFinal accuracy at each arm's own last step ({BASELINE}: "
        f"its longer run); wall time: training (final `{TIME}`) and the whole job (`wall_time_s`: loading and "
        f"evaluations included).\n\n{markdown_table(arm_header, arms)}\n"
    )


# --- plots -------------------------------------------------------------------------------------------------------
def plot_forest(rows: Sequence[Row], path: Path) -> Path:
    """One line per claim: A - B at equal rollouts (circle), equal time (square) and equal tokens (triangle), each
    with its 95% CI, and
    the claim's margin (dashed: the paper's effect where the claim takes it, else 2 points; a "better" claim is not
    reproduced below it, a "not worse" one reproduced above it)."""
    figure, ax = pyplot().subplots(figsize=(8, 0.45 * len(rows) + 1.4))
    for index, row in enumerate(rows):
        shown = ((row.rollouts, -0.2, "o", "C0", "equal rollouts"), (row.time, 0.0, "s", "C1", "equal time"),
                 (row.tokens, 0.2, "^", "C2", "equal tokens"))  # fmt: skip
        for interval, offset, marker, color, label in shown:
            if interval is None or not interval.n:
                continue
            if interval.n > 1:
                ax.plot([interval.low, interval.high], [index + offset] * 2, color=color, lw=1.5)
            ax.plot(interval.mean, index + offset, marker=marker, color=color, label=label if index == 0 else None)
    ax.axvline(0.0, color="black", lw=0.8)
    for index, row in enumerate(rows):  # each claim's own margin: its paper's effect (red), or 2 points (grey)
        edge = -row.claim.margin if row.claim.kind in ("not_worse", "worse") else row.claim.margin
        papers = row.claim.margin_name == "the paper's"
        ax.plot([edge] * 2, [index - 0.35, index + 0.35], color="C3" if papers else "grey", lw=1.2, ls="--",
                label="the paper's effect" if papers else "the smallest effect of interest")  # fmt: skip
    labels = [f"{r.claim.id}" + ("" if r.status == "run" else " (not run)") for r in rows]
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set(xlabel=f"A - B, {METRIC} (mean over seeds, 95% CI)", title="Evidence scoreboard")
    handles, names = ax.get_legend_handles_labels()
    unique = dict(zip(names, handles, strict=True))
    ax.legend(unique.values(), unique.keys(), fontsize=7, loc="best")
    figure.tight_layout()
    return save(figure, path)


def plot_curves(arms: Arms, path: Path) -> Path:
    """Held-out accuracy per arm, mean over seeds: against the step (left) and the training time (right)."""
    figure, (by_step, by_time) = pyplot().subplots(1, 2, figsize=(13, 5))
    for index, arm in enumerate(sorted(arms.runs, key=_arm_order)):
        records = [evaluations(run) for run in arms.runs[arm].values()]
        style = {"color": f"C{index % 10}", "ls": "-" if index < 10 else "--", "marker": "o", "ms": 3}
        if mean_line(by_step, records, METRIC, f"{arm} (n={len(records)})", **style):
            mean_line(by_time, records, METRIC, f"{arm} (n={len(records)})", x=TIME, **style)
    by_step.set(xlabel="step (equal rollouts per step)", ylabel=f"{METRIC} (mean over seeds)", title="by rollouts")
    by_time.set(xlabel=f"training seconds ({TIME}, mean over seeds)", title="by training wall time")
    by_step.legend(fontsize=7)
    figure.tight_layout()
    return save(figure, path)


@dataclass
class Scoreboard:
    rows: list[Row]
    arms: list[dict[str, Any]]
    markdown: str
    files: list[Path]


def write_scoreboard(runs: Sequence[Run], out_dir: Path, scored: Sequence[Claim] | None = None,
                     premises: Premises | None = None) -> Scoreboard:  # fmt: skip
    """Score every claim (or those ``scored``) on ``runs`` and write the scoreboard's files into ``out_dir``;
    ``premises``: each seed's student's premise figures, for the claims that can hold by construction."""
    arms = Arms.of(runs)
    chosen = claims() if scored is None else scored
    # a claim whose arm the sweep never ran is another sweep's (e.g. the sparse regime's few arms); an arm whose
    # runs all failed stays a row, "not run"
    elsewhere = [claim for claim in chosen if not {claim.a, claim.b} <= arms.swept]
    rows = [score(claim, arms) for claim in chosen if claim not in elsewhere]
    if not rows:  # nothing measured is no scoreboard: write nothing, say why
        raise UserError(
            f"no claim of the scoreboard has both its arms among these {len(runs)} runs (arms found: "
            f"{', '.join(sorted(arms.swept)) or 'none'})",
            "point it at the folder of a +sweep=evidence or +sweep=evidence_sparse launch",
        )
    judge(rows)
    for row in rows:
        row.construction = construction(row, premises)
    arm_table = arm_rows(arms)
    out_dir.mkdir(parents=True, exist_ok=True)
    source = ", ".join(sorted({str(run.path.parent) for run in runs})) or "(no runs)"
    commits = sorted({str(run.summary["git_commit"]) for run in runs if run.summary.get("git_commit")})
    commands = sweep_commands(runs)
    markdown = scoreboard_markdown(rows, arm_table, source, commits, [c for c in commands.values() if c], elsewhere)
    write_csv(out_dir / "scoreboard.csv", [csv_row(row) for row in rows])
    files = [out_dir / "scoreboard.md", out_dir / "scoreboard.csv"]
    if not any(isinstance(run, RecordedRun) for run in runs):  # every run's evaluations, to rebuild this from
        files.append(write_evaluations(evaluation_lines(runs, commands), out_dir / EVALUATIONS_FILE))
    if arm_table:
        write_csv(out_dir / "scoreboard_arms.csv", arm_table)
        files.append(out_dir / "scoreboard_arms.csv")
    files.append(plot_forest(rows, out_dir / "scoreboard.png"))
    markdown += "\n![scoreboard](scoreboard.png)\n"
    if arms.runs:
        files.append(plot_curves(arms, out_dir / "evidence_curves.png"))
        markdown += "\n![evidence curves](evidence_curves.png)\n"
    files[0].write_text(markdown, encoding="utf-8")
    return Scoreboard(rows, arm_table, markdown, files)
