"""Every run of an evidence sweep as one line of ``evaluations.jsonl.gz``: what the scoreboard reads of it (arm, seed,
status, steps, final accuracy and training seconds, every held-out evaluation, and the run's config hash, student,
commit and sweep command). ``write_scoreboard`` writes the file beside the scoreboard, and
``python -m socratic_exp.report <file> --scoreboard`` rebuilds the scoreboard from it alone, to the digit: the file
is what a sweep ships under ``research/results/`` instead of its run folders.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from socratic_exp.core.errors import UserError
from socratic_exp.study.runs import Run

EVALUATIONS_FILE = "evaluations.jsonl.gz"
FORMAT = 1  # the lines' layout; a file of another one is refused


@dataclass
class RecordedRun(Run):
    """A run read back from an evaluations file: the summary fields the scoreboard reads, its evaluations as records,
    and the command of the sweep it came from."""

    evaluations: list[dict[str, Any]] | None = None
    command: str | None = None

    @property
    def records(self) -> list[dict[str, Any]]:  # type: ignore[override]
        return self.evaluations or []


def config_hash(config: Any) -> str | None:
    """The first 12 hex digits of the SHA-256 of the run's composed config as sorted JSON."""
    if not config:
        return None
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:12]


def run_line(run: Run, arm: str, seed: int, keys: tuple[str, str, str], command: str | None) -> dict[str, Any]:
    """The run's line; ``keys``: the metric, the training time and the training tokens. Each evaluation is
    ``[step, metric, time]``, with the tokens after them where the run recorded them."""
    summary = run.summary
    evaluations = sorted((r for r in run.records if r.get(keys[0]) is not None), key=lambda r: r["step"])
    return {
        "format": FORMAT,
        "folder": str(run.path.parent),
        "job": run.path.name,
        "arm": arm,
        "seed": seed,
        "status": run.status,
        "steps": summary.get("steps"),
        "final": {key: value for key in keys if (value := run.value(key)) is not None},
        "wall_time_s": summary.get("wall_time_s"),
        "git_commit": summary.get("git_commit"),
        "config_hash": config_hash(summary.get("config")),
        "student": (summary.get("student") or {}).get("name"),
        "command": command,
        "evaluations": [_evaluation(record, keys) for record in evaluations],
    }


def _evaluation(record: dict[str, Any], keys: tuple[str, str, str]) -> list[Any]:
    metric, time, tokens = keys
    spent = [record[tokens]] if record.get(tokens) is not None else []  # runs from before tokens were recorded: none
    return [record["step"], record[metric], record.get(time), *spent]


def write_evaluations(lines: Sequence[dict[str, Any]], path: Path) -> Path:
    """The lines, gzipped with no timestamp in the header (the same runs give the same bytes)."""
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as packed:
        packed.write("".join(json.dumps(line, sort_keys=True) + "\n" for line in lines).encode())
    return path


def read_evaluations(path: Path, arm_key: str, keys: tuple[str, str, str]) -> list[RecordedRun]:
    """The runs of an evaluations file, as the scoreboard reads run folders."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            lines = [json.loads(text) for text in handle if text.strip()]
    except (OSError, EOFError, json.JSONDecodeError) as err:
        raise UserError(f"{path}: not a readable evaluations file ({err})", "point it at an evaluations.jsonl.gz "
                        "that write_scoreboard wrote, or at the sweep's folder") from None  # fmt: skip
    runs = []
    for number, line in enumerate(lines, 1):
        if line.get("format") != FORMAT:
            raise UserError(f"{path}: line {number} has format {line.get('format')!r}, not {FORMAT}",
                            "rebuild the file from the sweep's folder with this version")  # fmt: skip
        summary = {
            "status": line["status"],
            "overrides": [f"+{arm_key}={line['arm']}", f"seed={line['seed']}"],
            "steps": line["steps"],
            "final": line["final"],
            "wall_time_s": line["wall_time_s"],
            "git_commit": line["git_commit"],
        }
        records = [dict(zip(("step", *keys), evaluation, strict=False)) for evaluation in line["evaluations"]]
        runs.append(RecordedRun(Path(line["folder"]) / line["job"], summary, records, line["command"]))
    return runs
