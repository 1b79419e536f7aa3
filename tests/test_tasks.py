"""The benchmark tasks on the real files in ../shared/data (skipped when absent): loaders, splits, verifiers,
prompts, and the errors for bad or missing data."""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import compose, run_dirs
from hypothesis import given, settings
from hypothesis import strategies as st

from socratic_exp.core.errors import ConfigError, UserError
from socratic_exp.core.run_folder import read_summary
from socratic_exp.models.generation import as_model_input
from socratic_exp.runtime.assembly import build_components
from socratic_exp.tasks import verifiers as vf
from socratic_exp.tasks.aime24 import Aime24Task
from socratic_exp.tasks.aime25 import Aime25Task
from socratic_exp.tasks.amc23 import Amc23Task
from socratic_exp.tasks.arithmetic import ArithmeticTask
from socratic_exp.tasks.base import render_prompt
from socratic_exp.tasks.dapo_math import DapoMathTask, bare_problem
from socratic_exp.tasks.gsm8k import Gsm8kTask
from socratic_exp.tasks.math500 import Math500Task
from socratic_exp.tasks.multiarith import MultiArithTask
from socratic_exp.tasks.openmath import OpenMathTask
from socratic_exp.tasks.sciknoweval import SciKnowEvalTask


def boxed(answer: str) -> str:
    return f"Some reasoning.\nThe final answer is \\boxed{{{answer}}}."


def tagged(answer: str) -> str:
    return f"<reasoning>\nStep by step.\n</reasoning>\n<answer>\n{answer}\n</answer>"


def shuffled(values: list[str], seed: int = 0) -> list[str]:
    values = list(values)
    random.Random(seed).shuffle(values)
    return values


def check_rows(rows: list[dict]) -> None:
    assert [row["index"] for row in rows] == list(range(len(rows)))
    for row in rows:
        assert isinstance(row["prompt"], str) and row["prompt"].strip()
        assert isinstance(row["answer"], str) and row["answer"].strip()
        assert isinstance(row["difficulty"], int)


# --- loaders on the real files ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gsm8k(data_dir):
    files = {"train": str(data_dir / "gsm8k/train.jsonl"), "eval": str(data_dir / "gsm8k/test.jsonl")}
    task = Gsm8kTask(data_files=files)
    return task, task.build()


@pytest.fixture(scope="module")
def math500(data_dir):
    task = Math500Task(data_files={"eval": str(data_dir / "math500/test.jsonl")})
    return task, task.load_rows("eval")


@pytest.fixture(scope="module")
def sciknoweval_all(data_dir):
    task = SciKnowEvalTask(data_dir=str(data_dir / "sciknoweval"), domain="all")
    return task, task.build()


def test_gsm8k_loads_both_splits_with_the_final_numbers(gsm8k):
    _, splits = gsm8k
    assert {name: len(rows) for name, rows in splits.items()} == {"train": 7473, "eval": 1319}
    assert set(splits["eval"].column_names) == {"prompt", "answer", "reference", "difficulty", "index"}
    eval_rows = splits["eval"].to_list()
    check_rows(eval_rows)
    assert eval_rows[0]["answer"] == "18" and eval_rows[0]["prompt"].startswith("Janet")
    assert all(row["answer"].lstrip("-").isdigit() for row in eval_rows)  # "1,000" became "1000"
    assert min(row["difficulty"] for row in eval_rows) >= 1


@pytest.mark.parametrize(
    ("cls", "folder", "count", "first_answer"),
    [
        (Math500Task, "math500", 500, "\\left( 3, \\frac{\\pi}{2} \\right)"),
        (Aime24Task, "aime24", 30, "204"),
        (Aime25Task, "aime25", 30, "70"),
        (Amc23Task, "amc23", 40, "27"),
    ],
)
def test_evaluation_sets_load(data_dir, cls, folder, count, first_answer):
    task = cls(data_files={"eval": str(data_dir / folder / "test.jsonl")})
    rows = task.sized({"train": [], "eval": task.load_rows("eval")})["eval"]
    check_rows(rows)
    assert len(rows) == count
    assert rows[0]["answer"] == first_answer


def test_math500_levels_and_aime_details(data_dir, math500):
    _, rows = math500
    assert Counter(row["difficulty"] for row in rows) == {5: 134, 4: 128, 3: 105, 2: 90, 1: 43}
    aime24 = Aime24Task(data_files={"eval": str(data_dir / "aime24/test.jsonl")}).load_rows("eval")
    assert "25" in {row["answer"] for row in aime24} and "025" not in {row["answer"] for row in aime24}
    assert Counter(row["difficulty"] for row in aime24) == {1: 10, 2: 10, 3: 10}
    aime25 = Aime25Task(data_files={"eval": str(data_dir / "aime25/test.jsonl")}).load_rows("eval")
    assert not any("\x0c" in row["prompt"] for row in aime25)
    assert "\\frac" in aime25[18]["prompt"] and "\\frac" in aime25[27]["prompt"]


def test_multiarith_drops_the_duplicates(data_dir):
    path = str(data_dir / "multiarith/test.jsonl")
    rows = MultiArithTask(data_files={"eval": path}).load_rows("eval")
    assert len(rows) == 580 and len({row["prompt"] for row in rows}) == 580
    assert len(MultiArithTask(data_files={"eval": path}, dedupe=False).load_rows("eval")) == 600
    assert rows[0]["answer"] == "39"


def test_sciknoweval_domain_split(sciknoweval_all, data_dir):
    _, splits = sciknoweval_all
    # 4135 mcq-4 L3 questions, one dropped for an upstream defect (5 option texts, 4 labels) after the split
    assert {name: len(rows) for name, rows in splits.items()} == {"train": 3720, "eval": 414}
    eval_rows = splits["eval"].to_list()
    check_rows(eval_rows)
    assert Counter(row["domain"] for row in eval_rows) == {
        "chemistry": 210,
        "material": 94,
        "physics": 80,
        "biology": 30,
    }
    assert {row["type"] for row in eval_rows} == {"mcq-4-choices"}
    # each domain is split on its own: the chemistry-only eval split is the chemistry part of domain=all
    chemistry = SciKnowEvalTask(data_dir=str(data_dir / "sciknoweval")).build()
    assert [r["prompt"] for r in chemistry["eval"]] == [r["prompt"] for r in eval_rows if r["domain"] == "chemistry"]
    assert (len(chemistry["train"]), len(chemistry["eval"])) == (1890, 210)
    # the same split again, whatever the run seed
    again = SciKnowEvalTask(data_dir=str(data_dir / "sciknoweval"), domain="all", seed=7).build()
    assert again["eval"]["prompt"] == splits["eval"]["prompt"]


def test_sciknoweval_types_and_option_shuffling(data_dir):
    root = str(data_dir / "sciknoweval")
    task = SciKnowEvalTask(data_dir=root, domain="biology", types=["mcq-4-choices", "mcq-2-choices", "true_or_false"])
    pool = task.load_rows("all")
    assert Counter(row["type"] for row in pool) == {"mcq-4-choices": 300, "mcq-2-choices": 200, "true_or_false": 100}
    assert {row["answer"] for row in pool if row["type"] == "true_or_false"} == {"Yes", "No"}
    assert "Yes or No" in task.instruction() and "<answer>" in task.instruction()
    plain = SciKnowEvalTask(data_dir=root, domain="physics").load_rows("all")
    mixed = SciKnowEvalTask(data_dir=root, domain="physics", shuffle_options=True).load_rows("all")
    assert Counter(row["answer"] for row in plain)["B"] == 315  # the skewed key of general_physics_calculation
    assert Counter(row["answer"] for row in mixed)["B"] < 260
    for before, after in zip(plain, mixed, strict=True):  # the same option is right, under its new letter
        assert option_text(before) == option_text(after)
    assert mixed == SciKnowEvalTask(data_dir=root, domain="physics", shuffle_options=True).load_rows("all")


def test_sciknoweval_in_the_authors_prompt_style(data_dir):
    """The authors' data format: their system turn, 'A: ...' options, a closing line; only an exact
    <answer>\\nX\\n</answer> block is graded, the last one counting."""
    root = str(data_dir / "sciknoweval")
    ours = SciKnowEvalTask(data_dir=root, domain="physics").load_rows("all")
    authors_task = SciKnowEvalTask(data_dir=root, domain="physics", prompt_style="authors")
    authors = authors_task.load_rows("all")
    assert [row["answer"] for row in authors] == [row["answer"] for row in ours]
    row = authors[0]
    assert row["prompt"].endswith("\nPlease reason step by step.") and "\nA: " in row["prompt"]
    assert row["prompt"].replace(": ", ". ").removesuffix("\nPlease reason step by step.") == ours[0]["prompt"].replace(
        ": ", ". "
    )
    assert authors_task.instruction().startswith("\nGiven a question and four options, please select")
    verify = authors_task.verify
    assert verify("<reasoning>r</reasoning>\n<answer>\nC\n</answer>", "C").score == 1.0
    assert verify("<answer>\r\nC\r\n</answer>", "C").score == 1.0  # line endings normalised
    assert verify("<answer>\nA\n</answer> then <answer>\nC\n</answer>", "C").score == 1.0  # the last block
    assert verify("<answer>\nC\n</answer> then <answer>\nA\n</answer>", "C").reason == "wrong"
    for loose in ("<answer>C</answer>", "<answer>\nc\n</answer>", "<answer>\n C\n</answer>", "The answer is C."):
        assert verify(loose, "C").reason == "format", loose  # ours accepts the first two
    assert SciKnowEvalTask(data_dir=root, domain="physics").verify("<answer>C</answer>", "C").score == 1.0
    with pytest.raises(ConfigError, match=r"task.types=\['mcq-2-choices'\]: are not the authors' four-option"):
        SciKnowEvalTask(data_dir=root, types=["mcq-2-choices"], prompt_style="authors")


def option_text(row: dict) -> str:
    prefix = f"\n{row['answer']}. "
    return row["prompt"].split(prefix, 1)[1].split("\n", 1)[0]


def test_sizes_probe_and_seeds(data_dir):
    files = {"train": str(data_dir / "gsm8k/train.jsonl"), "eval": str(data_dir / "gsm8k/test.jsonl")}
    first = Gsm8kTask(data_files=files, train_size=100, eval_size=50, probe_size=20, seed=0).build()
    other_seed = Gsm8kTask(data_files=files, train_size=100, eval_size=50, probe_size=20, seed=1).build()
    assert {name: len(rows) for name, rows in first.items()} == {"train": 100, "eval": 50, "probe": 20}
    assert first["eval"]["prompt"] == other_seed["eval"]["prompt"]  # held-out questions follow split_seed
    assert first["probe"]["prompt"] == other_seed["probe"]["prompt"]
    assert first["train"]["prompt"] != other_seed["train"]["prompt"]  # the training subset follows the run seed
    assert not set(first["probe"]["prompt"]) & set(first["train"]["prompt"])
    assert (
        Gsm8kTask(data_files=files, train_size=100, eval_size=50, probe_size=20).build()["train"]["prompt"]
        == (first["train"]["prompt"])
    )


# --- verifiers on gold and shuffled answers ---------------------------------------------------------------------
def test_gsm8k_verifier_gold_and_shuffled(gsm8k):
    task, splits = gsm8k
    rows = splits["eval"].to_list() + splits["train"].to_list()
    assert all(task.score(row["reference"], row["answer"]) == 1.0 for row in rows)  # the '#### N' line
    assert all(task.score(boxed(row["answer"]), row["answer"]) == 1.0 for row in rows[:500])
    wrong = shuffled([row["answer"] for row in rows])
    assert sum(task.score(row["reference"], other) for row, other in zip(rows, wrong, strict=True)) / len(rows) < 0.05


def test_math500_verifier_gold_and_shuffled(math500):
    task, rows = math500
    verdicts = [task.verify(row["reference"], row["answer"]) for row in rows]  # the solution's last \boxed{}
    assert [v.reason for v in verdicts if v.score != 1.0] == []
    wrong = shuffled([row["answer"] for row in rows])
    assert sum(task.score(row["reference"], other) for row, other in zip(rows, wrong, strict=True)) / len(rows) < 0.05


@pytest.mark.parametrize(("cls", "folder"), [(Aime24Task, "aime24"), (Aime25Task, "aime25"), (Amc23Task, "amc23")])
def test_competition_verifiers_gold_and_shuffled(data_dir, cls, folder):
    task = cls(data_files={"eval": str(data_dir / folder / "test.jsonl")})
    rows = task.load_rows("eval")
    assert all(task.score(boxed(row["answer"]), row["answer"]) == 1.0 for row in rows)
    other = shuffled([row["answer"] for row in rows])
    scores = [task.score(boxed(o), row["answer"]) for row, o in zip(rows, other, strict=True)]
    # right exactly where the shuffle put an equal answer (AMC 2023 repeats some, e.g. 7 four times)
    assert scores == [float(o == row["answer"]) for row, o in zip(rows, other, strict=True)]
    assert sum(scores) / len(rows) < 0.15


def test_multiarith_verifier_gold_and_shuffled(data_dir):
    task = MultiArithTask(data_files={"eval": str(data_dir / "multiarith/test.jsonl")})
    rows = task.load_rows("eval")
    assert all(task.score(boxed(row["answer"]), row["answer"]) == 1.0 for row in rows)
    wrong = shuffled([row["answer"] for row in rows])
    assert sum(task.score(boxed(w), row["answer"]) for row, w in zip(rows, wrong, strict=True)) / len(rows) < 0.1


def test_sciknoweval_verifier_gold_and_shuffled(sciknoweval_all, data_dir):
    task, splits = sciknoweval_all
    rows = splits["train"].to_list() + splits["eval"].to_list()
    assert all(task.score(tagged(row["answer"]), row["answer"]) == 1.0 for row in rows)
    # gold is the file's answerKey (options are not re-ordered by default)
    raw = [
        json.loads(line)
        for path in sorted((data_dir / "sciknoweval/Chemistry/L3").glob("*.jsonl"))
        for line in path.open()
    ]
    key_of = {
        r["question"].strip()
        + "\n\n"
        + "\n".join(f"{a}. {t}" for a, t in zip(r["choices"]["label"], r["choices"]["text"], strict=True)): r[
            "answerKey"
        ]
        for r in raw
        if r["type"] == "mcq-4-choices"
    }
    assert all(row["answer"] == key_of[row["prompt"]] for row in rows if row["domain"] == "chemistry")
    # letters shuffled between records are right only where they happen to be the same letter; others score 0
    other = shuffled([row["answer"] for row in rows])
    scores = [task.score(tagged(o), row["answer"]) for row, o in zip(rows, other, strict=True)]
    assert scores == [float(o == row["answer"]) for row, o in zip(rows, other, strict=True)]
    wrong = [chr(ord("A") + (ord(row["answer"]) - ord("A") + 1) % 4) for row in rows]
    assert sum(task.score(tagged(w), row["answer"]) for row, w in zip(rows, wrong, strict=True)) == 0
    yes_no = SciKnowEvalTask(data_dir=str(data_dir / "sciknoweval"), domain="biology", types=["true_or_false"])
    for row in yes_no.load_rows("all"):
        assert yes_no.score(tagged(row["answer"]), row["answer"]) == 1.0
        assert yes_no.score(tagged({"Yes": "No", "No": "Yes"}[row["answer"]]), row["answer"]) == 0.0


# --- reasons ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("verify", "completion", "answer", "reason", "extracted"),
    [
        (vf.verify_number, "", "18", "empty", None),
        (vf.verify_number, "  \n ", "18", "empty", None),
        (vf.verify_number, "so we get 18 eggs", "18", "format", None),
        (vf.verify_number, "so \\boxed{1", "18", "truncated", None),
        (vf.verify_number, "\\boxed{\\$1,000.00}", "1000", "correct", "1000"),
        (vf.verify_number, "#### 17", "18", "wrong", "17"),
        (vf.verify_number, "Answer: 18", "18", "correct", "18"),
        (vf.verify_number, "\\boxed{x}", "18", "format", None),
        (vf.verify_math, "\\boxed{\\dfrac{1}{2}}", "\\frac12", "correct", "\\dfrac{1}{2}"),
        (vf.verify_math, "The answer is $0.5$.", "\\frac{1}{2}", "correct", "$0.5$"),
        (vf.verify_math, "\\boxed{025}", "25", "correct", "025"),
        (vf.verify_math, "\\boxed{[2, 5)}", "[2,5)", "correct", "[2, 5)"),
        (vf.verify_math, "\\boxed{3}", "\\left( 3, \\frac{\\pi}{2} \\right)", "wrong", "3"),
        (vf.verify_choice, tagged("B"), "B", "correct", "B"),
        (vf.verify_choice, "<answer>(c) because</answer>", "C", "correct", "C"),
        (vf.verify_choice, "<answer>A</answer> then <answer>D</answer>", "D", "correct", "D"),
        (vf.verify_choice, tagged("B"), "C", "wrong", "B"),
        (vf.verify_choice, "The answer is B.", "B", "format", None),
        (vf.verify_choice, "<answer></answer>", "B", "format", None),
        (vf.verify_choice, "<answer>none of them</answer>", "B", "format", None),
        (vf.verify_choice, "<reasoning>long thought", "B", "truncated", None),
        (vf.verify_choice, "<reasoning>x</reasoning><answer>B", "B", "truncated", None),
        (vf.verify_choice, "</answer>B<answer>", "B", "truncated", None),
        (vf.verify_yes_no, tagged("yes"), "Yes", "correct", "Yes"),
        (vf.verify_yes_no, tagged("False"), "No", "correct", "No"),
        (vf.verify_yes_no, tagged("maybe"), "No", "format", None),
    ],
)
def test_verdict_reasons(verify, completion, answer, reason, extracted):
    verdict = verify(completion, answer)
    assert (verdict.reason, verdict.extracted) == (reason, extracted)
    assert verdict.score == (1.0 if reason == "correct" else 0.0)


# --- real completions -------------------------------------------------------------------------------------------
# Greedy answers of SmolLM2-135M-Instruct (model=smollm2_135m) to GSM8K / MultiArith questions asked for \\boxed{},
# their final paragraphs verbatim: it never boxes, and ends with "The answer is N." (read), a bare sentence with the
# number (not an answer in any asked format) or a loop cut at the token cap.
SMOLLM2 = [
    (
        "So, Amy sold 632 - 48 = 188 pastries.\n\nTherefore, Amy sold 188 pastries.\n\nThe answer is 188.",
        "51",
        "wrong",
        "188",
    ),
    (
        "The difference between your brother's age and my brother's age is 1 - 5 = 2.\n\nThe answer is 2 years.\n\n"
        "So, the final answer is 2 years.",
        "13",
        "wrong",
        "2",
    ),
    (
        "So, Leila spent $7 on the three of them.\n\nThe final answer is 7 + 7 = 12.\n\nThe three of them spent $12 on "
        "the three of them.",
        "14",
        "wrong",
        "12",
    ),
    (
        "Finally, we can find the number of remaining cats by subtracting the number of remaining cats from the total "
        "number of cats sold. So, 64 - 19 = 22 cats are left.\n\nThe final answer is 22.",
        "8",
        "wrong",
        "22",
    ),
    (
        "Now, we need to find out how many pieces of chocolate candy Ned still had. We can do this by dividing 72 "
        "by 14, which gives us 2.5.\n\nSo, Ned still had 2.5 pieces of chocolate candy.",
        "42",
        "format",
        None,
    ),
    (
        "Adrien's salary increased by 40% of 30% of 40% of 30% of 40% of 30% of 40% of 40% of 40% of 40% of 40% of 40%",
        "95200",
        "format",
        None,
    ),
]


@pytest.mark.parametrize(("completion", "answer", "reason", "extracted"), SMOLLM2)
def test_real_smollm2_answers_are_read_as_written(completion, answer, reason, extracted):
    verdict = vf.verify_number(completion, answer)
    assert (verdict.reason, verdict.extracted) == (reason, extracted)


# --- hostile completions ----------------------------------------------------------------------------------------
VERIFIERS = [
    (vf.verify_number, "18"),
    (vf.verify_math, "\\frac{1}{2}"),
    (vf.verify_choice, "B"),
    (vf.verify_yes_no, "Yes"),
]
HOSTILE = [
    "",
    "x" * 100_000,
    "\\boxed{" + "9" * 100_000 + "}",
    "\\boxed{" * 5_000,
    "}" * 5_000 + "\\boxed{1}",
    "<answer>" * 3_000 + "</answer>",
    "<reasoning><reasoning></answer>",
    "<answer>" + "A" * 100_000 + "</answer>",
    "\\boxed{__import__('os').system('touch PWNED')}",
    "<answer>__import__('os').system('touch PWNED')</answer>",
    "Answer: exec(\"open('PWNED','w')\")",
    "\\boxed{10^{10^{10^{10^{10}}}}}",
    "\\boxed{9^{9^{9^{9}}}!}",
    "\\boxed{" + "(" * 3_000 + "1" + ")" * 3_000 + "}",
    "\\boxed{\\frac{1}{0}}",
    "\\boxed{١٢} <answer>Ｂ</answer> <answer>ДА</answer>",
    "\\boxed{1/2}\x00\ud800",
    "#### " + "1," * 20_000,
    "\\boxed{\\begin{pmatrix}" + "1&" * 2_000 + "\\end{pmatrix}}",
]


@pytest.mark.parametrize("completion", HOSTILE, ids=[f"hostile{i}" for i in range(len(HOSTILE))])
@pytest.mark.parametrize(("verify", "answer"), VERIFIERS, ids=[v.__name__ for v, _ in VERIFIERS])
def test_hostile_completions_never_raise_nor_run(verify, answer, completion, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    start = time.perf_counter()
    verdict = verify(completion, answer)
    assert time.perf_counter() - start < 12  # math-verify's own timeouts bound the worst case
    assert verdict.score in (0.0, 1.0) and verdict.reason in vf.REASONS
    assert (verdict.extracted is None) == (verdict.reason in vf.NO_ANSWER_REASONS)
    assert not list(tmp_path.iterdir())  # nothing was executed


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("\\boxed{}<answer>/ 0123456789ABx^.-,#:\n")), max_size=300))
def test_verifiers_never_raise_on_random_text(text):
    for verify, answer in VERIFIERS:
        verdict = verify(text, answer)
        assert verdict.reason in vf.REASONS and verdict.score in (0.0, 1.0)


def test_math_off_the_main_thread_does_not_parse_untimed():
    import threading

    results = {}
    thread = threading.Thread(target=lambda: results.update(v=vf.verify_math("\\boxed{0.5}", "\\frac{1}{2}")))
    thread.start()
    thread.join(30)
    assert results["v"].reason == "wrong"  # no sympy without its timeouts: string comparison only
    assert vf.verify_math("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}").score == 1.0


# --- prompts ----------------------------------------------------------------------------------------------------
class FakeChatTokenizer:
    def apply_chat_template(self, messages, add_generation_prompt, tokenize, **kwargs):
        return "|".join(f"{m['role']}:{m['content']}" for m in messages) + (
            "|assistant:" if add_generation_prompt else ""
        )


class FakeStudent:
    def __init__(self, chat: bool):
        self.chat = chat
        self.tokenizer = FakeChatTokenizer()
        self.chat_template_kwargs = {}


def test_prompts_are_chat_messages_or_plain_text():
    instruction = Gsm8kTask().instruction()
    assert "\\boxed{}" in instruction
    assert render_prompt("Q?", instruction, chat=True) == [
        {"role": "system", "content": instruction},
        {"role": "user", "content": "Q?"},
    ]
    assert render_prompt("Q?", instruction, chat=False) == f"{instruction}\n\nQ?"
    assert as_model_input(FakeStudent(chat=True), "Q?", instruction) == f"system:{instruction}|user:Q?|assistant:"
    assert as_model_input(FakeStudent(chat=False), "Q?", instruction) == f"{instruction}\n\nQ?"
    # the tiny model's arithmetic keeps its plain prompt; a chat model gets it as the only (user) turn
    assert ArithmeticTask().instruction() == ""
    assert as_model_input(FakeStudent(chat=False), "Q: 3+4=?\n", "") == "Q: 3+4=?\n"
    assert render_prompt("Q: 3+4=?\n", "", chat=True) == [{"role": "user", "content": "Q: 3+4=?\n"}]
    assert Gsm8kTask(system_prompt="Be brief.").instruction() == "Be brief."
    assert "<reasoning>" in SciKnowEvalTask().instruction() and "Yes" not in SciKnowEvalTask().instruction()


# --- synthetic files: DAPO-Math and OpenMathReasoning formats ---------------------------------------------------
DAPO_PROMPT = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{problem}\n\n"
    'Remember to put your answer on its own line after "Answer:".'
)


def write_parquet(path: Path, rows: list[dict]) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def test_dapo_math_formats_dedupe_and_eval_sets(tmp_path, data_dir):
    rows = [
        {
            "prompt": [{"role": "user", "content": DAPO_PROMPT.format(problem=f"What is {i} + {i}?")}],
            "reward_model": {"ground_truth": str(2 * i), "style": "rule"},
        }
        for i in range(20)
    ] * 3  # the original repeats every problem
    path = write_parquet(tmp_path / "dapo.parquet", rows)
    task = DapoMathTask(data_files={"train": path}, eval_set="holdout", holdout_size=5)
    splits = task.build()
    assert {name: len(part) for name, part in splits.items()} == {"train": 15, "eval": 5}
    assert splits["train"][0]["prompt"].startswith("What is") and "Answer:" not in splits["train"][0]["prompt"]
    assert task.score("Answer: 6", "6") == 1.0 and task.score("\\boxed{6}", "6") == 1.0
    processed = tmp_path / "processed.jsonl"
    processed.write_text("\n".join(json.dumps({"prompt": f"Find {i}.", "solution": str(i)}) for i in range(8)))
    on_aime = DapoMathTask(
        data_files={"train": str(processed), "eval": str(data_dir / "aime24/test.jsonl")}, eval_set="aime24"
    ).build()
    assert len(on_aime["train"]) == 8 and len(on_aime["eval"]) == 30 and on_aime["eval"][0]["answer"] == "204"
    assert bare_problem("plain problem") == "plain problem"


def test_openmath_dedupes_filters_and_keeps_the_prior(tmp_path):
    rows = []
    for i in range(30):
        for _ in range(3):  # several solutions per problem
            rows.append(
                {
                    "problem": f"Problem {i}",
                    "expected_answer": str(i),
                    "problem_type": "has_answer_extracted" if i % 10 else "converted_proof",
                    "pass_rate_72b_tir": "n/a" if i == 1 else str(i / 30),
                    "generated_solution": "long text " * 50,
                }
            )
    path = write_parquet(tmp_path / "cot-00000.parquet", rows)
    task = OpenMathTask(data_files={"train": path}, holdout_size=4)
    pool = task.load_rows("train")
    assert len(pool) == 27  # 30 problems, 3 of them proofs
    assert pool[0] == {"prompt": "Problem 1", "answer": "1", "prior_pass_rate": None, "difficulty": 0}
    assert pool[1]["prior_pass_rate"] == pytest.approx(2 / 30) and pool[1]["difficulty"] == 5
    splits = task.build()
    assert (len(splits["train"]), len(splits["eval"])) == (23, 4)
    assert len(OpenMathTask(data_files={"train": path}, problem_types=[]).load_rows("train")) == 30


# --- bad data and missing data ----------------------------------------------------------------------------------
def test_malformed_rows_name_their_file_and_line(tmp_path):
    bad_json = tmp_path / "bad.jsonl"
    bad_json.write_text('{"question": "q", "answer": "x\\n#### 1"}\n{"question": "q2", "answer": \n')
    with pytest.raises(UserError, match=rf"{bad_json}:2: not valid JSON"):
        Gsm8kTask(data_files={"eval": str(bad_json)}).load_rows("eval")
    no_hashes = tmp_path / "nohash.jsonl"
    no_hashes.write_text('{"question": "q", "answer": "x\\n#### 1"}\n\n{"question": "q", "answer": "5"}\n')
    with pytest.raises(UserError, match=rf"{no_hashes}:3: malformed gsm8k row"):
        Gsm8kTask(data_files={"eval": str(no_hashes)}).load_rows("eval")
    missing = tmp_path / "missing.jsonl"
    missing.write_text('{"problem": "p"}\n')
    with pytest.raises(UserError) as raised:
        Math500Task(data_files={"eval": str(missing)}).load_rows("eval")
    assert f"{missing}:1: malformed math500 row: no 'answer' / 'expected_answer' field" in str(raised.value)
    bad_key = tmp_path / "sci.jsonl"
    record = {"question": "q", "choices": {"text": ["a", "b"], "label": ["A", "B"]}, "answerKey": "E"}
    bad_key.write_text(
        json.dumps({**record, "type": "mcq-2-choices", "domain": "Chemistry", "details": {"level": "L3"}})
    )
    with pytest.raises(UserError, match=rf"{bad_key}:1: malformed sciknoweval row"):
        SciKnowEvalTask(data_files={"train": str(bad_key)}, types=["mcq-2-choices"]).load_rows("train")
    for error in (raised.value,):
        assert "\n" not in str(error) and "fix:" in str(error)


def test_an_evaluation_set_refuses_to_train_without_a_file(data_dir):
    task = Math500Task(data_files={"eval": str(data_dir / "math500/test.jsonl")})
    with pytest.raises(UserError) as raised:
        task.build()
    assert "task=math500 is an evaluation set: it has no train split" in str(raised.value)
    assert "task=dapo_math task.eval_set=math500" in str(raised.value)
    trainable = Math500Task(
        data_files={"eval": str(data_dir / "math500/test.jsonl"), "train": str(data_dir / "aime24/test.jsonl")}
    )
    assert {name: len(rows) for name, rows in trainable.build().items()} == {"train": 30, "eval": 500}


def test_dry_run_with_local_files(run_app, data_dir):
    files = f"task.data_files={{train:{data_dir}/gsm8k/train.jsonl,eval:{data_dir}/gsm8k/test.jsonl}}"
    proc, _ = run_app("task=gsm8k", files, "dry_run=true", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "config OK" in proc.stdout and "task=gsm8k" in proc.stdout


def test_the_tiny_model_refuses_real_benchmarks(run_app, data_dir):
    files = f"task.data_files={{train:{data_dir}/gsm8k/train.jsonl,eval:{data_dir}/gsm8k/test.jsonl}}"
    proc, _ = run_app("task=gsm8k", files, "logger=none", timeout=180)
    assert proc.returncode == 2, proc.stderr
    assert "error: model=tiny: its character tokenizer and 256-character context are made for" in proc.stderr
    assert "model=qwen3_0_6b" in proc.stderr and "Traceback" not in proc.stderr


def test_missing_hub_dataset_offline_is_one_line(run_app, tmp_path):
    env = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    proc, outputs = run_app("task=gsm8k", "logger=none", env=env, timeout=180)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr
    assert "task=gsm8k: the Hugging Face Hub dataset openai/gsm8k (main) split 'train' could not be loaded" in errors[0]
    assert "hf download --repo-type dataset openai/gsm8k" in errors[0] and "task.data_files.train=" in errors[0]
    (run_dir,) = run_dirs(outputs)
    assert read_summary(run_dir)["status"] == "failed"


def test_every_task_option_validates_without_data():
    for option in (
        "gsm8k",
        "math500",
        "aime24",
        "aime25",
        "amc23",
        "multiarith",
        "sciknoweval",
        "openmath",
        "dapo_math",
    ):
        task = build_components(compose(f"task={option}")).task
        assert task.instruction()


def test_evaluation_breaks_accuracy_down_by_domain():
    from socratic_exp.runtime.evaluation import _by_level

    metrics = _by_level("eval/greedy_acc", [1.0, 0.0, 1.0, 1.0], [0, 0, 0, 0], ["physics", "physics", "biology", None])
    assert metrics["eval/greedy_acc"] == 0.75
    assert (metrics["eval/greedy_acc/physics"], metrics["eval/greedy_acc/biology"]) == (0.5, 1.0)
    assert metrics["eval/greedy_acc/group_mean"] == 0.75  # unweighted over domains
    assert SciKnowEvalTask.metric_group == "domain" and Gsm8kTask.metric_group is None
    build_components(compose("task=sciknoweval", "objective=eval/greedy_acc/group_mean"))
