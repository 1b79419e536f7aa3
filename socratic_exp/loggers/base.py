"""The logger interface. ``metrics.jsonl`` is always written by the run; a logger adds an experiment tracker."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, ClassVar

from socratic_exp.core.component import Component, setting


@dataclasses.dataclass
class RunInfo:
    run_dir: Path
    name: str
    group: str | None
    job_type: str
    tags: list[str]
    config: dict[str, Any]  # resolved, its secrets redacted (secrets.redact)
    resume_id: str | None = None
    resume_position: int | None = None  # the tracker's own step at the checkpoint the run resumes from


@dataclasses.dataclass(kw_only=True)
class Logger(Component):
    config_group: ClassVar[str] = "logger"

    tags: list[str] = setting(default_factory=list, help="added to the run's tags (which name its components)")

    def report_to(self) -> list[str]:
        """The ``report_to`` integrations for transformers / TRL trainers."""
        return []

    def start(self, info: RunInfo) -> str | None:
        """Open the tracker's run; returns its id (stored for resume)."""
        return None

    def position(self) -> int | None:
        """The tracker's own step of the latest row logged (kept with each checkpoint, so that a resumed run
        continues the tracker's history from there); None without one."""
        return None

    def log(self, metrics: dict[str, Any], step: int) -> None:
        """Metrics the trainer does not report itself (evaluations, summaries)."""

    def log_table(self, name: str, rows: list[dict[str, Any]], step: int) -> None:
        """Rows of samples (e.g. teacher guidance), as a table where the tracker has them."""

    def finish(self, exit_code: int = 0, summary: dict[str, Any] | None = None) -> None:
        """Close the run; a non-zero ``exit_code`` marks it failed."""
