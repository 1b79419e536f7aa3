"""Compare runs: ``python -m socratic_exp.report <sweep folder | run folders ...>``; one run folder: its own page.

``--scoreboard``: the evidence sweep's claims, one row each (``socratic_exp.study.evidence``). ``--rates``: each
evidence arm's learning rate, chosen on the selection sweep (``socratic_exp.study.rates``). ``--collapse``: the claims
that one arm collapses later than another, on long runs (``socratic_exp.study.collapse``).

A single run folder gets ``report.md`` and PNGs in that folder (``write_run_report``): the before/after table,
learning curves, the method's own telemetry (picked by the metric names it logged) and sample completions with
their verdicts and teacher guidance.

Reads run folders only (``summary.json``, ``metrics.jsonl``; never the network), groups the runs into variants by
the overrides that differ between them (``seed`` aside: seeds are what a variant aggregates over), and writes a
comparison as ``report.md`` + ``report.csv`` (mean, std and n of each final metric per variant, failed runs
counted), ``curves.png`` (the chosen metrics against the step, mean over seeds with a +- std band),
``finals.png`` (final metrics as bars with std error bars) and the plots of each method the runs used (its
``telemetry.py``'s ``sweep_figures``, see ``method_figures``); the table is also printed. ``--wandb ENTITY/PROJECT``
then uploads the runs' offline W&B folders (``wandb sync``) and builds a W&B report (``wandb-workspaces``): a run set
per sweep filtered to its group and launch, grouped by the swept keys, line plots with mean and standard error, bars,
and a run comparer. Without credentials or network it says so in one line; the local report is written anyway.

The same loading and aggregation serve the end-of-sweep summary (``sweep_summary.csv`` / ``.md``, one row per
job).
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from socratic_exp.core.curves import mean_std, plot_curves, plot_learning_curves, pyplot, save
from socratic_exp.core.errors import UserError
from socratic_exp.core.run_folder import DAMAGED, read_jsonl
from socratic_exp.core.secrets import scrub_data
from socratic_exp.study.runs import Run, find_runs, natural_key
from socratic_exp.study.tables import format_mean_std, markdown_table, signed, write_csv

SKIPPED_KEYS = ("seed", "resume", "dry_run")  # not what tells variants apart
STEP_KEY = "train/global_step"  # the x axis of W&B's panels (the run logs it with every metric)


def swept_keys(runs: Sequence[Run]) -> list[str]:
    """The override keys whose values differ between the runs, in the order they first appear (seed aside)."""
    keys: dict[str, None] = {}
    for run in runs:
        keys.update(dict.fromkeys(run.overrides))
    return [key for key in keys if key not in SKIPPED_KEYS and len({run.overrides.get(key) for run in runs}) > 1]


def variant_of(run: Run, keys: Sequence[str]) -> str:
    return " ".join(f"{key}={run.overrides.get(key, '-')}" for key in keys) or "all runs"


def default_metrics(runs: Sequence[Run]) -> list[str]:
    """The objective and its gain over the run's start, the other top-level evaluation metrics, the wall time."""
    objective = runs[0].objective_key if runs else "objective"
    finals: dict[str, None] = {}
    for run in runs:
        finals.update(dict.fromkeys(k for k in run.summary.get("final") or {} if k.count("/") == 1))
    others = [key for key in finals if key != objective]
    return [objective, f"{objective} gain", *others, "wall_time_s"]


@dataclass
class Variant:
    name: str
    settings: dict[str, str]
    runs: list[Run]  # completed
    failed: int

    def values(self, metric: str) -> list[float]:
        return [v for v in (run.value(metric) for run in self.runs) if v is not None]


def group_variants(runs: Sequence[Run], keys: Sequence[str]) -> list[Variant]:
    """Runs grouped by their values of ``keys``, in order of first appearance; failed runs are counted, not used."""
    groups: dict[str, Variant] = {}
    for run in runs:
        name = variant_of(run, keys)
        variant = groups.setdefault(name, Variant(name, {k: run.overrides.get(k, "-") for k in keys}, [], 0))
        if run.status == "completed":
            variant.runs.append(run)
        else:
            variant.failed += 1
    return list(groups.values())


def comparison_rows(variants: Sequence[Variant], metrics: Sequence[str]) -> list[dict[str, Any]]:
    """One row per variant: its settings, n, failed, and mean / std of each metric (the CSV's rows)."""
    rows = []
    for variant in variants:
        row: dict[str, Any] = {"variant": variant.name}
        row |= {key: value for key, value in variant.settings.items() if key != "variant"}  # +variant: in the name
        row["n"], row["failed"] = len(variant.runs), variant.failed
        for metric in metrics:
            mean, std, _ = mean_std(variant.values(metric))
            row[f"{metric} mean"], row[f"{metric} std"] = mean, std
        rows.append(row)
    return rows


def comparison_markdown(variants: Sequence[Variant], metrics: Sequence[str]) -> str:
    header = ["variant", "n", "failed", *metrics]
    rows = [
        [variant.name, len(variant.runs), variant.failed]
        + [format_mean_std(variant.values(m), signed=m.endswith(" gain")) for m in metrics]
        for variant in variants
    ]
    return markdown_table(header, rows)


def plot_finals(variants: Sequence[Variant], metrics: Sequence[str], path: Path) -> Path | None:
    """One panel per metric (three to a row): a horizontal bar per variant at its mean, the std as error bar."""
    shown = [m for m in metrics if any(v.values(m) for v in variants)]
    if not shown:
        return None
    columns = min(3, len(shown))
    rows = math.ceil(len(shown) / columns)
    height = 0.8 + 0.35 * len(variants)
    figure, axes = pyplot().subplots(rows, columns, figsize=(5.2 * columns, height * rows), squeeze=False)
    labels = [f"{v.name} (n={len(v.values(shown[0]))})" for v in variants]
    for index, ax in enumerate(axes.flat):
        if index >= len(shown):
            ax.set_visible(False)
            continue
        stats = [mean_std(v.values(shown[index])) for v in variants]
        positions = list(range(len(variants)))
        ax.barh(positions, [0.0 if n == 0 else mean for mean, _, n in stats],
                xerr=[0.0 if math.isnan(std) else std for _, std, _ in stats], capsize=3,
                color=[f"C{i % 10}" for i in positions])  # fmt: skip
        ax.set_yticks(positions, labels if index % columns == 0 else [""] * len(positions), fontsize=7)
        ax.invert_yaxis()
        ax.set_title(shown[index], fontsize=9)
    figure.tight_layout()
    return save(figure, path)


def method_figures(variants: Sequence[Variant], out_dir: Path) -> list[tuple[str, Path]]:
    """Each method's own plots of the variants, drawn by its declaration's ``sweep_figures`` (None where the runs did
    not use the method: it judges by the metrics they logged, as its run-report ``figures`` do). Returns the plots
    drawn, (title, path)."""
    from socratic_exp.runtime.methods import declared_methods

    drawn = []
    for method in declared_methods():
        if method.sweep_figures is not None:
            drawn += [(title, path) for title, path in method.sweep_figures(variants, out_dir) if path is not None]
    return drawn


@dataclass
class Report:
    variants: list[Variant]
    keys: list[str]
    metrics: list[str]
    markdown: str
    files: list[Path]


def build_report(
    runs: Sequence[Run],
    out_dir: Path,
    metrics: Sequence[str] | None = None,
    curves: Sequence[str] | None = None,
    keys: Sequence[str] | None = None,
) -> Report:
    """Group, aggregate and write ``report.md``, ``report.csv``, ``curves.png``, ``finals.png`` and the methods' own
    plots (``method_figures``) in ``out_dir``."""
    keys = list(keys) if keys is not None else swept_keys(runs)
    metrics = list(metrics or default_metrics(runs))
    curves = list(curves or [runs[0].objective_key, "reward"])
    variants = group_variants(runs, keys)
    out_dir.mkdir(parents=True, exist_ok=True)
    table = comparison_markdown(variants, metrics)
    sources = sorted({str(run.path.parent) for run in runs})
    markdown = (
        f"# Comparison of {len(runs)} runs\n\nRuns from: {', '.join(sources)}\n\n"
        f"Variants by: {', '.join(keys) or '(no differing overrides)'}; mean +- std over completed runs "
        "(seeds); n = completed runs, failed = runs that did not complete.\n\n"
        f"{table}\n"
    )
    write_csv(out_dir / "report.csv", comparison_rows(variants, metrics))
    files = [out_dir / "report.md", out_dir / "report.csv"]
    for plotted in (
        plot_curves(variants, curves, out_dir / "curves.png"),
        plot_finals(variants, metrics, out_dir / "finals.png"),
    ):
        if plotted is not None:
            markdown += f"\n![{plotted.stem}]({plotted.name})\n"
            files.append(plotted)
    for title, plotted in method_figures(variants, out_dir):
        markdown += f"\n## {title}\n\n![{plotted.stem}]({plotted.name})\n"
        files.append(plotted)
    files[0].write_text(markdown, encoding="utf-8")
    return Report(variants, keys, metrics, table, files)


def write_sweep_summary(sweep_dir: Path) -> list[dict[str, Any]]:
    """``sweep_summary.csv`` and ``sweep_summary.md`` in ``sweep_dir``: every job's status, overrides, objective,
    final evaluation metrics, wall time and error. Returns the rows."""
    runs = [run for run in find_runs([sweep_dir]) if run.path.parent == sweep_dir.resolve()]
    differing = [key for key in [*swept_keys(runs), "seed"] if len({run.overrides.get(key) for run in runs}) > 1]
    finals: dict[str, None] = {}
    for run in runs:
        finals.update(dict.fromkeys(k for k in run.summary.get("final") or {} if k.count("/") == 1))
    rows = []
    for run in runs:
        error = run.summary.get("error") or {}
        row: dict[str, Any] = {
            "job": run.path.name,
            "status": run.status,
            "objective": run.summary.get("objective"),
            "wall_time_s": run.summary.get("wall_time_s"),
            "overrides": " ".join(f"{k}={run.overrides.get(k, '-')}" for k in differing)
            or " ".join(run.summary.get("overrides", [])),
        }
        row.update({key: (run.summary.get("final") or {}).get(key) for key in finals})
        row["error"] = f"{error.get('type', '')}: {error.get('message', '')}" if error else ""
        rows.append(scrub_data(row))  # the sweep's secrets, should a job's record quote one
    if rows:
        write_csv(sweep_dir / "sweep_summary.csv", rows)
        counts = defaultdict(int)
        for row in rows:
            counts[row["status"]] += 1
        shown = [[_cell(v) for v in row.values()] for row in rows]
        (sweep_dir / "sweep_summary.md").write_text(
            f"# Sweep {sweep_dir}\n\n{len(rows)} jobs: "
            + ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
            + f"\n\n{markdown_table(list(rows[0]), shown)}\n",
            encoding="utf-8",
        )
    return rows


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return "" if value is None else str(value).replace("|", "\\|")


# --- one run ----------------------------------------------------------------------------------------------------
SAMPLE_ROWS = 6  # completions and guidance rows shown in a run report
CELL_CHARS = 160


def write_run_report(run: Run, out_dir: Path | None = None) -> list[Path]:
    """The page of one run, in its folder (or ``out_dir``): ``report.md`` with the before/after table, the
    learning curves, the method's own telemetry plots (chosen by the metric names the run logged) and a sample of
    completions with their verdicts and teacher guidance. Returns the files written."""
    from socratic_exp.runtime.methods import declared_methods

    out = out_dir or run.path
    out.mkdir(parents=True, exist_ok=True)
    records, summary = run.records, run.summary
    config = summary.get("config") or {}
    lines = [f"# Run {summary.get('run_name') or run.path.name}", "", f"Folder: {run.path}", ""]
    facts = [f"status **{run.status}**", f"{summary.get('steps', '?')} steps"]
    if isinstance(summary.get("wall_time_s"), int | float):
        facts.append(f"{summary['wall_time_s'] / 60:.1f} min")
    choices = summary.get("choices") or {}
    lines += [", ".join(facts) + ("; " + " ".join(f"{g}={c}" for g, c in choices.items()) if choices else ""), ""]
    if summary.get("overrides"):
        lines += ["Overrides: `" + " ".join(summary["overrides"]) + "`", ""]
    if (summary.get("error") or {}).get("message"):
        lines += [f"Error: {summary['error'].get('type', '')}: {summary['error']['message']}", ""]
    lines += ["## Held-out results (before -> after training)", "", before_after_table(summary), ""]
    if (summary.get("collapse") or {}).get("stopped_at_step") is not None:
        collapse = summary["collapse"]
        lines += [f"Collapse guard: stopped at step {collapse['stopped_at_step']}, the weights of step "
                  f"{collapse['restored_step']} are the final model.", ""]  # fmt: skip
    files = [out / "report.md"]
    figures: list[tuple[str, Path | None]] = [
        ("Learning curves", plot_learning_curves(records, out / "learning_curves.png"))
    ]
    for method in declared_methods():  # each method's own plots, of the metrics it logged
        if method.figures is not None:
            figures += method.figures(records, config, out)
    for title, figure in figures:
        if figure is not None:
            lines += [f"## {title}", "", f"![{figure.stem}]({figure.name})", ""]
            files.append(figure)
    lines += completion_samples(run.path)
    files[0].write_text("\n".join(lines), encoding="utf-8")
    return files


def before_after_table(summary: dict[str, Any]) -> str:
    """Each top-level evaluation metric before and after training (the run's end-of-run table)."""
    initial, final = summary.get("initial") or {}, summary.get("final") or {}
    keys = [k for k in {**initial, **final} if k.startswith("eval/") and k.count("/") == 1]
    if not keys:
        return "(no evaluation recorded)"
    rows = [[k, _cell(initial.get(k)), _cell(final.get(k)), _change(initial.get(k), final.get(k))] for k in keys]
    return markdown_table(["metric", "before", "after", "change"], rows)


def _change(before: Any, after: Any) -> str:
    both = isinstance(before, int | float) and isinstance(after, int | float)
    return signed(after - before, digits=4) if both else ""


def completion_samples(run_dir: Path) -> list[str]:
    """Markdown sections: the latest training completions with their rewards (TRL's completions table), and the
    latest teacher guidance with the verdict it answered."""
    lines: list[str] = []
    tables = sorted((run_dir / "checkpoints" / "completions").glob("completions_*.parquet"), key=natural_key)
    if tables:
        import pandas

        frame = pandas.read_parquet(tables[-1])
        columns = [c for c in frame.columns if c not in ("prompt", "completion", "step", "image")]
        rows = [
            [_text(row.get("prompt")), _text(row.get("completion"))] + [_cell(row.get(c)) for c in columns]
            for row in frame.head(SAMPLE_ROWS).to_dict("records")
        ]
        lines += [f"## Completions (training, {tables[-1].stem}; reward = the verifier's verdict)", ""]
        lines += [markdown_table(["prompt", "completion", *columns], rows), ""]
    entries = read_jsonl(run_dir / "teacher_guidance.jsonl")
    if entries:
        header = ["step", "question", "attempt", "verdict", "guidance", "leaked"]
        rows = [
            [str(e.get("step", "")), _text(e.get("question")), _text(e.get("attempt")), _text(e.get("reason")),
             _text(e.get("guidance")), str(e.get("leaked", ""))]
            for e in entries[-SAMPLE_ROWS:]
        ]  # fmt: skip
        if rows:
            lines += ["## Teacher guidance (latest; verdict = why the attempt was judged wrong)", ""]
            lines += [markdown_table(header, rows), ""]
    if not lines:
        lines = ["## Completions", "", "(none recorded: algorithm.log_completions=false and no teacher)", ""]
    return lines


def _text(value: Any) -> str:
    if isinstance(value, list):  # chat messages
        value = " / ".join(str(m.get("content", m)) if isinstance(m, dict) else str(m) for m in value)
    text = " ".join(str(value if value is not None else "").split())
    text = text if len(text) <= CELL_CHARS else text[: CELL_CHARS - 3] + "..."
    return text.replace("|", "\\|")


# --- W&B ---------------------------------------------------------------------------------------------------------


def wandb_report(
    runs: Sequence[Run],
    report: Report,
    entity: str,
    project: str,
    curves: Sequence[str],
    title: str | None = None,
) -> Any:
    """The W&B report (``wandb_workspaces.reports.v2``) for ``runs``, built without the network: one run set per
    sweep, filtered to its W&B group and launch, grouped by the swept keys; a line plot per curve (mean over the
    group, stderr band), final-metric bars (mean, stderr) and a run comparer. ``.save()`` needs the server."""
    import wandb_workspaces.reports.v2 as wr

    groupby = [f"config.sweep.overrides.{key}" for key in report.keys]
    runsets = []
    for group, launches in _groups_and_launches(runs).items():
        conditions = [f"Group = {group!r}"]
        if launches:
            conditions.append(f"Config('sweep.launch') in {sorted(launches)!r}")
        runsets.append(
            wr.Runset(entity=entity, project=project, name=group, filters=" and ".join(conditions), groupby=groupby)
        )
    final_metrics = [m for m in report.metrics if not m.endswith(" gain") and m != "wall_time_s"]
    panels = [
        wr.LinePlot(title=metric, x=STEP_KEY, y=[metric], groupby_aggfunc="mean", groupby_rangefunc="stderr")
        for metric in curves
    ]
    panels.append(
        wr.BarPlot(
            title="final metrics (mean, stderr)",
            metrics=final_metrics,
            groupby_aggfunc="mean",
            groupby_rangefunc="stderr",
        )
    )
    panels.append(wr.RunComparer(diff_only="split"))
    sweeps = ", ".join(_groups_and_launches(runs))
    return wr.Report(
        entity=entity,
        project=project,
        title=title or f"socratic_exp: {sweeps}",
        description=f"{len(runs)} runs, variants by {', '.join(report.keys) or 'nothing'} (socratic_exp.study.report)",
        blocks=[
            wr.H1(text=f"Sweep {sweeps}"),
            wr.P(
                text=f"Variants by {', '.join(report.keys) or 'nothing'}; lines and bars: mean over seeds, band "
                "and bars: standard error."
            ),
            wr.PanelGrid(runsets=runsets, panels=panels),
            wr.H2(text="Local comparison (mean +- std)"),
            wr.MarkdownBlock(text=report.markdown),
        ],
    )


def _groups_and_launches(runs: Sequence[Run]) -> dict[str, set[str]]:
    groups: dict[str, set[str]] = defaultdict(set)
    for run in runs:
        launch = run.summary.get("sweep_launch")
        groups[str(run.summary.get("run_group") or run.path.parent.name)].update([launch] if launch else [])
    return dict(groups)


def publish_wandb(runs: Sequence[Run], built: Any) -> str:
    """Upload the offline W&B runs (``wandb sync``) and save the report; one line saying what happened."""
    mode = os.environ.get("WANDB_MODE", "")
    if mode in ("offline", "disabled", "dryrun"):
        return f"W&B report not saved: WANDB_MODE={mode} (offline)"
    try:
        import wandb

        wandb.Api(timeout=20).viewer  # noqa: B018  (a request that fails fast without credentials or network)
    except Exception as err:
        return f"W&B report not saved: offline or not logged in ({str(err).splitlines()[0][:120]})"
    offline = [str(folder) for run in runs for folder in sorted((run.path / "wandb").glob("offline-run-*"))]
    if offline:
        subprocess.run([sys.executable, "-m", "wandb", "sync", *offline], check=False)
    missing = sum(1 for run in runs if not run.summary.get("wandb_run_id"))
    built.save()
    note = f" ({missing} runs had no W&B run: logger=none)" if missing else ""
    return f"W&B report: {built.url}{note}"


def written(files: Sequence[Path], started: float) -> str:
    return f"\nwritten: {', '.join(str(f) for f in files)} ({time.perf_counter() - started:.1f} s)"


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m socratic_exp.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", type=Path, help="a sweep folder, run folders, or folders holding them")
    parser.add_argument("--metrics", help="comma-separated final metrics (default: the objective, its gain, the "
                        "other eval metrics, wall_time_s); '<metric> gain' = final - before training")  # fmt: skip
    parser.add_argument("--curves", help="comma-separated metrics plotted against the step (default: the "
                        "objective and reward)")  # fmt: skip
    parser.add_argument("--by", help="comma-separated override keys that define a variant (default: those that "
                        "differ between runs, seed aside)")  # fmt: skip
    parser.add_argument("--out", type=Path, help="output folder (default: the folder given, when one; else ./report)")
    parser.add_argument("--wandb", metavar="ENTITY/PROJECT", help="also build a W&B report there (after wandb sync)")
    parser.add_argument("--title", help="the W&B report's title")
    parser.add_argument("--scoreboard", action="store_true", help="the evidence sweep's scoreboard instead "
                        "(sweeps/evidence.yaml: each claim, paired by seed; socratic_exp.study.evidence)")  # fmt: skip
    parser.add_argument("--premises", type=Path, help="with --scoreboard: each seed's student's premise figures "
                        "(research/premises_students.py's file), for claims that can hold by construction")  # fmt: skip
    parser.add_argument("--collapse", action="store_true", help="the claims that one arm collapses later than "
                        "another, on long runs' curves (socratic_exp.study.collapse)")  # fmt: skip
    parser.add_argument("--evaluations", action="store_true", help="only the evidence runs' evaluations file "
                        "(evaluations.jsonl.gz, what --scoreboard and --collapse rebuild from), scoring nothing: a "
                        "launch's record, kept before the scoreboard is built")  # fmt: skip
    parser.add_argument("--rates", action="store_true", help="each evidence arm's learning rate, chosen on the "
                        "selection sweep by its fixed rule (sweeps/evidence_rates_selection.yaml; "
                        "socratic_exp.study.rates)")  # fmt: skip
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = arguments().parse_args(argv)

    started = time.perf_counter()
    missing = [str(p) for p in args.paths if not p.exists()]
    if missing:
        print(f"error: not found: {' '.join(missing)}", file=sys.stderr)
        return 2
    if args.rates:
        return _rates(args.paths, args.out, started)
    if args.collapse:
        return _collapse(args.paths, args.out, started)
    if args.scoreboard and all(path.is_file() for path in args.paths):  # a sweep's evaluations file(s)
        return _scoreboard_from_files(args.paths, args.out, started, args.premises)
    if args.evaluations:
        return _evaluations(args.paths, args.out, started)
    runs = find_runs(args.paths)
    for run in runs:
        if run.summary.get("status") == DAMAGED:  # reported, counted as not completed; the others go on
            print(f"warning: {run.summary['error']['message']}: counted as not completed", file=sys.stderr)
    if not runs:
        print(f"error: no run folders (summary.json) in {' '.join(map(str, args.paths))}", file=sys.stderr)
        return 2
    if args.scoreboard:
        out = args.out or (args.paths[0] if len(args.paths) == 1 else Path("report"))
        return _scoreboard(runs, out, started, args.premises)
    if len(args.paths) == 1 and (args.paths[0] / "summary.json").is_file() and not args.wandb:
        files = write_run_report(runs[0], args.out)
        print(f"{runs[0].path}: {runs[0].status}\n\n{before_after_table(runs[0].summary)}")
        print(written(files, started))
        return 0
    split = lambda text: [item.strip() for item in text.split(",") if item.strip()] if text else None  # noqa: E731
    out_dir = args.out or (args.paths[0] if len(args.paths) == 1 and not (args.paths[0] / "summary.json").is_file()
                           else Path("report"))  # fmt: skip
    curves = split(args.curves) or [runs[0].objective_key, "reward"]
    report = build_report(runs, out_dir, split(args.metrics), curves, split(args.by))
    completed = sum(len(v.runs) for v in report.variants)
    print(f"{len(runs)} runs ({completed} completed) in {len(report.variants)} variants by "
          f"{', '.join(report.keys) or '(nothing differs)'}; mean +- std over completed runs\n")  # fmt: skip
    print(report.markdown)
    print(written(report.files, started))
    if args.wandb:
        entity, _, project = args.wandb.partition("/")
        if not entity or not project:
            print("error: --wandb takes ENTITY/PROJECT", file=sys.stderr)
            return 2
        print(publish_wandb(runs, wandb_report(runs, report, entity, project, curves, args.title)))
    return 0


def _scoreboard(runs: list[Run], out: Path, started: float, premises: Path | None = None) -> int:
    from socratic_exp.study.evidence import read_premises, write_scoreboard

    try:
        board = write_scoreboard(runs, out, premises=read_premises(premises) if premises else None)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(board.markdown)
    print(written(board.files, started))
    return 0


def _recorded(paths: list[Path]) -> list[Run]:
    """The evidence runs of evaluations files (``socratic_exp.study.evaluations``) or of sweep folders."""
    from socratic_exp.study.evaluations import read_evaluations
    from socratic_exp.study.evidence import ARM_KEY, METRIC, TIME, TOKENS

    if all(path.is_file() for path in paths):
        return [run for path in paths for run in read_evaluations(path, ARM_KEY, (METRIC, TIME, TOKENS))]
    return find_runs(paths)


def _scoreboard_from_files(paths: list[Path], out: Path | None, started: float, premises: Path | None) -> int:
    """The scoreboard rebuilt from evaluations files alone, written beside the first one unless ``--out`` says
    where."""
    try:
        runs = _recorded(paths)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return _scoreboard(runs, out or paths[0].parent, started, premises)


def _evaluations(paths: list[Path], out: Path | None, started: float) -> int:
    """The launch's evaluations file alone: every evidence run's line, nothing scored (no accuracy printed)."""
    from collections import Counter

    from socratic_exp.study.evaluations import EVALUATIONS_FILE, write_evaluations
    from socratic_exp.study.evidence import evaluation_lines, sweep_commands

    runs = find_runs(paths)
    lines = evaluation_lines(runs, sweep_commands(runs))
    if not lines:
        print(f"error: no evidence runs (+evidence_arm=..., seed=...) in {' '.join(map(str, paths))}: point "
              "--evaluations at an evidence sweep's launch folder", file=sys.stderr)  # fmt: skip
        return 2
    out = out or paths[0]
    out.mkdir(parents=True, exist_ok=True)
    path = write_evaluations(lines, out / EVALUATIONS_FILE)
    counts = sorted(Counter(line["status"] for line in lines).items())
    statuses = ", ".join(f"{count} {status}" for status, count in counts)
    arms = sorted({line["arm"] for line in lines})
    print(f"{len(lines)} runs ({statuses}) of {len(arms)} arms, seeds "
          f"{', '.join(map(str, sorted({line['seed'] for line in lines})))}: nothing scored")  # fmt: skip
    print(written([path], started))
    return 0


def _collapse(paths: list[Path], out: Path | None, started: float) -> int:
    from socratic_exp.study.collapse import write_collapse

    try:
        markdown, files = write_collapse(_recorded(paths), out or (paths[0].parent if paths[0].is_file() else paths[0]))
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(markdown)
    print(written(files, started))
    return 0


def _rates(paths: list[Path], out: Path | None, started: float) -> int:
    """The selection's rates from its launches' folders or ``rates.json`` files, read as one selection (written
    beside the first unless ``--out`` says where)."""
    from socratic_exp.study.rates import arm_rates, merged, read_rates, write_rates

    try:
        arms = merged([read_rates(path) if path.is_file() else arm_rates(find_runs([path])) for path in paths])
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    markdown, files = write_rates(arms, out or (paths[0].parent if paths[0].is_file() else paths[0]))
    print(markdown)
    print(written(files, started))
    return 0


if __name__ == "__main__":
    sys.exit(main())
