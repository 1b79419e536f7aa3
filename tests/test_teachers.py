"""Teachers: the rule teacher's diagnoses, leak detection, the LLM teacher on shared weights, and the blackbox
client against local OpenAI-compatible servers (a scripted stub with faults, and ``transformers serve``)."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
from conftest import run_dirs
from openai_stub import StubServer

from socratic_exp.core.errors import UserError
from socratic_exp.core.run_folder import read_summary
from socratic_exp.tasks import expressions as ex
from socratic_exp.tasks.arithmetic import ArithmeticTask, prompt_for
from socratic_exp.tasks.diagnosis import diagnose
from socratic_exp.teachers.base import (
    Attempt,
    GuidanceRequest,
    extend_context,
    render_template,
    states_answer,
)
from socratic_exp.teachers.blackbox import FIXED_RETRY_PROMPT, BlackboxTeacher
from socratic_exp.teachers.rule import VIEWPOINTS, RuleTeacher

# (expression, student trace, error class, wrong step (1-based) or None)
PLANTED = [
    ("2+3*4", "2+3=5\n5*4=20\nA: 20\n", "precedence", 1),
    ("8-2*3", "8-2=6\n6*3=18\nA: 18\n", "precedence", 1),
    ("1+2*3+4", "2*3=6\n1+6=7\n7+4=11\nA: 11\n", None, None),
    ("5+4*3-2", "5+4=9\n9*3=27\n27-2=25\nA: 25\n", "precedence", 1),
    ("6-2*2+1", "2*2=4\n6-4=2\n4+1=5\nA: 5\n", "copy", 3),
    ("9-3-2", "3-2=1\n9-1=8\nA: 8\n", "precedence", 1),
    ("2*(3+4)", "2*3=6\n6+4=10\nA: 10\n", "parentheses", 1),
    ("(2+3)*4", "3*4=12\n2+12=14\nA: 14\n", "parentheses", 1),
    ("9-(2+3)", "9-2=7\n7+3=10\nA: 10\n", "parentheses", 1),
    ("(1+2)*(3+4)", "2*3=6\n1+6=7\n7+4=11\nA: 11\n", "parentheses", 1),
    ("3*(8-5)+1", "3*8=24\n24-5=19\n19+1=20\nA: 20\n", "parentheses", 1),
    ("3*4+1", "3*4=13\n13+1=14\nA: 14\n", "slip", 1),
    ("7+6*2", "6*2=12\n7+12=18\nA: 18\n", "slip", 2),
    ("(5+4)*2", "5+4=9\n9*2=19\nA: 19\n", "slip", 2),
    ("9*9-8", "9*9=81\n81-8=72\nA: 72\n", "slip", 2),
    ("2+3*4", "3*5=15\n2+15=17\nA: 17\n", "copy", 1),
    ("6*7-1", "6*7=42\n42-1=41\nA: 14\n", "copy", None),
    ("8+1*2", "1*2=2\n8+2=10\n", "no_answer", None),
    ("4*4", "4*4=16\n", "no_answer", None),
    ("5-3+2", "I think it is about seven", "format", None),
    ("5-3+2", "", "format", None),
    ("(4+4)*(2+1)", "2+1=3\n4+4=8\n8*3=24\nA: 24\n", None, None),
    ("5+(5*9+4)", "5*9=45\n4+45=49\n5+49=54\nA: 54\n", None, None),  # + and * in either order
    ("9-2-3", "2-3=-1\n9--1=10\nA: 10\n", "precedence", 1),
    ("9-2-(3+1)", "2-3=-1\n-1+1=0\n9-0=9\nA: 9\n", "parentheses", 1),
]


def request_for(expression: str, trace: str, *, answer: bool = True) -> GuidanceRequest:
    value = str(ex.evaluate(ex.parse(expression)))
    return GuidanceRequest(prompt_for(expression), (Attempt(trace, 0.0, "wrong"),), value if answer else None)


@pytest.fixture
def rule_teacher() -> RuleTeacher:
    teacher = RuleTeacher()
    teacher.attach(ArithmeticTask(train_size=10, eval_size=10, probe_size=0), student=None)  # type: ignore[arg-type]
    return teacher


@pytest.mark.parametrize(("expression", "trace", "error", "step"), PLANTED, ids=[f"{e}:{c}" for e, _, c, _ in PLANTED])
def test_rule_diagnosis_names_the_wrong_step_and_its_class(expression, trace, error, step):
    diagnosis = diagnose(ex.parse(expression), trace)
    assert (diagnosis.error, diagnosis.step) == (error, step)


@pytest.mark.parametrize(("expression", "trace", "error", "step"), [p for p in PLANTED if p[2]], ids=lambda v: str(v))
def test_rule_guidance_points_at_the_step_and_never_reveals_the_answer(rule_teacher, expression, trace, error, step):
    request = request_for(expression, trace)
    [guidance] = rule_teacher.guide([request])
    assert guidance.startswith("Hint:")
    if step is not None:
        assert f"step {step}" in guidance
    assert not states_answer(guidance, request.answer, request.question)
    assert rule_teacher.metrics()["teacher/answer_leaks"] == 0


def test_rule_guidance_gives_a_slips_value_except_where_it_is_the_answer(rule_teacher):
    first, last = rule_teacher.guide(
        [
            request_for("2*3+4", "2*3=7\n7+4=11\nA: 11\n", answer=False),
            request_for("2*3+4", "2*3=6\n6+4=11\nA: 11\n", answer=False),
        ]
    )
    assert (first, last) == (
        "Hint: step 1 is wrong: 2*3 is 6, not 7.",
        "Hint: step 2 is wrong: 6+4 is not 11.",
    )


def test_rule_diagnosis_recognises_every_misconception_trace():
    """The warm-start's own misconception traces and slips, on 2000 random expressions: the right class (and for
    slips the right step) at least 99% of the time (a bracketed sum can coincide with an illegal one)."""
    task = ArithmeticTask(max_ops=4, train_size=1, eval_size=1, probe_size=0)
    rng = random.Random(0)
    checked = right = 0
    for _ in range(2000):
        expr = task.random_expression(rng)
        assert diagnose(expr, ex.format_trace(ex.correct_steps(expr))).error is None
        slip_at = rng.randrange(ex.count_ops(expr))
        slip = diagnose(expr, ex.format_trace(ex.correct_steps(expr, slip_at=slip_at, slip_by=rng.choice((-1, 2)))))
        checked, right = checked + 1, right + ((slip.error, slip.step) == ("slip", slip_at + 1))
        for kind in task.misconception_of(expr):
            checked, right = (
                checked + 1,
                right + (diagnose(expr, ex.format_trace(ex.MISCONCEPTIONS[kind](expr))).error == kind),
            )
    assert checked > 2500
    assert right / checked >= 0.99


def test_rule_teacher_with_ground_truth_states_the_answer_and_counts_the_leak():
    teacher = RuleTeacher(access_ground_truth=True)
    teacher.attach(ArithmeticTask(train_size=10, eval_size=10, probe_size=0), student=None)  # type: ignore[arg-type]
    [guidance] = teacher.guide([request_for("2+3*4", "2+3=5\n5*4=20\nA: 20\n")])
    assert guidance.endswith("The answer is 14.")
    metrics = teacher.metrics()
    assert metrics["teacher/answer_leaks"] == 1 and metrics["teacher/leak_rate"] == 1.0
    assert metrics["teacher/error_precedence"] == 1
    assert teacher.metrics() == {}  # drained


def test_rule_teacher_without_access_never_sees_the_answer(rule_teacher, monkeypatch):
    seen = []
    monkeypatch.setattr(rule_teacher, "_guide", lambda requests: seen.extend(requests) or ["Hint: x"] * len(requests))
    rule_teacher.guide([request_for("2+3*4", "2+3=5\nA: 5\n")])
    assert seen[0].answer is None and seen[0].reference is None


def test_the_teacher_reads_the_answer_cut_to_answer_tokens(monkeypatch):
    """teacher.answer_tokens: the latest attempt cut to its first N tokens of the student's tokenizer (characters,
    for the tiny model's); a shorter one is left whole."""
    from types import SimpleNamespace

    from socratic_exp.models.char_tokenizer import build_char_tokenizer

    teacher = RuleTeacher(answer_tokens=5)
    teacher.attach(
        ArithmeticTask(train_size=10, eval_size=10, probe_size=0), SimpleNamespace(tokenizer=build_char_tokenizer())
    )
    seen = []
    monkeypatch.setattr(teacher, "_guide", lambda requests: seen.extend(requests) or ["Hint: x"] * len(requests))
    long, short = request_for("2+3*4", "2+3=5\nA: 5\n"), request_for("2+3*4", "A: 5")
    teacher.guide([long, short])
    assert [r.latest.completion for r in seen] == ["2+3=5", "A: 5"]
    assert seen[0].question == long.question


def test_rule_reflect_turns_recurring_errors_into_viewpoints(rule_teacher):
    question = prompt_for("2*(3+4)")
    wrong = Attempt("2*3=6\n6+4=10\nA: 10\n", 0.0, "wrong")
    right = Attempt("3+4=7\n2*7=14\nA: 14\n", 1.0, "correct")
    first = rule_teacher.reflect([question, question], [wrong, right])
    assert first == [None, None]  # seen once: not yet recurring; a right trace teaches nothing
    [viewpoint] = rule_teacher.reflect([question], [wrong])
    assert viewpoint is not None and viewpoint.text in VIEWPOINTS["parentheses"]
    assert viewpoint.kind in ("principle", "heuristic") and viewpoint.source_trace == question + wrong.completion


def test_rule_teacher_on_other_tasks_passes_on_the_verifier_feedback():
    teacher = RuleTeacher()
    teacher.attach(object(), student=None)  # type: ignore[arg-type]
    requests = [
        GuidanceRequest("What is 2+2?", (Attempt("<answer>5</answer>", 0.0, reason),)) for reason in ("format", "wrong")
    ]
    format_hint, wrong_hint = teacher.guide(requests)
    assert "format" in format_hint and "incorrect" in wrong_hint


@pytest.mark.parametrize(
    ("guidance", "answer", "question", "leaks"),
    [
        ("Hint: step 2 is wrong: 3*4 is not 13.", "14", "Q: 2+3*4=?", False),
        ("The answer is 14.", "14", "Q: 2+3*4=?", True),
        ("Hint: the result should be 14", "14", "Q: 2+3*4=?", True),
        ("Hint: multiply 3*4 first.", "4", "Q: 3*4-8=?", False),
        ("So 3*4-8 = 4.", "4", "Q: 3*4-8=?", True),
        ("A: 27", "27.0", "How many?", True),
        ("Check option C against the data.", "B", "", False),
        ("The answer is B.", "B", "", True),
        ("A common mistake is ...", "A", "", False),
        ("<answer>D</answer>", "D", "", True),
        ("so x = \\frac{1}{2}", "\\frac{1}{2}", "", True),
        ("", "14", "", False),
        ("anything", None, "", False),
    ],
)
def test_answer_leak_detection(guidance, answer, question, leaks):
    assert states_answer(guidance, answer, question) is leaks


def test_template_and_context_helpers():
    request = GuidanceRequest("Q: 1+1=?\n", (Attempt("A: 3\n", 0.0, "wrong"),), answer="2", reference="1+1=2")
    text = render_template("{question}|{student_answer}|{ground_truth_block}|{verifier_feedback}|{x}", request)
    assert text == "Q: 1+1=?|A: 3|The correct final answer is 2.|wrong|{x}"
    assert extend_context("Q: 1+1=?\n", "A: 3", "Hint: add.") == "Q: 1+1=?\nA: 3\nHint: add.\n"
    chat = extend_context([{"role": "user", "content": "q"}], "a", "g")
    assert [m["role"] for m in chat] == ["user", "assistant", "user"]


def test_capabilities_are_properties_of_the_interface():
    """What an algorithm may rely on is asked of the teacher, never read from its class."""
    from socratic_exp.teachers.llm import LLMTeacher
    from socratic_exp.teachers.none import NoTeacher

    arithmetic = ArithmeticTask(train_size=10, eval_size=10, probe_size=0)
    rule, llm, none = RuleTeacher(), LLMTeacher(), NoTeacher()
    assert rule.present and llm.present and not none.present
    assert rule.cannot_reflect_on(arithmetic) is None and llm.cannot_reflect_on(object()) is None  # type: ignore[arg-type]
    assert "task=arithmetic" in (rule.cannot_reflect_on(object()) or "")  # type: ignore[arg-type]
    assert rule.cannot_meta_learn() is None and llm.cannot_meta_learn() is None
    problem, fix = LLMTeacher(model="some/teacher", backend="vllm").cannot_meta_learn() or ("", "")
    assert "vLLM" in problem and fix == "use teacher.backend=transformers"
    assert rule.separate_model() is None and llm.separate_model() is None  # not attached: no model of its own


def test_reflection_is_an_interface_a_teacher_may_offer():
    """Reflection (and learning from reflections) is ``teachers.reflection``'s; a teacher that never reflects carries
    none of it, and only a teacher whose own weights write its viewpoints offers them for training."""
    from socratic_exp.teachers.llm import LLMTeacher
    from socratic_exp.teachers.none import NoTeacher
    from socratic_exp.teachers.reflection import Reflective, TrainableReflective

    rule, llm, none = RuleTeacher(), LLMTeacher(), NoTeacher()
    blackbox = BlackboxTeacher(model="m", check_server=False)
    assert [isinstance(t, Reflective) for t in (rule, llm, blackbox, none)] == [True, True, True, False]
    assert [isinstance(t, TrainableReflective) for t in (rule, llm, blackbox, none)] == [False, True, False, False]
    reflection = ("reflect", "meta_update", "save_meta_state", "load_meta_state", "cannot_reflect_on",
                  "cannot_meta_learn", "decouple_from_student", "reflection_example")  # fmt: skip
    assert [name for name in reflection if hasattr(none, name)] == []
    assert not any(name.startswith("meta_") for name in vars(llm))  # its meta-learning settings are the method's
    assert llm.meta_update([]) == {}  # it learns nothing by itself: the method trains its weights


# --- llm teacher ----------------------------------------------------------------------------------------------


def test_llm_teacher_self_guidance_shares_the_student_weights():
    import torch

    from socratic_exp.models.base import Student
    from socratic_exp.models.char_tokenizer import build_char_tokenizer
    from socratic_exp.models.tiny import TinyModel
    from socratic_exp.teachers.llm import LLMTeacher

    torch.manual_seed(0)
    tokenizer = build_char_tokenizer()
    model = TinyModel(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64).build_untrained(tokenizer)
    student = Student(model=model, tokenizer=tokenizer, path="in-memory")
    teacher = LLMTeacher(max_new_tokens=8)
    before = sum(p.numel() for p in model.parameters())
    teacher.attach(ArithmeticTask(train_size=10, eval_size=10, probe_size=0), student)
    assert teacher._teacher.model is model  # the same object: no second copy
    model.train()
    guidance = teacher.guide([request_for("2+3*4", "2+3=5\nA: 5\n"), request_for("4*4", "A: 15\n")])
    assert model.training  # the student's mode is restored
    assert len(guidance) == 2 and all(g.startswith("Hint:") and "\n" not in g for g in guidance)
    metrics = teacher.metrics()
    assert metrics["teacher/requests"] == 2 and metrics["teacher/prompt_tokens"] > 20
    assert sum(p.numel() for p in model.parameters()) == before


# --- blackbox teacher -----------------------------------------------------------------------------------------


def blackbox(server: StubServer, tmp_path: Path, **overrides) -> BlackboxTeacher:
    settings = {
        "model": server.model,
        "base_url": server.url,
        "cache_dir": str(tmp_path / "cache"),
        "backoff_s": 0.01,
        "timeout_s": 1.0,
        "max_retries": 3,
    }
    return BlackboxTeacher(**(settings | overrides))


def test_blackbox_returns_guidance_and_counts_tokens(tmp_path):
    with StubServer() as server:
        teacher = blackbox(server, tmp_path, cache=False)
        teacher.preflight()
        guidance = teacher.guide([request_for("2+3*4", "2+3=5\nA: 5\n")] * 3)
        teacher.close()
    assert guidance == [server.reply] * 3
    metrics = teacher.metrics()
    assert metrics["teacher/requests"] == 3 and metrics["teacher/prompt_tokens"] == 30
    assert metrics.get("teacher/failures", 0) == 0


def test_blackbox_retries_faults_and_falls_back_without_crashing(tmp_path):
    with StubServer(slow_s=3.0) as server:
        teacher = blackbox(server, tmp_path, cache=False, max_retries=2)
        teacher.preflight()
        server.faults.extend(["429", "500", "broken_json", "empty", "slow"])
        recovered = teacher.guide([request_for("2+3*4", "2+3=5\nA: 5\n")] * 5)
        assert recovered == [server.reply] * 5
        assert teacher.metrics()["teacher/retries"] == 5
        server.faults.extend(["500"] * 3)  # one request, three failures: past max_retries=2
        [fallback] = teacher.guide([request_for("4*4", "A: 15\n")])
        teacher.close()
    assert fallback == FIXED_RETRY_PROMPT
    metrics = teacher.metrics()
    assert metrics["teacher/failures"] == 1 and metrics["teacher/retries"] == 2


def test_blackbox_cache_answers_a_rerun_without_the_server(tmp_path):
    requests = [request_for("2+3*4", "2+3=5\nA: 5\n"), request_for("4*4", "A: 15\n")]
    with StubServer() as server:
        first = blackbox(server, tmp_path, check_server=False)
        first.guide(requests)
        first.close()
        served = server.requests
        second = blackbox(server, tmp_path, check_server=False)
        assert second.guide(requests) == [server.reply] * 2
        second.close()
    assert server.requests == served == 2
    assert second.metrics()["teacher/cache_hits"] == 2


@pytest.mark.parametrize(
    ("server_key", "env_key", "overrides", "message"),
    [
        (None, None, {"model": "no-such-model"}, "does not serve model 'no-such-model' (it serves: stub-teacher)"),
        (None, None, {"base_url": "http://127.0.0.1:9/v1"}, "is unreachable"),
        ("sk-right", None, {}, "needs an API key ($SX_TEST_KEY is not set)"),
        ("sk-right", "sk-wrong", {}, "rejected the API key in $SX_TEST_KEY"),
    ],
)
def test_blackbox_preflight_fails_with_one_line(tmp_path, monkeypatch, server_key, env_key, overrides, message):
    monkeypatch.delenv("SX_TEST_KEY", raising=False)
    if env_key:
        monkeypatch.setenv("SX_TEST_KEY", env_key)
    with StubServer(api_key=server_key) as server:
        teacher = blackbox(server, tmp_path, api_key_env="SX_TEST_KEY", max_retries=0, **overrides)
        with pytest.raises(UserError) as raised:
            teacher.preflight()
        teacher.close()
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_blackbox_sends_the_key_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SX_TEST_KEY", "sk-right")
    with StubServer(api_key="sk-right") as server:
        teacher = blackbox(server, tmp_path, api_key_env="SX_TEST_KEY", cache=False)
        teacher.preflight()
        assert teacher.guide([request_for("4*4", "A: 15\n")]) == [server.reply]
        teacher.close()
    assert server.authorizations[-1] == "Bearer sk-right"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_blackbox_against_transformers_serve(tmp_path):
    """A real OpenAI-compatible server: ``transformers serve`` with a small model saved to a local folder."""
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    import torch

    from socratic_exp.models.char_tokenizer import build_char_tokenizer
    from socratic_exp.models.tiny import TinyModel

    torch.manual_seed(0)
    folder = tmp_path / "tiny-teacher"
    tokenizer = build_char_tokenizer()
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    TinyModel(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64).build_untrained(
        tokenizer
    ).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    port = _free_port()
    serve = shutil.which("transformers") or pytest.skip("the transformers CLI is not installed")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hf")}
    (tmp_path / "hf").mkdir()
    server = subprocess.Popen(
        [serve, "serve", str(folder), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        teacher = BlackboxTeacher(
            model=str(folder),
            base_url=f"http://127.0.0.1:{port}/v1",
            max_tokens=8,
            cache=False,
            max_retries=0,
        )
        deadline = time.time() + 120
        while True:  # the server takes a few seconds to start
            try:
                teacher.preflight()
                break
            except UserError:
                if time.time() > deadline or server.poll() is not None:
                    raise
                time.sleep(1)
        guidance = teacher.guide([request_for("2+3*4", "2+3=5\nA: 5\n"), request_for("4*4", "A: 15\n")])
        teacher.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert len(guidance) == 2 and all(isinstance(g, str) and g for g in guidance)
    metrics = teacher.metrics()
    assert metrics["teacher/requests"] == 2 and metrics.get("teacher/failures", 0) == 0
    assert metrics["teacher/completion_tokens"] > 0


# --- in a run -------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_unreachable_teacher_server_is_one_line_and_exit_2(run_app):
    proc, outputs = run_app(
        "teacher=blackbox", "teacher.model=m", "teacher.base_url=http://127.0.0.1:9/v1", "logger=none", timeout=120
    )
    assert proc.returncode == 2
    assert (
        proc.stderr.strip().splitlines()[-1].startswith("error: teacher server at http://127.0.0.1:9/v1 is unreachable")
    )
    assert "Traceback" not in proc.stderr
    [run_dir] = run_dirs(outputs)
    assert read_summary(run_dir)["status"] == "failed"
