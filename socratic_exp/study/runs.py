"""Run folders as the report and the scoreboard read them: ``summary.json`` and ``metrics.jsonl``, never the network."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from socratic_exp.core.run_folder import read_metrics, read_summary


@dataclass
class Run:
    """One run folder."""

    path: Path
    summary: dict[str, Any]

    @property
    def status(self) -> str:
        return str(self.summary.get("status", "unknown"))

    @property
    def overrides(self) -> dict[str, str]:
        """``key=value`` overrides as a dict (``+``/``~`` prefixes dropped), Hydra's own and ``resume`` aside."""
        pairs = (o.split("=", 1) for o in self.summary.get("overrides", []) if "=" in o)
        return {key.lstrip("+~"): value for key, value in pairs if not key.startswith("hydra")}

    @property
    def objective_key(self) -> str:
        return str((self.summary.get("config") or {}).get("objective") or "objective")

    @functools.cached_property
    def records(self) -> list[dict[str, Any]]:
        """``metrics.jsonl``: one dict per logged step."""
        return read_metrics(self.path)

    def value(self, metric: str) -> float | None:
        """A final value: ``<metric> gain`` (final - before training), a final evaluation metric, the last
        training log, or a top-level summary field (``wall_time_s``, ``steps``)."""
        if metric.endswith(" gain"):
            base = metric.removesuffix(" gain")
            after, before = self.value(base), (self.summary.get("initial") or {}).get(base)
            return after - before if after is not None and before is not None else None
        for source in (self.summary.get("final") or {}, self.summary.get("train") or {}, self.summary):
            found = source.get(metric)
            if isinstance(found, int | float) and not isinstance(found, bool):
                return float(found)
        return None


def find_runs(paths: Iterable[Path]) -> list[Run]:
    """The run folders in ``paths``: each a run folder (with ``summary.json``) or a folder holding some (a sweep
    folder, or ``outputs/``); hidden folders (``.submitit``, ``.hydra``) and checkpoints are not searched."""
    found: dict[Path, Run] = {}
    for path in paths:
        candidates = [path / "summary.json"] if (path / "summary.json").is_file() else _summaries_under(path)
        for summary_file in candidates:
            run_dir = summary_file.parent.resolve()
            found.setdefault(run_dir, Run(run_dir, read_summary(run_dir)))
    return sorted(found.values(), key=lambda run: natural_key(run.path))


def _summaries_under(root: Path) -> list[Path]:
    summaries = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = [s for s in subfolders if not s.startswith(".") and s not in ("checkpoints", "wandb")]
        if "summary.json" in files:
            summaries.append(Path(folder) / "summary.json")
            subfolders[:] = []
    return summaries


def natural_key(path: Path) -> tuple[Any, ...]:
    """Sorts ``sweep/10`` after ``sweep/9``."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in path.parts)
