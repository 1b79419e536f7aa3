"""``task=openmath``: problems of nvidia/OpenMathReasoning (AoPS forum problems with extracted answers).

Records are the dataset's rows, ``{"problem", "expected_answer", "problem_type", "pass_rate_72b_tir", ...}``, one
per generated solution, so problems repeat: rows are de-duplicated by problem (the first row wins). By default
only ``has_answer_extracted`` problems are kept (``problem_types``): their answers are the forum's, where the
others' were written by a model or converted from a proof. ``pass_rate_72b_tir`` (Qwen2.5-72B's pass rate, a
prior difficulty) becomes the row's ``prior_pass_rate`` (null when "n/a") for the Goldilocks sampler, and its
``difficulty`` bucket (1: pass rate >= 0.8 ... 5: < 0.2; 0: unknown).

The Hub's ``cot`` split has 3.2M rows (71 GB): it is streamed, reading only the needed columns of the first
``hub_rows`` rows. Local parquet shards (``task.data_files.train=...parquet``) are read column-wise too. The eval
split is a held-out slice of the problems (``eval_set: holdout``, as in the Goldilocks paper) or an evaluation set.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from socratic_exp.core.component import setting
from socratic_exp.tasks.benchmark import MathTrainingTask, Row
from socratic_exp.tasks.hub_data import Located, Record, optional_text, read_file, read_hub, text


def pass_rate(value: object) -> float | None:
    try:
        rate = float(str(value))
    except ValueError:
        return None
    return rate if 0.0 <= rate <= 1.0 else None


@dataclasses.dataclass(kw_only=True)
class OpenMathTask(MathTrainingTask):
    hub_name: str = "nvidia/OpenMathReasoning"
    hub_split: str = setting("cot", "the Hub split whose problems are used")
    hub_rows: int | None = setting(
        200_000, "stream only the first N rows of the split (3.2M rows, 71 GB in all; null: download it all)", ge=1
    )
    problem_types: list[str] = setting(
        default_factory=lambda: ["has_answer_extracted"],
        help="keep problems of these problem_type values ([] keeps all)",
    )

    name: ClassVar[str] = "openmath"
    parquet_columns: ClassVar[tuple[str, ...]] = ("problem", "expected_answer", "problem_type", "pass_rate_72b_tir")

    def records(self, split: str) -> list[Located]:
        path = (self.data_files or {}).get(split)
        if path:
            return read_file(path, self.parquet_columns)
        if split != "train":
            raise self.missing_split(split)
        kwargs: dict[str, Any] = {"columns": list(self.parquet_columns)}
        return read_hub(
            self.hub_name,
            self.hub_config,
            self.hub_split,
            option=self.name,
            data_key="task.data_files.train",
            stream_limit=self.hub_rows,
            **kwargs,
        )

    def to_row(self, record: Record, where: str) -> Row | None:
        problem_type = record.get("problem_type")
        if self.problem_types and problem_type is not None and problem_type not in self.problem_types:
            return None
        answer = (optional_text(record, where, self.name, "expected_answer") or "").strip()
        if not answer:
            return None  # nothing to verify against
        rate = pass_rate(record.get("pass_rate_72b_tir"))
        return {
            "prompt": text(record, where, self.name, "problem").strip(),
            "answer": answer,
            "prior_pass_rate": rate,
            "difficulty": 0 if rate is None else 5 - min(4, int(rate * 5)),
        }

    def dedupe_key(self, row: Row) -> str | None:
        return row["prompt"]
