"""``task=sciknoweval``: SciKnowEval's reasoning (L3) multiple-choice questions, as in SocraticPO, SDPO and VPD.

Records are HICAI-ZJU/SciKnowEval rows: ``{"question", "choices": {"text", "label"}, "answerKey", "answer",
"type", "domain", "details": {"level", "task", "subtask", "source"}}``, from the Hub (``hicai-zju/SciKnowEval``,
split ``test``, all levels) or from a local copy of the repository's ``raw_data/`` folder (``task.data_dir``,
read as ``<Domain>/<level>/*.jsonl``, files in name order).

Selection: ``domain`` (chemistry / physics / biology / material / all), ``level`` (L3) and ``types``. By default
only ``mcq-4-choices``, the filter SDPO applies; ``mcq-2-choices`` can be added, and ``true_or_false`` too (its
``Yes`` / ``No`` answers get the yes/no verifier). ``filling`` and ``open-ended-qa`` answers are free text with no
reliable verifier, so they are refused.

Split, SDPO-style: each domain's selected rows, in source order, go through ``datasets``'
``train_test_split(test_size=test_ratio, seed=split_seed)`` (0.1 and 42, SDPO's ``split_tasks.py``); with
``domain=all`` every domain is split on its own and the parts are concatenated, so each domain's eval questions
are the same as with that domain alone. With the Hub's record order the split is SDPO's; a local ``raw_data``
copy gives the same kind of split over the files' order. Exact duplicates are kept (SDPO keeps them).

Prompts list the options as ``A. ...`` lines after the question; the instruction asks for
``<reasoning>...</reasoning><answer>X</answer>`` and the verifier reads the letter in the last ``<answer>`` tag.
``shuffle_options`` re-orders each question's options with a seed derived from ``split_seed`` and the question (the
same order in every run), which removes answer-position bias such as the 39% "B" answers of
``general_physics_calculation``.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from pathlib import Path
from typing import ClassVar, Literal

from socratic_exp.core.component import setting
from socratic_exp.core.errors import UserError
from socratic_exp.tasks import verifiers
from socratic_exp.tasks.base import Verdict
from socratic_exp.tasks.benchmark import BenchmarkTask, Row
from socratic_exp.tasks.hub_data import Located, Record, field, json_type, read_file, text

log = logging.getLogger(__name__)
DOMAINS = ("biology", "chemistry", "material", "physics")
CHOICE_TYPES = ("mcq-4-choices", "mcq-2-choices")
YES_NO_TYPES = ("true_or_false",)
FREE_TEXT_TYPES = ("filling", "open-ended-qa")

CHOICE_INSTRUCTION = (
    "Answer the following multiple-choice question. First think it through inside <reasoning>...</reasoning>, "
    "then give only the letter of the correct option inside <answer>...</answer>, for example <answer>A</answer>."
)
YES_NO_NOTE = " For a yes/no question, the answer is Yes or No, for example <answer>Yes</answer>."
# SocraticPO's authors' data (Liuz-rui/SocraticPO, data/sciknoweval_without_solution/*/*.parquet): their system turn,
# options as "A: ..." lines, and a closing line; their verifier reads only an exact <answer>\nX\n</answer> block.
AUTHORS_INSTRUCTION = (
    "\nGiven a question and four options, please select the right answer. Respond in the following format:\n"
    "<reasoning>\n...\n</reasoning>\n<answer>\n...\n</answer>\n\nFor the answer, only output the letter "
    "corresponding to the correct option (A, B, C, or D), and nothing else. Do not restate the answer text. For "
    'example, if the answer is "A", just output:\n<answer>\nA\n</answer>\n'
)
AUTHORS_CLOSING = "Please reason step by step."


def is_folder(path: str) -> bool:
    try:
        return Path(path).is_dir()
    except OSError:  # a name too long: no folder of that name
        return False


@dataclasses.dataclass(kw_only=True)
class SciKnowEvalTask(BenchmarkTask):
    hub_name: str = "hicai-zju/SciKnowEval"
    data_dir: str | None = setting(None, "a local copy of SciKnowEval's raw_data/ (<Domain>/L3/*.jsonl); null: the Hub")
    domain: Literal["chemistry", "physics", "biology", "material", "all"] = setting(
        "chemistry", "the domain trained and evaluated on (all: each domain split on its own)"
    )
    level: str = setting("L3", "details.level to keep (L3: knowledge reasoning)")
    types: list[str] = setting(
        default_factory=lambda: ["mcq-4-choices"],
        help="question types kept (SDPO's filter): mcq-4-choices, mcq-2-choices, true_or_false",
    )
    test_ratio: float = setting(
        0.1, "held-out share per domain (SDPO's train_test_split(test_size, seed=split_seed))", gt=0.0, lt=1.0
    )
    shuffle_options: bool = setting(False, "re-order each question's options, seeded (removes answer-position bias)")
    prompt_style: Literal["ours", "authors"] = setting(
        "ours",
        "ours: 'A. ...' options, our instruction, the letter in the last <answer> tag | authors: SocraticPO's "
        "authors' data and verifier ('A: ...' options, their system turn and closing line, only an exact "
        "<answer>\\nX\\n</answer> block counts)",
    )

    name: ClassVar[str] = "sciknoweval"
    metric_group: ClassVar[str | None] = "domain"  # accuracy per domain and their unweighted mean, as papers report
    hub_splits: ClassVar[dict[str, str]] = {"all": "test"}  # one Hub split, divided here
    answer_format: ClassVar[str | None] = "the option letter (or Yes / No) in <answer> tags"

    def validate(self) -> None:
        super().validate()
        if self.data_dir is not None:
            self.check(
                "data_dir",
                is_folder(self.data_dir),
                "is not a folder",
                "point it at SciKnowEval's raw_data/ folder (holding <Domain>/L3/*.jsonl)",
            )
        self.check("types", bool(self.types), "selects no question type", f"use some of {CHOICE_TYPES}")
        self.check(
            "types",
            self.prompt_style == "ours" or self.types == ["mcq-4-choices"],
            "are not the authors' four-option questions, which task.prompt_style=authors grades (A-D)",
            "set task.types=[mcq-4-choices], or task.prompt_style=ours",
        )
        for kind in self.types:
            self.check(
                "types",
                kind in CHOICE_TYPES + YES_NO_TYPES,
                f"{kind!r} has no verifier" if kind in FREE_TEXT_TYPES else f"{kind!r} is not a SciKnowEval type",
                f"use some of {list(CHOICE_TYPES + YES_NO_TYPES)} (free-text types are not verifiable)",
            )

    def instruction(self) -> str:
        if self.system_prompt is not None:
            return self.system_prompt
        if self.prompt_style == "authors":
            return AUTHORS_INSTRUCTION
        return CHOICE_INSTRUCTION + (YES_NO_NOTE if set(self.types) & set(YES_NO_TYPES) else "")

    # --- loading ----------------------------------------------------------------------------------------------
    def domains(self) -> tuple[str, ...]:
        return DOMAINS if self.domain == "all" else (self.domain,)

    def raw_files(self) -> list[Path]:
        """The ``data_dir`` files of the chosen domains and level."""
        if self.data_dir is None:
            return []
        pattern = f"{{}}/{self.level}/*.jsonl"
        return sorted(p for d in self.domains() for p in Path(self.data_dir).glob(pattern.format(d.capitalize())))

    def local_files(self) -> dict[str, str]:
        raw = {f"task.data_dir ({p.parent.parent.name}/{p.name})": str(p) for p in self.raw_files()}
        return super().local_files() | raw

    def records(self, split: str) -> list[Located]:
        if split in (self.data_files or {}) or split != "all" or self.data_dir is None:
            return super().records(split)
        files = self.raw_files()
        if not files:
            wanted = ", ".join(f"{d.capitalize()}/{self.level}/*.jsonl" for d in self.domains())
            raise UserError(
                f"task.data_dir={self.data_dir!r}: no {wanted} files", "point it at SciKnowEval's raw_data/ folder"
            )
        return [located for path in files for located in read_file(str(path))]

    def data_key(self, split: str) -> str:
        return "task.data_dir" if split == "all" else super().data_key(split)

    def pools(self) -> dict[str, list[Row]]:
        given = set(self.data_files or {})
        split = self.domain_split() if {"train", "eval"} - given else {}
        pools = {name: self.load_rows(name) if name in given else split[name] for name in ("train", "eval")}
        return {name: [row for row in rows if row["prompt"]] for name, rows in pools.items()}

    def domain_split(self) -> dict[str, list[Row]]:
        """Each domain split on its own with ``datasets``' ``train_test_split`` (SDPO's procedure)."""
        from datasets import Dataset

        rows = self.load_rows("all")
        parts: dict[str, list[Row]] = {"train": [], "eval": []}
        for domain in self.domains():
            mine = [row for row in rows if row["domain"] == domain]
            if len(mine) < 2:
                continue
            positions = Dataset.from_dict({"i": list(range(len(mine)))})
            halves = positions.train_test_split(test_size=self.test_ratio, seed=self.split_seed)
            parts["train"] += [mine[i] for i in halves["train"]["i"]]
            parts["eval"] += [mine[i] for i in halves["test"]["i"]]
        return parts

    def to_row(self, record: Record, where: str) -> Row | None:
        kind = record.get("type")
        domain = str(record.get("domain") or "").lower()
        details = record.get("details") if isinstance(record.get("details"), dict) else {}
        if kind not in self.types or domain not in self.domains() or details.get("level") != self.level:
            return None
        question = text(record, where, self.name, "question").strip()
        if kind in YES_NO_TYPES:
            answer = verifiers.yes_no(text(record, where, self.name, "answer"))
            if answer is None:
                raise UserError(f"{where}: malformed sciknoweval row: a true_or_false answer must be Yes or No")
            prompt = f"{question}\n\nAnswer Yes or No."
        else:
            prompt, answer = self._choice_prompt(record, where, question)
            if not prompt:
                log.warning("%s: choices.text and choices.label differ in length; question left out", where)
        return {
            "prompt": prompt,
            "answer": answer,
            "difficulty": 0,
            "domain": domain,
            "subtask": str(details.get("subtask") or details.get("task") or ""),
            "type": kind,
        }

    def _choice_prompt(self, record: Record, where: str, question: str) -> tuple[str, str]:
        choices = field(record, where, self.name, "choices")
        shape = "each multiple-choice row needs choices {text: [...], label: [...]} and an answerKey among the labels"
        if not isinstance(choices, dict):
            got = json_type(choices)
            raise UserError(f"{where}: malformed sciknoweval row: 'choices' is {got}, not an object", shape)
        for part in ("label", "text"):
            value = choices.get(part)
            if isinstance(value, list | tuple) and value:
                continue
            got = "missing" if part not in choices else "empty" if isinstance(value, list | tuple) else json_type(value)
            problem = f"choices.{part} is {got}, not a list of options"
            raise UserError(f"{where}: malformed sciknoweval row: {problem}", shape)
        labels, options = list(choices["label"]), list(choices["text"])
        key = text(record, where, self.name, "answerKey").strip()
        if key in labels and len(labels) != len(options):
            return "", ""  # an upstream defect (5 texts for 4 labels): kept for the split's positions, dropped after
        if key not in labels:
            raise UserError(
                f"{where}: malformed sciknoweval row: answerKey {key!r} is not among choices.label {labels}", shape
            )
        order = list(range(len(options)))  # order[new position] = old position
        if self.shuffle_options:
            random.Random(f"{self.split_seed}-options-{question}-{options}").shuffle(order)
        letters = [chr(ord("A") + i) for i in range(len(options))]
        mark = ":" if self.prompt_style == "authors" else "."
        lines = "\n".join(f"{letter}{mark} {options[old]}" for letter, old in zip(letters, order, strict=True))
        closing = f"\n{AUTHORS_CLOSING}" if self.prompt_style == "authors" else ""
        return f"{question}\n\n{lines}{closing}", letters[order.index(labels.index(key))]

    # --- verifier ---------------------------------------------------------------------------------------------
    def verify_strict(self, completion: str, answer: str) -> Verdict:
        if answer in ("Yes", "No"):
            return verifiers.verify_yes_no(completion, answer)
        if self.prompt_style == "authors":
            return verifiers.verify_choice_block(completion, answer)
        return verifiers.verify_choice(completion, answer)
