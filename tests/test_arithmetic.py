"""The arithmetic testbed: expressions, traces, the verifier, splits, data files and the warm-start corpus."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from socratic_exp.core.errors import UserError
from socratic_exp.tasks import expressions as ex
from socratic_exp.tasks.arithmetic import ArithmeticTask, extract_answer, guidance_for
from socratic_exp.tasks.diagnosis import diagnose
from socratic_exp.teachers.rule import RuleTeacher, hint_for


@pytest.fixture(scope="module")
def task():
    return ArithmeticTask(train_size=300, eval_size=60, probe_size=20)


@pytest.fixture(scope="module")
def splits(task):
    return task.build()


def test_render_parse_round_trip_and_value():
    rng = random.Random(1)
    for ops in range(1, 6):
        for _ in range(300):
            expr = ex.random_expression(rng, ops)
            assert ex.parse(ex.render(expr)) == expr
            assert ex.count_ops(expr) == ops
            steps = ex.correct_steps(expr)
            assert len(steps) == ops and steps[-1].result == ex.evaluate(expr)
            assert all(ex.apply(s.op, s.left, s.right) == s.result for s in steps)


def test_textbook_order_and_the_two_misconceptions():
    expr = ex.parse("3+4*2")
    assert ex.format_trace(ex.correct_steps(expr)) == "4*2=8\n3+8=11\nA: 11\n"
    assert ex.format_trace(ex.precedence_ignored_steps(expr)) == "3+4=7\n7*2=14\nA: 14\n"
    paren = ex.parse("(4+6)*3")  # Socratic-RL's example: 4 + 18
    assert ex.format_trace(ex.parentheses_ignored_steps(paren)) == "6*3=18\n4+18=22\nA: 22\n"
    assert ex.correct_steps(paren)[-1].result == 30


def test_slip_is_carried_forward():
    steps = ex.correct_steps(ex.parse("2*3+4"), slip_at=0, slip_by=1)
    assert [str(s) for s in steps] == ["2*3=7", "7+4=11"]


def test_a_miscopied_operand_is_carried_forward_and_hinted_as_the_rule_teacher_does():
    expr = ex.parse("2*3+4")
    wrong = ex.correct_steps(expr, slip_at=1, miscopy=("right", 5))
    assert [str(s) for s in wrong] == ["2*3=6", "6+5=11"]
    assert [str(s) for s in ex.correct_steps(expr, slip_at=0, miscopy=("left", 1))] == ["1*3=3", "3+4=7"]
    hints = {guidance_for("copy", wrong, ex.correct_steps(expr), expr, random.Random(seed)) for seed in range(20)}
    assert hints == {
        "Hint: step 2 uses 6+5 but the expression has 6+4.",
        "Hint: copy the numbers of step 2 exactly: 6+4.",
    }
    diagnosis = RuleTeacher().diagnose("Q: 2*3+4=?\n", ex.format_trace(wrong))
    assert hint_for(diagnosis) == "Hint: step 2 uses 6+5 but the expression has 6+4."


def test_a_slips_hint_gives_the_right_value_except_in_the_last_step():
    expr = ex.parse("2*3+4")
    first_slipped = ex.correct_steps(expr, slip_at=0, slip_by=1)  # 2*3=7, 7+4=11
    last_slipped = ex.correct_steps(expr, slip_at=1, slip_by=1)  # 2*3=6, 6+4=11
    right = ex.correct_steps(expr)
    hints = {guidance_for("slip", first_slipped, right, expr, random.Random(seed)) for seed in range(20)}
    assert hints == {"Hint: recheck 2*3.", "Hint: step 1 is wrong: 2*3 is 6, not 7."}
    hints = {guidance_for("slip", last_slipped, right, expr, random.Random(seed)) for seed in range(20)}
    assert hints == {"Hint: recheck 6+4.", "Hint: step 2 is wrong: 6+4 is not 11."}
    teacher = RuleTeacher()
    for wrong, hint in [
        (first_slipped, "Hint: step 1 is wrong: 2*3 is 6, not 7."),
        (last_slipped, "Hint: step 2 is wrong: 6+4 is not 11."),
    ]:
        assert hint_for(teacher.diagnose("Q: 2*3+4=?\n", ex.format_trace(wrong))) == hint


@pytest.mark.parametrize("bad", ["", "3+", "(1+2", "1+2)", "2**3", "__import__('os')", "1" * 300, "((" * 40 + "1"])
def test_parser_rejects_anything_else(bad):
    with pytest.raises(ex.ParseError):
        ex.parse(bad)


def test_verifier_scores_gold_and_wrong(task, splits):
    for row in splits["eval"]:
        assert task.score(row["reference"], row["answer"]) == 1.0
        assert task.score(f"A: {int(row['answer']) + 1}", row["answer"]) == 0.0
    assert task.verify("4*2=8\n3+8=11\nA: 11\n", "11").reason == "correct"
    assert task.verify("A: 12", "11").reason == "wrong"
    assert task.verify("12", "12").reason == "format"
    assert task.verify("the answer is 11", "11").extracted is None
    assert task.score("A: 5\nHint: no\nA: 11", "11") == 1.0  # the last answer line counts
    assert task.score("A: 011", "11") == 1.0


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=2000))
def test_verifier_never_raises_on_hostile_text(text):
    verdict = ArithmeticTask().verify(text, "7")
    assert verdict.score in (0.0, 1.0)


@pytest.mark.parametrize(
    "hostile",
    [
        "A: " + "9" * 100_000,
        "A: \u0661\u0662",
        "x" * 5_000_000 + "A: 7",
        "A: 7\x00",
        "__import__('os').system('x')",
        "A: -0",
        "A:7",
        "A: 7.0",
        "A: ７",
    ],
)
def test_verifier_hostile_strings(hostile):
    verdict = ArithmeticTask().verify(hostile, "7")
    assert verdict.score in (0.0, 1.0)
    assert ArithmeticTask().score("x" * 5_000_000 + "A: 7", "7") == 1.0


@pytest.mark.parametrize(
    ("share", "low", "high"), [(1.0, 1.0, 1.0), (0.0, 0.0, 0.0), (0.5, 0.40, 0.62), (None, 0.2, 0.38)]
)
def test_order_sensitive_share_sets_how_many_answers_the_order_of_operations_decides(share, low, high):
    is_sensitive = ArithmeticTask().misconception_of  # by hand: which questions the order of operations decides
    assert is_sensitive(ex.parse("3+4*2")) == ["precedence"] and is_sensitive(ex.parse("(4+6)*3")) == ["parentheses"]
    assert not is_sensitive(ex.parse("2+3-4")) and not is_sensitive(ex.parse("2*(3*4)"))
    task = ArithmeticTask(train_size=400, eval_size=200, probe_size=0, order_sensitive_share=share)
    for split in ("train", "eval"):
        rows = task.build()[split]
        sensitive = [bool(task.misconception_of(ex.parse(e))) for e in rows["expression"]]
        assert low <= sum(sensitive) / len(sensitive) <= high, (split, sum(sensitive) / len(sensitive))
    examples = task.warmstart_examples(300, seed=0)
    texts = ["".join(segment for segment, _ in example) for example in examples]
    questions = [ex.parse(text[text.rindex("Q: ") + 3 : text.rindex("=?")]) for text in texts]
    assert low - 0.05 <= sum(bool(task.misconception_of(q)) for q in questions) / len(questions) <= high + 0.05


def test_a_draw_that_cannot_be_met_is_an_error_not_a_hang(monkeypatch):
    import socratic_exp.tasks.arithmetic as arithmetic

    monkeypatch.setattr(arithmetic, "_MAX_SAMPLING_TRIES", 1)
    monkeypatch.setattr(ex, "random_expression", lambda *_: ex.parse("1+2"))  # never order-sensitive
    with pytest.raises(UserError, match=r"no order-sensitive expression of 1-3 operations .* in 500 draws"):
        ArithmeticTask(order_sensitive_share=1.0).random_expression(random.Random(0))


def test_order_sensitive_questions_need_two_operations():
    with pytest.raises(UserError, match=r"task.order_sensitive_share=0.5: needs task.max_ops >= 2"):
        ArithmeticTask(max_ops=1)
    assert ArithmeticTask(max_ops=1, order_sensitive_share=None).max_ops == 1
    assert ArithmeticTask(max_ops=1, order_sensitive_share=0.0).max_ops == 1


def test_extract_answer_takes_the_last_line():
    assert extract_answer("A: 1\nA: -23\n") == "-23"
    assert extract_answer("no answer") is None


def test_splits_are_disjoint_deterministic_and_graded(task, splits):
    expressions = {split: {row["expression"] for row in splits[split]} for split in ("train", "eval", "probe")}
    assert not expressions["train"] & expressions["eval"]
    assert not expressions["train"] & expressions["probe"]
    assert not expressions["eval"] & expressions["probe"]
    assert len(splits["train"]) == 300 and len(splits["eval"]) == 60 and len(splits["probe"]) == 20
    again = ArithmeticTask(train_size=300, eval_size=60, probe_size=20).build()
    assert again["eval"]["expression"] == splits["eval"]["expression"]
    other_seed = ArithmeticTask(seed=1, train_size=300, eval_size=60, probe_size=20).build()
    assert other_seed["eval"]["expression"] != splits["eval"]["expression"]
    assert set(splits["train"]["difficulty"]) == {1, 2, 3}
    assert splits["train"]["index"] == list(range(300))
    for row in splits["train"]:
        trace = ex.correct_steps(ex.parse(row["expression"]))
        assert all(abs(s.result) <= task.max_value for s in trace)
        assert row["prompt"] == f"Q: {row['expression']}=?\n"


def test_data_files_load_and_malformed_rows_name_the_line(tmp_path):
    good = tmp_path / "eval.jsonl"
    good.write_text('{"expression": "3+4*2", "answer": "11"}\n\n{"expression": "(1+2)*3"}\n')
    task = ArithmeticTask(data_files={"eval": str(good)}, train_size=10)
    built = task.build()
    rows = built["eval"]
    assert rows["answer"] == ["11", "9"] and rows["difficulty"] == [2, 2]
    assert len(built["train"]) == 10  # splits the files do not name are generated
    for content, message in [
        ('{"expression": "3+"}\n', "eval.jsonl:1: malformed arithmetic row"),
        ('{"expr": "3"}\n', "eval.jsonl:1: malformed arithmetic row"),
        ("not json\n", "eval.jsonl:1: malformed arithmetic row"),
        ('{"expression": "1+1"}\n{"expression": "2*2", "answer": "5"}\n', "eval.jsonl:2: answer '5' does not equal"),
    ]:
        good.write_text(content)
        with pytest.raises(UserError, match=message):
            ArithmeticTask(data_files={"eval": str(good)}).build()


def _kind(example) -> str:
    """The corpus kind of a warm-start example, read off its context segments."""
    first = example[0][0]
    if len(example) == 4:
        return "fixed_retry" if example[2][0] == "Hint: try again.\n" else "retry"
    if first.startswith("Q:"):
        return "plain"
    if first.startswith("Note: a correct solution is\n"):
        return "solution"
    if first.startswith("Hint: Your final answer"):
        return "verdict"
    return "critique" if first.startswith("Hint:") else "principle"


def test_warmstart_corpus_has_misconceptions_contexts_and_masks(task):
    examples = task.warmstart_examples(4000, seed=0)
    held_out = {row["expression"] for split in ("eval", "probe") for row in task.build()[split]}
    counts: dict[str, int] = {}
    wrong_single = sensitive = wrong_after_retry_line = 0
    for example in examples:
        kind = _kind(example)
        counts[kind] = counts.get(kind, 0) + 1
        text = "".join(segment for segment, _ in example)
        question = text[text.rindex("Q: ") + 3 : text.rindex("=?")]
        assert question not in held_out
        expr = ex.parse(question)
        answer = str(ex.evaluate(expr))
        trainable = [segment for segment, train in example if train]
        assert trainable == [example[-1][0]]  # only the student's own (final) attempt is trained on
        if kind == "plain" and task.misconception_of(expr):
            sensitive += 1
            wrong_single += task.score(trainable[0], answer) == 0
        elif kind == "fixed_retry":  # the uninformative line is followed by a fresh draw, sometimes wrong
            wrong_after_retry_line += task.score(trainable[0], answer) == 0
        elif kind != "plain":  # every informative context is followed by the correct trace
            assert trainable[0] == ex.format_trace(ex.correct_steps(expr))
        if kind == "solution":  # the demonstration is the very trace to copy
            assert example[0][0] == "Note: a correct solution is\n" + trainable[0] + f"Q: {question}=?\n"
        if kind == "verdict":
            verdict = example[0][0].split("\n")[0]
            said = verdict.split()[4]
            assert (said == answer) == verdict.endswith("is correct.")
    shares = {kind: n / len(examples) for kind, n in counts.items()}
    expected = {"retry": 0.25, "fixed_retry": 0.05, "principle": 0.10, "critique": 0.10, "verdict": 0.10,
                "solution": 0.10, "plain": 0.30}  # fmt: skip
    for kind, share in expected.items():
        assert abs(shares[kind] - share) < 0.025, (kind, shares[kind])
    # about half of the unassisted traces where a misconception matters show it
    assert 0.4 < wrong_single / sensitive < 0.6
    assert wrong_after_retry_line > 0
    # a retry's wrong attempt is, evenly, a misconception that changes the answer, a slip or a miscopy: each an error
    # the rule teacher diagnoses (half the questions are order-sensitive, mostly with one misconception: a third
    # each; the other half: half slips, half miscopies; so about 0.5/3 + 0.5/2 = 0.42 each of slips and miscopies)
    errors: dict[str, int] = {}
    for example in examples:
        if _kind(example) == "retry":
            question = example[0][0][3:-3]
            error = diagnose(ex.parse(question), example[1][0]).error
            errors[error] = errors.get(error, 0) + 1
    assert set(errors) == {"precedence", "parentheses", "slip", "copy"}
    retries = sum(errors.values())
    assert 0.35 < errors["copy"] / retries < 0.50 and 0.35 < errors["slip"] / retries < 0.50, errors


@pytest.mark.parametrize(
    ("shares", "message"),
    [
        ({"retry": 0.7, "solution": 0.5}, "sum to at most 1 (they sum to 1.2)"),
        ({"hint": 0.1}, "unknown kind(s) ['hint']"),
    ],
)
def test_context_shares_are_checked(shares, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        ArithmeticTask(context_shares=shares)


def test_rl_ops_trains_and_evaluates_on_other_counts_and_keeps_the_corpus():
    """The sparse-reward regime's questions: 3 and 4 operations in equal shares. A held-out 3-operation question is
    one of the corpus's own held-out questions (so the warm-start never saw it); a 4-operation one is new."""
    base = ArithmeticTask(train_size=200, eval_size=60, probe_size=12)
    sparse = ArithmeticTask(train_size=200, eval_size=60, probe_size=12, rl_ops=[3, 4])
    assert sparse.warmstart_fingerprint() == base.warmstart_fingerprint()  # the same student
    assert sparse.warmstart_examples(50, seed=0) == base.warmstart_examples(50, seed=0)
    corpus, rows = base.build(), sparse.build()
    for split in ("eval", "probe"):
        counts = sorted(rows[split]["difficulty"])
        assert counts.count(3) == counts.count(4) > 0 and set(counts) == {3, 4}
        threes = {r["expression"] for r in rows[split] if r["difficulty"] == 3}
        assert threes <= set(corpus[split]["expression"])
        assert rows[split]["index"] == list(range(len(counts)))
    # the corpus's 60 eval questions hold 24 of 3 operations (fewer than 60 / 2), its 12 probe questions 4
    assert (len(rows["eval"]), len(rows["probe"])) == (48, 8)
    held_out = {r["expression"] for split in ("eval", "probe") for r in rows[split]}
    held_out |= {r["expression"] for split in ("eval", "probe") for r in corpus[split]}
    assert set(rows["train"]["difficulty"]) == {3, 4} and len(rows["train"]) == 200
    assert not held_out & set(rows["train"]["expression"])


@pytest.mark.parametrize("ops", [[], [3, 3], [0, 4], [13]])
def test_rl_ops_must_be_distinct_counts(ops):
    with pytest.raises(UserError, match="rl_ops"):
        ArithmeticTask(rl_ops=ops)
