"""The end of a ``-m`` sweep: its summary files and a status table (``SweepStatus``, a Hydra callback that
``conf/hydra/default.yaml`` installs)."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf


class SweepStatus(Callback):
    """At the end of a ``-m`` sweep: ``sweep_summary.csv`` / ``.md`` and a table of every job's status and
    objective; exit 1 if any job failed."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """A paper sweep over a setup it makes no sense on is refused before any job starts (``multirun.grid``); any
        launcher's log lines (Hydra's own print each job's overrides) lose the secrets of the command line."""
        from socratic_exp.core.errors import UserError
        from socratic_exp.core.secrets import redact_logs, secret_values
        from socratic_exp.multirun.grid import check_setup

        overrides = [str(o) for o in OmegaConf.select(config, "hydra.overrides.task", default=[])]
        redact_logs(secret_values(overrides))
        choices = config.hydra.runtime.choices
        try:
            if choices.get("sweep"):
                check_setup(str(choices["sweep"]), choices.get("experiment"), overrides, choices.get("algorithm"))
        except UserError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from socratic_exp.core.run_folder import read_summary
        from socratic_exp.core.secrets import scrub_hydra_files, secret_values
        from socratic_exp.study.report import write_sweep_summary

        sweep_dir = Path(config.hydra.sweep.dir)
        # multirun.yaml holds the command line (the local launcher scrubs it at launch, Hydra's launchers here)
        scrub_hydra_files(sweep_dir, secret_values([str(o) for o in config.hydra.overrides.task]))
        if write_sweep_summary(sweep_dir):
            print(f"sweep summary: {sweep_dir / 'sweep_summary.md'} and .csv", file=sys.stderr)
        rows = []
        for summary_file in sorted(sweep_dir.glob("*/summary.json"), key=lambda p: _job_order(p.parent.name)):
            summary = read_summary(summary_file.parent)
            rows.append((summary_file.parent.name, summary.get("status", "?"), summary))
        if not rows:
            return
        print(f"\nSweep {sweep_dir}: {len(rows)} jobs", file=sys.stderr)
        for job, status, summary in rows:
            value = summary.get("objective")
            shown = f"{value:.4f}" if isinstance(value, float) and not math.isnan(value) else "-"
            detail = summary.get("error", {}).get("message", "") if status != "completed" else ""
            overrides = " ".join(summary.get("overrides", []))
            print(f"  #{job:<3} {status:<10} objective={shown:<8} {overrides}  {detail}".rstrip(), file=sys.stderr)
        failed = [job for job, status, _ in rows if status != "completed"]
        if failed:
            print(
                f"{len(failed)} of {len(rows)} jobs did not complete: {', '.join('#' + j for j in failed)}",
                file=sys.stderr,
            )
            sys.exit(1)


def _job_order(name: str) -> tuple[int, str]:
    return (int(name), "") if name.isdigit() else (sys.maxsize, name)
