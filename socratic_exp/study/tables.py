"""The tables the report and the scoreboard write: mean and spread, signed differences, markdown, CSV."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from socratic_exp.core.curves import mean_std


def format_mean_std(values: Sequence[float], signed: bool = False, digits: int = 3) -> str:
    """``0.598 +- 0.007`` (the value alone for one value, ``-`` for none)."""
    mean, std, n = mean_std(values)
    if not n:
        return "-"
    shown = f"{mean:{'+' if signed else ''}.{digits}f}"
    return shown if n == 1 else f"{shown} +- {std:.{digits}f}"


def signed(value: float, digits: int = 3) -> str:
    """``+0.012`` / ``-0.004``; a value that rounds to zero shows as ``+0.000``, never ``-0.000``."""
    return f"{round(value, digits) or 0.0:+.{digits}f}"


def number(value: float | None, digits: int = 3) -> str:
    """A value with ``digits`` decimals, ``-`` for none (or nan)."""
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    """The rows as CSV, with the union of their keys as columns (in order of first appearance)."""
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(columns))
        writer.writeheader()
        writer.writerows(rows)
