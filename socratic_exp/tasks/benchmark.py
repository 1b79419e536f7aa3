"""The shared base of the real benchmark tasks: where records come from, how splits are sized, and seeds.

Sources. Each split (``train`` / ``eval``) comes from ``task.data_files.<split>`` when given (a local JSON Lines,
JSON or parquet file in the benchmark's own format), else from the task's Hub dataset (``task.hub_name``). Files
replace only the splits they name.

Sizes and seeds. ``probe_size`` questions are drawn out of the training pool (never trained on; Socratic-RL's probe
tasks), then ``train_size`` / ``eval_size`` cap the splits with seeded samples. Everything that decides *which*
held-out questions a run sees uses ``split_seed`` (fixed, so every seed of a sweep is evaluated on the same
questions); only the training subset follows the run's ``seed``.

Evaluation sets (MATH-500, AIME 2024/2025, AMC 2023) have no training split: training on them needs
``task.data_files.train``, and the usual setup is a training task that evaluates on them
(``task=dapo_math task.eval_set=aime24``).
"""

from __future__ import annotations

import dataclasses
import importlib
import random
from typing import TYPE_CHECKING, Any, ClassVar

from socratic_exp.core.component import setting
from socratic_exp.core.errors import UserError
from socratic_exp.tasks import verifiers
from socratic_exp.tasks.base import SPLITS, Task, Verdict
from socratic_exp.tasks.hub_data import Located, Record, read_file, read_hub

if TYPE_CHECKING:
    from datasets import DatasetDict

Row = dict[str, Any]

MATH_INSTRUCTION = (
    "Solve the following problem. Reason step by step, then write the final answer alone inside \\boxed{}."
)

# eval_set choices of the math training tasks -> the option class that loads them (imported when needed)
EVAL_SETS = {
    "math500": "socratic_exp.tasks.math500.Math500Task",
    "aime24": "socratic_exp.tasks.aime24.Aime24Task",
    "aime25": "socratic_exp.tasks.aime25.Aime25Task",
    "amc23": "socratic_exp.tasks.amc23.Amc23Task",
}
HOLDOUT = "holdout"


@dataclasses.dataclass(kw_only=True)
class BenchmarkTask(Task):
    """A task over a fixed set of questions, loaded from local files or the Hub (see the module docstring)."""

    hub_name: str = setting("", "the Hugging Face Hub dataset for splits without a file (from the HF cache offline)")
    hub_config: str | None = setting(None, "the Hub dataset's config (null: its default)")
    train_size: int | None = setting(None, "training problems, a sample drawn with seed (null: all of them)", ge=1)
    eval_size: int | None = setting(None, "held-out problems, a sample fixed by split_seed (null: all of them)", ge=1)
    probe_size: int = setting(0, "problems held out of training as probe tasks (Socratic-RL's viewpoint utility)", ge=0)
    split_seed: int = setting(42, "seed of every held-out choice (eval sample, probes): the same in every run", ge=0)
    system_prompt: str | None = setting(None, "the answer instruction (null: the task's own: step by step, \\boxed{})")

    name: ClassVar[str] = ""
    hub_splits: ClassVar[dict[str, str]] = {"train": "train", "eval": "test"}  # our split -> the Hub's split
    default_instruction: ClassVar[str] = MATH_INSTRUCTION
    load_kwargs: ClassVar[dict[str, Any]] = {}  # extra load_dataset arguments for the Hub dataset
    parquet_columns: ClassVar[tuple[str, ...]] = ()  # the columns read from parquet files (empty: all)

    def validate(self) -> None:
        super().validate()
        self.check("hub_name", bool(self.hub_name.strip()), "must name a Hugging Face Hub dataset")

    def instruction(self) -> str:
        return self.default_instruction if self.system_prompt is None else self.system_prompt

    # --- per benchmark ----------------------------------------------------------------------------------------
    def to_row(self, record: Record, where: str) -> Row | None:
        """One record as a row (``prompt``, ``answer``, ``difficulty``, ...); None leaves it out."""
        raise NotImplementedError

    def dedupe_key(self, row: Row) -> str | None:
        """Rows with the same key after the first are dropped (None: keep every row)."""
        return None

    # --- loading ----------------------------------------------------------------------------------------------
    def records(self, split: str) -> list[Located]:
        path = (self.data_files or {}).get(split)
        if path:
            return read_file(path, self.parquet_columns or None)
        hub_split = self.hub_splits.get(split)
        if hub_split is None:
            raise self.missing_split(split)
        return read_hub(
            self.hub_name,
            self.hub_config,
            hub_split,
            option=self.name,
            data_key=self.data_key(split),
            **self.load_kwargs,
        )

    def data_key(self, split: str) -> str:
        """The setting that replaces the Hub for ``split`` (named in the offline error)."""
        return f"task.data_files.{split}"

    def missing_split(self, split: str) -> UserError:
        return UserError(
            f"task={self.name}: its Hub dataset {self.hub_name} has no {split} split",
            f"set task.data_files.{split}=<local file>",
        )

    def load_rows(self, split: str) -> list[Row]:
        """The split's rows in source order, malformed records reported with their file:line, duplicates dropped."""
        rows: list[Row] = []
        seen: set[str] = set()
        for where, record in self.records(split):
            row = self.to_row(record, where)
            if row is None:
                continue
            key = self.dedupe_key(row)
            if key is not None:
                if key in seen:
                    continue
                seen.add(key)
            rows.append(row)
        if not rows:
            raise UserError(
                f"task={self.name}: the {split} source has no usable rows",
                "check task.data_files / the task's filters (e.g. task.domain, task.types)",
            )
        return rows

    def pools(self) -> dict[str, list[Row]]:
        """Every usable row of each split, before sizing."""
        return {"train": self.load_rows("train"), "eval": self.load_rows("eval")}

    # --- splits -----------------------------------------------------------------------------------------------
    def build(self) -> DatasetDict:
        from datasets import Dataset, DatasetDict

        splits = self.sized(self.pools())
        return DatasetDict({split: Dataset.from_list(rows) for split, rows in splits.items() if rows})

    def sized(self, pools: dict[str, list[Row]]) -> dict[str, list[Row]]:
        train, held_out = list(pools["train"]), list(pools["eval"])
        probe: list[Row] = []
        if self.probe_size:
            if self.probe_size >= len(train):
                raise UserError(
                    f"task.probe_size={self.probe_size}: the training pool has only {len(train)} questions",
                    "lower task.probe_size",
                )
            picked = set(random.Random(f"{self.split_seed}-probe").sample(range(len(train)), self.probe_size))
            probe = [row for i, row in enumerate(train) if i in picked]
            train = [row for i, row in enumerate(train) if i not in picked]
        splits = {
            "train": sample(train, self.train_size, f"{self.seed}-train"),
            "eval": sample(held_out, self.eval_size, f"{self.split_seed}-eval"),
            "probe": probe,
        }
        assert set(splits) == set(SPLITS)
        return {split: [{**row, "index": i} for i, row in enumerate(rows)] for split, rows in splits.items()}


def sample(rows: list[Row], size: int | None, seed: str) -> list[Row]:
    """``size`` rows drawn without replacement with ``seed`` (in source order), or all of them."""
    if size is None or size >= len(rows):
        return rows
    keep = set(random.Random(seed).sample(range(len(rows)), size))
    return [row for i, row in enumerate(rows) if i in keep]


@dataclasses.dataclass(kw_only=True)
class MathTask(BenchmarkTask):
    """Free-form math answers, compared with math-verify (LaTeX, fractions, intervals, ...)."""

    answer_parsers: ClassVar[tuple[str, ...]] = verifiers.ALL_PARSERS
    answer_format: ClassVar[str | None] = verifiers.FINAL_ANSWER_FORMS

    def verify_flexible(self, completion: str, answer: str, strict: Verdict) -> Verdict:
        return verifiers.verify_math_flexible(completion, answer, strict)

    def verify_strict(self, completion: str, answer: str) -> Verdict:
        return verifiers.verify_math(completion, answer)


@dataclasses.dataclass(kw_only=True)
class EvalSetTask(MathTask):
    """A competition / test set: only an ``eval`` split of its own; training needs ``task.data_files.train``."""

    hub_splits: ClassVar[dict[str, str]] = {"eval": "test"}

    def missing_split(self, split: str) -> UserError:
        return UserError(
            f"task={self.name} is an evaluation set: it has no {split} split",
            f"train on another set that evaluates on it (task=dapo_math task.eval_set={self.name}, or "
            f"task=openmath task.eval_set={self.name}), or set task.data_files.{split}=<problems file>",
        )


@dataclasses.dataclass(kw_only=True)
class MathTrainingTask(MathTask):
    """A math training set whose ``eval`` split is an evaluation set (``eval_set``) or a held-out slice of it."""

    eval_set: str = setting(HOLDOUT, "the eval split: math500 | aime24 | aime25 | amc23 | holdout (a training slice)")
    holdout_size: int = setting(500, "problems held out of the training pool when eval_set=holdout", ge=1)

    hub_splits: ClassVar[dict[str, str]] = {"train": "train"}

    def validate(self) -> None:
        super().validate()
        choices = [*EVAL_SETS, HOLDOUT]
        self.check("eval_set", self.eval_set in choices, "is not an evaluation set", f"use one of {choices}")

    def pools(self) -> dict[str, list[Row]]:
        train = self.load_rows("train")
        eval_file = (self.data_files or {}).get("eval")
        if self.eval_set == HOLDOUT:
            if eval_file:  # an explicit file in this task's own format
                return {"train": train, "eval": self.load_rows("eval")}
            if self.holdout_size >= len(train):
                raise UserError(
                    f"task.holdout_size={self.holdout_size}: the training pool has only {len(train)} problems",
                    "lower task.holdout_size or use task.eval_set=math500",
                )
            order = list(range(len(train)))
            random.Random(f"{self.split_seed}-holdout").shuffle(order)
            held = set(order[: self.holdout_size])
            return {
                "train": [row for i, row in enumerate(train) if i not in held],
                "eval": [row for i, row in enumerate(train) if i in held],
            }
        return {"train": train, "eval": self.eval_set_task(eval_file).load_rows("eval")}

    def eval_set_task(self, eval_file: str | None) -> BenchmarkTask:
        """The evaluation set's own task, reading ``task.data_files.eval`` (in its format) or its Hub dataset."""
        module, _, cls_name = EVAL_SETS[self.eval_set].rpartition(".")
        cls = getattr(importlib.import_module(module), cls_name)
        return cls(seed=self.seed, split_seed=self.split_seed, data_files={"eval": eval_file} if eval_file else None)
