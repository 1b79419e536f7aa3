"""The task interface: dataset splits with ``prompt`` / ``answer`` columns and a verifier that never runs model text."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from socratic_exp.core.component import Component, setting
from socratic_exp.tasks import verifiers
from socratic_exp.tasks.verifiers import FLEXIBLE, MATH_VERIFY, STRICT, Verdict

if TYPE_CHECKING:
    from datasets import DatasetDict

SPLITS = ("train", "eval", "probe")

# A warm-start example is a list of text segments, each marked trainable (loss) or context only (masked).
WarmstartExample = list[tuple[str, bool]]
Messages = list[dict[str, str]]


# What a verifier can say about an answer, as sentences (SDPO / VPD's environment feedback, the rule teacher off the
# testbed, and the testbed's warm-start corpus, so that the tiny student has read them).
VERIFIER_FEEDBACK = {
    "format": "Your answer is not in the required format: end with the final answer written as the question asks.",
    "empty": "You gave no answer: work through the problem and end with a final answer.",
    "truncated": "Your answer was cut off before the final answer: be more concise.",
    "wrong": "Your final answer is incorrect: re-check each step of your reasoning.",
}
RL_ONLY_SETTINGS = ("overlong_buffer", "answer_parser", "format_reward")  # leave the warm-start corpus as it is
SHOWN_ANSWER_CHARS = 100  # an extracted answer longer than this is cut in the feedback sentence
# A demonstration before the question of a plain (completion-style) prompt: SDPO's sibling solution, plain layout.
PLAIN_SOLUTION_NOTE = "Note: a correct solution is\n{successful_previous_attempt}\n"


def environment_feedback(reason: str, extracted: str | None = None) -> str:
    """What the environment can tell about a rollout, as a sentence: the verifier's verdict and the answer it read
    (the testbed's and the benchmark tasks' verifiers know no more than that; they never show the reference)."""
    key = reason.split()[0] if reason else "wrong"
    shown = f" {extracted[:SHOWN_ANSWER_CHARS]}" if extracted else ""
    if key == "correct":
        return f"Hint: Your final answer{shown} is correct."
    if key == "wrong" and shown:
        return f"Hint: Your final answer{shown} is incorrect: re-check each step of your reasoning."
    return "Hint: " + VERIFIER_FEEDBACK.get(key, VERIFIER_FEEDBACK["wrong"])


def render_prompt(prompt: str, instruction: str, chat: bool) -> str | Messages:
    """A row's prompt as the model gets it: chat messages (instruction as the system turn, then the user turn) for
    chat models, else plain text (the instruction, a blank line, the prompt). The one place both forms are made:
    evaluation and the trainers' datasets go through it."""
    if chat:
        return ([{"role": "system", "content": instruction}] if instruction else []) + [
            {"role": "user", "content": prompt}
        ]
    return f"{instruction}\n\n{prompt}" if instruction else prompt


def render_splits(splits: DatasetDict, instruction: str, chat: bool) -> DatasetDict:
    """Every split's ``prompt`` column through ``render_prompt``: what the trainers get (the model's chat messages or
    plain text). Unchanged when there is nothing to render (a plain model and no instruction: the tiny model)."""
    if not (chat or instruction):
        return splits
    return splits.map(lambda row: {"prompt": render_prompt(row["prompt"], instruction, chat)})


def with_context(prompt: str | Messages, context: str) -> str | Messages:
    """A rendered prompt with ``context`` lines (e.g. Socratic-RL's viewpoints) before the question: in front of a
    plain prompt, or at the start of the last user turn of chat messages. This is also the layout of TRL's SDFT
    ``teacher_prompt_template`` ``"{privileged_context}\n{prompt}"``, so distillation sees what training saw."""
    if not context:
        return prompt
    if isinstance(prompt, str):
        return f"{context.rstrip()}\n{prompt}"
    last_user = max(i for i, message in enumerate(prompt) if message["role"] == "user")
    turn = prompt[last_user]
    return [
        *prompt[:last_user],
        {**turn, "content": f"{context.rstrip()}\n{turn['content']}"},
        *prompt[last_user + 1 :],
    ]


@dataclasses.dataclass(kw_only=True)
class Task(Component):
    """A task builds ``train`` / ``eval`` / ``probe`` splits and verifies completions.

    Rows carry ``prompt`` and ``answer`` (strings), ``difficulty`` (int) and ``index`` (the row's position, which
    samplers use to route rewards back to questions), plus optional ``reference`` (a worked solution). The
    ``prompt`` is the question alone; ``instruction()`` (how to answer) becomes the system turn of chat models or
    a preamble of plain prompts (see ``render_prompt``).
    """

    config_group: ClassVar[str] = "task"
    metric_group: ClassVar[str | None] = None  # a row field that evaluation also breaks accuracy down by
    fits_tiny_model: ClassVar[bool] = False  # short ASCII prompts the built-in character-level model can learn
    # the parsers that read this task's answers (numbers and math: all three; option letters: strict alone) and
    # the final-answer form the strict parser reads, which the format reward rewards (None: no form to reward)
    answer_parsers: ClassVar[tuple[str, ...]] = (STRICT,)
    answer_format: ClassVar[str | None] = None

    seed: int = setting(0, "seed of the task's own random draws (which training problems; arithmetic: the data)", ge=0)
    data_files: dict[str, str] | None = setting(
        None, "local files per split ({train: a.jsonl, eval: b.jsonl}) instead of the generated or Hub data"
    )
    overlong_buffer: int = setting(
        0,
        "DAPO's overlong reward shaping (TRL's soft overlong punishment): a completion longer than "
        "algorithm.max_completion_length minus this many tokens loses up to 1 reward, linearly (0: off)",
        ge=0,
    )
    answer_parser: Literal["strict", "flexible", "math_verify"] = setting(
        STRICT,
        "how answers are read, for rewards and accuracy: strict (the task's format), flexible (strict, else the "
        "last boxed answer, 'the answer is N', the last number), math_verify (math-verify's own extraction); every "
        "evaluation also reports eval/strict_acc and eval/flexible_acc",
    )
    format_reward: float = setting(
        0.0,
        "weight of a second reward, 1 when the strict parser reads an answer (the task's answer format) and 0 "
        "otherwise, beside the correctness reward (TRL's reward_weights; logged as rewards/answer_format); 0: off",
        ge=0.0,
    )

    def validate(self) -> None:
        self.check(
            "answer_parser",
            self.answer_parser in self.answer_parsers,
            f"does not read task={self.name}'s answers",
            f"use task.answer_parser={' or '.join(self.answer_parsers)}",
        )
        self.check(
            "format_reward",
            not self.format_reward or self.answer_format is not None,
            f"rewards the answer format, and task={self.name} asks for none",
            "set task.format_reward=0",
        )
        for split, path in (self.data_files or {}).items():
            self.check(
                "data_files", split in SPLITS, f"unknown split {split!r}", f"use split names among {', '.join(SPLITS)}"
            )
            problem = file_problem(str(path))
            self.check(
                "data_files",
                problem is None,
                f"file {path!r} for split {split!r} {problem}"
                if problem == MISSING
                else f"{path!r} for split {split!r} {problem}",
                "point it at an existing JSON Lines, JSON or parquet file",
            )

    def local_files(self) -> dict[str, str]:
        """The local data files a run will read, each under the setting that names it (checked before anything
        loads: ``requirements.check_requirements`` reads their first rows)."""
        return {f"task.data_files.{split}": str(path) for split, path in (self.data_files or {}).items()}

    # --- to implement ---------------------------------------------------------------------------------------
    def build(self) -> DatasetDict:
        raise NotImplementedError

    def verify_strict(self, completion: str, answer: str) -> Verdict:
        """The task's own reading: the final answer in the form its instruction asks for."""
        raise NotImplementedError

    def instruction(self) -> str:
        """How to answer (e.g. the final-answer format); empty for tasks whose prompts say it themselves."""
        return ""

    # --- shared behaviour -------------------------------------------------------------------------------------
    def verify(self, completion: str, answer: str) -> Verdict:
        """The verdict of the run's parser (``answer_parser``): what rewards, accuracies and teachers read."""
        return self.verify_as(self.answer_parser, completion, answer)

    def verify_as(self, parser: str, completion: str, answer: str) -> Verdict:
        """The verdict of one parser among ``answer_parsers``."""
        if parser == MATH_VERIFY:
            return verifiers.verify_with_math_verify(completion, answer)
        strict = self.verify_strict(completion, answer)
        return self.verify_flexible(completion, answer, strict) if parser == FLEXIBLE else strict

    def verify_flexible(self, completion: str, answer: str, strict: Verdict) -> Verdict:
        """The flexible reading, given the strict verdict (numbers: ``verifiers.verify_flexible``)."""
        return verifiers.verify_flexible(completion, answer, strict)

    def score(self, completion: str, answer: str) -> float:
        return self.verify(completion, answer).score

    def warmstart_examples(self, size: int, seed: int) -> list[WarmstartExample]:
        """Supervised traces for warm-starting a model built from scratch: the reference after the prompt."""
        train = self.build()["train"]
        rows = train.shuffle(seed=seed).select(range(min(size, len(train))))
        return [[(row["prompt"], False), (row.get("reference") or row["answer"], True)] for row in rows]

    def warmstart_fingerprint(self) -> dict[str, Any]:
        """The settings that change ``warmstart_examples`` (the tiny model's cache key and the shipped students'
        match). Reward shaping acts in RL only, so a student warm-started once stays valid whatever it is."""
        return {k: v for k, v in self.options().items() if k not in RL_ONLY_SETTINGS}

    def reward_function(
        self,
        on_rewards: Callable[[list[int], list[float]], None] | None = None,
        on_verdicts: Callable[[list[str], list[Verdict], dict[str, Any]], None] | None = None,
    ) -> Callable:
        """The verifier as a TRL reward function: each completion's reward is its verdict's score.

        ``on_rewards(indices, rewards)`` receives each batch's rewards per dataset row (the hook samplers use);
        ``on_verdicts(texts, verdicts, columns)`` the completions' texts and verdicts with the batch's other dataset
        columns (what an algorithm that learns from the traces needs, e.g. Socratic-RL's reflection).
        """
        task = self

        def accuracy(
            completions: list[Any], answer: list[str], index: list[int] | None = None, **columns: Any
        ) -> list[float]:
            texts = [completion_text(c) for c in completions]
            verdicts = [task.verify(text, gold) for text, gold in zip(texts, answer, strict=True)]
            if on_verdicts is not None:
                on_verdicts(texts, verdicts, columns)
            rewards = [verdict.score for verdict in verdicts]
            if on_rewards is not None and index is not None:
                on_rewards(list(index), rewards)
            return rewards

        return accuracy

    def shaping_rewards(self, max_completion_length: int) -> list[Callable]:
        """TRL reward functions added to the verifier's: DAPO's soft overlong punishment (Yu et al. 2025, Eq. 13) as
        TRL ships it, 0 up to ``max_completion_length - overlong_buffer`` tokens, then down to -1 at
        ``max_completion_length``; then the format reward (``format_reward``, weighed by ``shaping_weights``)."""
        functions: list[Callable] = []
        if self.overlong_buffer:
            from trl.rewards import get_soft_overlong_punishment

            functions.append(get_soft_overlong_punishment(max_completion_length, self.overlong_buffer))
        if self.format_reward:
            functions.append(self.format_reward_function())
        return functions

    def shaping_weights(self) -> list[float]:
        """TRL's ``reward_weights`` of ``shaping_rewards`` (the verifier's weight is 1)."""
        return [1.0] * bool(self.overlong_buffer) + [self.format_reward] * bool(self.format_reward)

    def follows_format(self, completion: str, answer: str) -> bool:
        """Whether the strict parser reads an answer: the completion is in the task's answer format."""
        return self.verify_strict(completion, answer).extracted is not None

    def format_reward_function(self) -> Callable:
        """The format reward as a TRL reward function, named ``answer_format`` (TRL logs it on its own)."""
        task = self

        def answer_format(completions: list[Any], answer: list[str], **_: Any) -> list[float]:
            texts = [completion_text(c) for c in completions]
            return [float(task.follows_format(text, gold)) for text, gold in zip(texts, answer, strict=True)]

        return answer_format


MISSING = "does not exist"


def file_problem(path: str) -> str | None:
    """What keeps ``path`` from being read as a data file (``is a folder, ...``, ``does not exist``, or the system's
    reason, e.g. a name too long), or None for a file."""
    try:
        if Path(path).is_file():
            return None
        return "is a folder, not a data file" if Path(path).is_dir() else MISSING
    except OSError as err:  # pathlib answers False for a missing file, but raises for a name too long
        return f"cannot be read ({err.strerror or err})"


def question_text(prompt: Any) -> str:
    """The question as a teacher reads it: a plain prompt itself, or the last user turn of chat messages."""
    if isinstance(prompt, str):
        return prompt
    return next(message["content"] for message in reversed(prompt) if message["role"] == "user")


def completion_text(completion: Any) -> str:
    """A completion's text: a plain string itself, or the content of the last chat message."""
    return completion if isinstance(completion, str) else completion[-1]["content"]
