"""``metrics.jsonl``, the run's record of every logged number, and the sink that writes it, the tracker and the
progress display together."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from socratic_exp.core.run_folder import finite, naming_the_file, read_jsonl

if TYPE_CHECKING:
    from socratic_exp.loggers.base import Logger


class MetricsFile:
    """``metrics.jsonl``: one JSON object per logged step. Only the main process of a distributed launch writes
    (``writes``); the others' writes and truncations do nothing."""

    def __init__(self, path: Path, writes: bool = True):
        self.path = path
        self.writes = writes

    def write(self, step: int, metrics: dict[str, Any]) -> None:
        if not self.writes:
            return
        record = {"step": step, "time": round(time.time(), 3), **metrics}
        with naming_the_file(self.path), self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(finite(record), default=str) + "\n")

    def truncate_after(self, step: int) -> int:
        """Drop records logged after ``step`` (they are re-done when a run resumes from that step's checkpoint)."""
        if not self.writes or not self.path.is_file():
            return 0
        lines = self.path.read_text(encoding="utf-8").splitlines()
        kept = [line for line in lines if line.strip() and json.loads(line).get("step", 0) <= step]
        with naming_the_file(self.path):
            self.path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        return len(lines) - len(kept)

    def read(self) -> list[dict[str, Any]]:
        return read_jsonl(self.path)


def resumed_metrics(run_dir: Path, checkpoint: str | None, evaluated: bool, writes: bool = True) -> MetricsFile:
    """``metrics.jsonl`` as a run goes on with it: after an earlier attempt that got past the first evaluation
    (``evaluated``), without the lines logged after ``checkpoint``'s step (they are logged again); else afresh."""
    metrics_file = MetricsFile(run_dir / "metrics.jsonl", writes=writes)
    step = int(Path(checkpoint).name.rsplit("-", 1)[1]) if checkpoint else 0
    if evaluated:
        dropped = metrics_file.truncate_after(step)
        logging.getLogger("socratic_exp").info(
            "resuming from %s (dropped %d metric lines after step %d)", checkpoint or "the start", dropped, step
        )
    elif writes:  # the main process alone: another one's unlink would remove what the main one has logged since
        metrics_file.path.unlink(missing_ok=True)
    return metrics_file


class MetricsSink:
    """Metrics to ``metrics.jsonl``, to the logger and to ``observe`` (the console's progress display)."""

    def __init__(self, file: MetricsFile, logger: Logger, observe: Callable[[int, dict[str, Any]], None] | None = None):
        self.file = file
        self.logger = logger
        self.observe = observe

    def record(self, step: int, metrics: dict[str, Any]) -> None:
        """``metrics.jsonl`` and the display only: for the trainer's own logs, which W&B receives from transformers."""
        self.file.write(step, metrics)
        if self.observe is not None:
            self.observe(step, metrics)

    def log(self, metrics: dict[str, Any], step: int) -> None:
        self.record(step, metrics)
        self.logger.log(metrics, step)

    def log_table(self, name: str, rows: list[dict[str, Any]], step: int) -> None:
        """Rows to ``<run folder>/<name>.jsonl`` and, as a table, to the logger."""
        if not rows or not self.file.writes:
            return
        path = self.file.path.parent / f"{name}.jsonl"
        with naming_the_file(path), open(path, "a", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps({"step": step, **row}) + "\n")
        self.logger.log_table(name, rows, step)

    def log_evaluation(self, metrics: dict[str, Any], step: int, guidance: list[dict[str, Any]]) -> None:
        """An evaluation's metrics, and the teacher guidance sampled since the last one (the ``teacher_guidance``
        table: ``Teacher.samples()``)."""
        self.log(metrics, step)
        self.log_table("teacher_guidance", guidance, step)
