"""Socratic-RL: viewpoint utility and the teacher's cross-probe pairs (hand-computed), the reflection criterion, the
knowledge base's rules and record, the teachers' meta-learning, the viewpoints in the prompts the trainer hands to
generation, the distillers on the tiny model, and end-to-end runs (every distiller x teacher x meta-learning,
kill-and-resume)."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import assert_refused, compose, run_dirs

from socratic_exp.algorithms.socratic_rl.__main__ import main as viewpoints_main
from socratic_exp.algorithms.socratic_rl.config import SocraticRL
from socratic_exp.algorithms.socratic_rl.knowledge_base import (
    Entry,
    KnowledgeBase,
    ViewpointLog,
    latest_entries,
    similarity,
)
from socratic_exp.algorithms.socratic_rl.loop import select_traces
from socratic_exp.algorithms.socratic_rl.meta_learning import cross_probe_pairs
from socratic_exp.algorithms.socratic_rl.teacher_dpo import TeacherDPO
from socratic_exp.algorithms.socratic_rl.utility import mean, measure_utilities
from socratic_exp.core.errors import ConfigError
from socratic_exp.core.run_folder import read_jsonl, read_metrics, read_summary
from socratic_exp.teachers.base import Attempt
from socratic_exp.teachers.reflection import ScoredViewpoint, parse_viewpoint

PRECEDENCE = "Principle: do * before + and -."
BRACKETS = "Principle: work out the brackets first."


# --- utility ------------------------------------------------------------------------------------------------------


def stub_scorer(effects: dict[str, set[int]], harms: dict[str, set[int]], base: set[int], items: int = 50):
    """A student that solves ``base`` alone; each viewpoint in context adds the items it fixes and loses the items it
    harms (the known effect per viewpoint)."""
    calls = []

    def scores(texts):
        calls.append(tuple(texts))
        solved = set(base)
        for text in texts:
            solved |= effects.get(text, set())
        for text in texts:
            solved -= harms.get(text, set())
        return [float(i in solved) for i in range(items)]

    return scores, calls


def entry(i: int, text: str) -> Entry:
    return Entry(i, text, "principle", "Q: 1+1=?\n", "1+1=3\nA: 3\n", written_at=1)


def test_utility_is_the_accuracy_lost_without_each_viewpoint():
    useful, neutral, harmful = entry(0, PRECEDENCE), entry(1, BRACKETS), entry(2, "Note: add left to right.")
    scores, calls = stub_scorer(
        effects={PRECEDENCE: set(range(10, 15))}, harms={harmful.text: {0, 1, 2}}, base=set(range(10))
    )
    utilities, with_all, without_any = measure_utilities([useful, neutral, harmful], scores)
    assert utilities[useful.id][0] == pytest.approx(5 / 50)
    assert utilities[neutral.id][0] == pytest.approx(0.0)
    assert utilities[harmful.id][0] == pytest.approx(-3 / 50)
    assert with_all == pytest.approx(12 / 50) and without_any == pytest.approx(10 / 50)
    assert utilities[useful.id][1:] == pytest.approx((12 / 50, 7 / 50))  # (with V, with V minus v)
    assert len(calls) == len(set(calls)) == 5  # |V| + 2 passes, none repeated


def test_a_single_viewpoint_costs_two_passes():
    scores, calls = stub_scorer(effects={PRECEDENCE: {3}}, harms={}, base={1})
    utilities, _, _ = measure_utilities([entry(0, PRECEDENCE)], scores)
    assert utilities[0][0] == pytest.approx(1 / 50) and sorted(calls) == [(), (PRECEDENCE,)]
    assert mean([]) == 0.0 and mean([0.25, 0.5]) == 0.375


# --- the teacher's preference pairs across probes ---------------------------------------------------------------------

A, B, C, D, F = (
    "Principle: do * before + and -.",
    "Principle: add from left to right.",
    "Principle: check each step.",
    "Principle: recheck every product.",
    "Principle: end with the line A: <number>.",
)


def measured(text: str, utility: float, reason: str = "wrong", question: str = "Q: 2+3*4=?\n") -> ScoredViewpoint:
    return ScoredViewpoint(question, Attempt(f"trace of {text[11:20]}", 0.0, reason), text, utility)


def hand_knowledge_base() -> tuple[list[ScoredViewpoint], list[ScoredViewpoint]]:
    """Probes at steps 10 and 20 (``past``) and 30 (``new``), with exact binary utilities. Mean utilities: A (0.375
    at 10, 0.125 at 30) 0.25, B -0.125, C 0.0625, D 0.1875, F -0.5 (F's trace failed on format, the others were
    wrong answers)."""
    past = [measured(A, 0.375), measured(B, -0.125), measured(F, -0.5, reason="format"), measured(D, 0.1875)]
    new = [measured(C, 0.0625), measured(A, 0.125)]
    return new, past


def test_cross_probe_pairs_on_a_hand_made_knowledge_base():
    new, past = hand_knowledge_base()
    pairs = cross_probe_pairs(new, past, margin=0.125, limit=10)
    # Written out by hand, margin 0.125, most separated first (ties: C's pairs in the order A, B):
    #   A > B by 0.375; A > C by 0.1875; C > B by 0.1875; D > C by 0.125 (exactly the margin: kept)
    # Left out: A > F by 0.75 and C > F (F is another error class), A > D by 0.0625 (below the margin),
    #   D > B by 0.3125 (neither measured at this probe: offered at an earlier one).
    assert [(b.text, w.text, gap) for b, w, gap in pairs] == [
        (A, B, 0.375), (A, C, 0.1875), (C, B, 0.1875), (D, C, 0.125),
    ]  # fmt: skip
    assert pairs[0][0] is new[1]  # a re-measured viewpoint is represented by its latest measurement
    assert [(b.text, w.text) for b, w, _ in cross_probe_pairs(new, past, margin=0.125, limit=3)] == [
        (A, B), (A, C), (C, B),
    ]  # fmt: skip
    # With the latest measurement instead of the mean, A would beat C by 0.0625 only: the mean is what is compared.
    assert (A, C) not in [(b.text, w.text) for b, w, _ in cross_probe_pairs(new, past, margin=0.1875001, limit=10)]


def test_one_viewpoint_per_probe_still_gives_pairs_and_ties_give_none():
    """viewpoint_budget=1: each probe measures one viewpoint; the second probe's viewpoint pairs with the first's."""
    assert cross_probe_pairs([measured(A, 0.25)], [], margin=0.0, limit=8) == []
    [(better, worse, gap)] = cross_probe_pairs([measured(B, -0.125)], [measured(A, 0.25)], margin=0.125, limit=8)
    assert (better.text, worse.text, gap) == (A, B, 0.375)
    assert cross_probe_pairs([measured(B, 0.25)], [measured(A, 0.25)], margin=0.0, limit=8) == []  # a tie
    assert cross_probe_pairs([measured(A, 0.5)], [measured(A, 0.25)], margin=0.0, limit=8) == []  # one text


class StubModel:
    device = "cpu"

    def requires_grad_(self, flag: bool) -> StubModel:
        return self

    def eval(self) -> StubModel:
        return self

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


def stub_llm_teacher(**settings):
    """An LLM teacher whose model is a stub (a base model: completes ``Principle:``); no weights are loaded."""
    from types import SimpleNamespace

    from socratic_exp.teachers.llm import LLMTeacher

    teacher = LLMTeacher(**settings)
    teacher._teacher = SimpleNamespace(model=StubModel(), tokenizer=None, chat=False, info={})
    return teacher


def test_llm_teacher_meta_learns_at_the_default_budget(monkeypatch, tmp_path):
    """Two probes of one viewpoint each (the testbed's default): the second forms a pair with the first and trains,
    with the algorithm's meta_* settings and a seed of its own per meta-update."""
    import socratic_exp.models.phases

    calls = []
    monkeypatch.setattr(
        socratic_exp.models.phases,
        "dpo_phase",
        lambda model, tok, rows, out, **kw: calls.append((rows, kw)) or {"x": 1.0},
    )
    settings = SocraticRL(meta_margin=0.125, meta_steps=3, meta_batch_size=2, meta_learning_rate=2e-4, meta_beta=0.5)
    dpo = TeacherDPO(stub_llm_teacher(), settings, seed=7)
    first = measured(A, 0.25, question="Q: 2+3*4=?\n")
    assert dpo.update([first]) == {"teacher_meta/pairs": 0.0, "teacher_meta/measured": 1.0}
    assert calls == []
    metrics = dpo.update([measured(B, -0.125, question="Q: 5-1*2=?\n")])
    assert metrics == {"teacher_meta/pairs": 1.0, "teacher_meta/measured": 2.0, "x": 1.0}
    # the better viewpoint's reflection prompt (plain_reflect_template), chosen and rejected as its completions
    [(rows, options)] = calls
    assert rows == [
        {"prompt": "Q: 2+3*4=?\ntrace of do * befo\nPrinciple:", "chosen": " do * before + and -.\n",
         "rejected": " add from left to right.\n"}
    ]  # fmt: skip
    assert options == {"prefix": "teacher_meta", "steps": 3, "batch_size": 2, "learning_rate": 2e-4, "beta": 0.5,
                       "seed": 7_000_022}  # 7 * 1_000_003 + the first meta-update  # fmt: skip

    dpo.save(tmp_path)
    resumed = TeacherDPO(stub_llm_teacher(), settings, seed=7)
    resumed.load(tmp_path)
    assert resumed.measured == dpo.measured and resumed.updates == 1


def test_a_self_guiding_teacher_is_not_meta_learned_before_it_is_decoupled():
    from types import SimpleNamespace

    teacher = stub_llm_teacher()
    teacher._teacher = SimpleNamespace(model=StubModel(), tokenizer=None, chat=False, info={"self_guidance": True})
    with pytest.raises(RuntimeError, match="weights of its own"):
        TeacherDPO(teacher, SocraticRL(), seed=0).update([measured(A, 0.25)])


def test_the_meta_learning_settings_are_the_algorithms():
    from socratic_exp.runtime.assembly import build_components

    c = build_components(compose("algorithm=socratic_rl", "teacher=llm", "algorithm.meta_steps=3"))
    settings = c.algorithm
    assert (settings.meta_steps, settings.meta_learning_rate, settings.meta_beta) == (3, 1e-5, 0.1)
    assert (settings.meta_margin, settings.meta_max_pairs, settings.meta_batch_size) == (0.02, 64, 8)
    assert not any(name.startswith("meta_") for name in vars(c.teacher))  # the teacher carries none of them
    with pytest.raises(ConfigError) as raised:
        build_components(compose("algorithm=socratic_rl", "algorithm.meta_margin=-1"))
    assert str(raised.value).startswith("algorithm.meta_margin=-1.0: must be >= 0.0")


MOVED = (
    "teacher.meta_margin: has moved to algorithm.meta_margin, a setting of algorithm=socratic_rl "
    "(fix: set algorithm.meta_margin=<value> instead)"
)


def test_an_old_teacher_meta_key_says_where_it_lives_now():
    from socratic_exp.runtime.assembly import build_components

    with pytest.raises(ConfigError) as raised:  # in a YAML overlay or with +: the option refuses it
        build_components(compose("algorithm=socratic_rl", "teacher=llm", "+teacher.meta_margin=0.1"))
    assert str(raised.value) == MOVED


def test_the_app_points_an_old_teacher_meta_key_to_the_algorithm(run_app):
    proc, _ = run_app("algorithm=socratic_rl", "teacher=llm", "teacher.meta_margin=0.1", "dry_run=true", timeout=120)
    assert assert_refused(proc) == f"error: {MOVED}"


def test_a_teacher_that_does_not_reflect_is_refused_in_one_line():
    import dataclasses

    from socratic_exp.runtime.assembly import build_components
    from socratic_exp.teachers.base import Teacher

    @dataclasses.dataclass(kw_only=True)
    class GuidesOnly(Teacher):  # a teacher that guides and never reflects
        def _guide(self, requests):
            return ["Hint: check step 1."] * len(requests)

    c = build_components(compose("algorithm=socratic_rl"))
    c = dataclasses.replace(c, teacher=GuidesOnly(), choices={**c.choices, "teacher": "guides_only"})
    with pytest.raises(ConfigError) as raised:
        c.algorithm.check_compatible(c)
    assert str(raised.value) == (
        "teacher='guides_only': does not reflect on traces, which algorithm=socratic_rl asks its teacher to do "
        "(fix: use teacher=rule (task=arithmetic), teacher=llm or teacher=blackbox)"
    )


def test_the_distiller_says_whether_it_distills_and_the_run_asks_it():
    import dataclasses

    from hydra.utils import instantiate

    from socratic_exp.distillers.base import Distiller
    from socratic_exp.runtime.assembly import build_components, check_compatible

    options = ("none", "kl", "dpo", "sft")
    assert [instantiate(compose(f"distiller={o}").distiller).distills for o in options] == [False, True, True, True]

    @dataclasses.dataclass(kw_only=True)
    class Idle(Distiller):  # another option that trains nothing: an algorithm without distillation accepts it
        distills = False

    @dataclasses.dataclass(kw_only=True)
    class Busy(Distiller):
        pass

    c = build_components(compose("algorithm=grpo"))
    check_compatible(dataclasses.replace(c, distiller=Idle()))
    with pytest.raises(ConfigError, match="algorithm=GRPO has no distillation phase"):
        check_compatible(dataclasses.replace(c, distiller=Busy(), choices={**c.choices, "distiller": "busy"}))


# --- reflection criterion -----------------------------------------------------------------------------------------


def test_reflect_on_selects_the_traces_by_hand():
    def trace(question: str, name: str, score: float) -> tuple[str, Attempt]:
        return question, Attempt(name, score, "correct" if score == 1.0 else "wrong")

    batch = [
        trace("Q1", "q1-a", 1.0), trace("Q1", "q1-b", 0.0), trace("Q1", "q1-c", 0.0), trace("Q1", "q1-d", 1.0),
        trace("Q2", "q2-a", 1.0), trace("Q2", "q2-b", 0.5), trace("Q2", "q2-c", 1.0), trace("Q2", "q2-d", 1.0),
        trace("Q3", "q3-a", 0.0), trace("Q3", "q3-b", 0.0), trace("Q3", "q3-c", 0.0), trace("Q3", "q3-d", 0.0),
    ]  # fmt: skip

    def names(criterion: str) -> list[str]:
        return [attempt.completion for _, attempt in select_traces(batch, criterion)]

    # wrong: every score below 1 (q2-b's 0.5 included; Q3's four although the group is uniform)
    assert names("wrong") == ["q1-b", "q1-c", "q2-b", "q3-a", "q3-b", "q3-c", "q3-d"]
    # below the group mean: Q1 mean 0.5 -> q1-b, q1-c; Q2 mean 0.875 -> q2-b; Q3 mean 0 -> none (no advantage)
    assert names("below_group_mean") == ["q1-b", "q1-c", "q2-b"]
    assert names("all") == [f"q{q}-{x}" for q in (1, 2, 3) for x in "abcd"]


# --- knowledge base -------------------------------------------------------------------------------------------------


def kb(tmp_path: Path, budget: int = 2, patience: int = 2) -> KnowledgeBase:
    return KnowledgeBase(budget, 0.8, 0.0, patience, ViewpointLog(tmp_path / "viewpoints.jsonl"))


def add(base: KnowledgeBase, text: str, step: int = 1) -> tuple[Entry, str]:
    return base.add(text, "principle", "Q: 2+3*4=?\n", "2+3=5\n5*4=20\nA: 20\n", step)


def test_near_duplicates_merge_and_distinct_viewpoints_do_not():
    assert similarity("Principle: do * before + and -.", "Heuristic: Do * before + and - !") > 0.9
    assert similarity(PRECEDENCE, BRACKETS) < 0.6


def test_budget_queue_merge_retire_and_distill_rules(tmp_path):
    base = kb(tmp_path)
    first, outcome = add(base, PRECEDENCE)
    assert outcome == "created" and first.status == "active"
    again, outcome = add(base, "principle: Do * before + and - .")
    assert outcome == "merged" and again is first and first.sources == 2 and len(base.entries) == 1
    second, _ = add(base, BRACKETS)
    third, _ = add(base, "Note: recheck every product and sum.")
    assert [e.id for e in base.active] == [0, 1] and third.status == "queued"  # V is full: the third waits

    for step, utilities in ((10, (0.05, 0.0)), (20, (0.04, -0.01))):
        base.record_utility(first, step, utilities[0], 0.6, 0.55)
        base.record_utility(second, step, utilities[1], 0.6, 0.6)
        retired = base.retire_useless(step)
    assert retired == [second] and second.status == "retired"  # two probes in a row at or below 0
    assert third.status == "active"  # the freed place goes to the queue
    _, outcome = add(base, BRACKETS, step=21)
    assert outcome == "known_useless" and second.status == "retired"

    distilled = base.distill_reset(30)
    assert {e.id for e in distilled} == {0, 2} and base.active == []
    back, outcome = add(base, PRECEDENCE, step=31)
    assert outcome == "reactivated" and back is first and first.status == "active"
    assert [h["status"] for h in first.history] == ["queued", "active", "distilled", "queued", "active"]


def test_the_record_holds_every_event_and_the_latest_state(tmp_path):
    base = kb(tmp_path, budget=1, patience=1)
    first, _ = add(base, PRECEDENCE)
    add(base, BRACKETS, step=2)
    base.record_utility(first, 5, -0.02, 0.5, 0.52)
    base.retire_useless(5)
    log = ViewpointLog(tmp_path / "viewpoints.jsonl")
    events = [(r["event"], r["id"], r["step"]) for r in log.records()]
    assert events == [
        ("created", 0, 1), ("activated", 0, 1), ("created", 1, 2),
        ("measured", 0, 5), ("retired", 0, 5), ("activated", 1, 5),
    ]  # fmt: skip
    latest = latest_entries(log.records())
    assert latest[0]["status"] == "retired" and latest[0]["utilities"][0]["utility"] == -0.02
    assert latest[1]["source_trace"] == "2+3=5\n5*4=20\nA: 20\n" and latest[1]["written_at"] == 2

    with log.path.open("a") as handle:  # a crash in the middle of a line
        handle.write('{"event": "measu')
    assert len(list(log.records())) == 6
    assert log.truncate_after(2) == 4 and [r["step"] for r in log.records()] == [1, 1, 2]


def test_state_round_trip(tmp_path):
    base = kb(tmp_path)
    add(base, PRECEDENCE)
    add(base, BRACKETS)
    add(base, "Note: recheck every product and sum.")
    restored = KnowledgeBase(2, 0.8, 0.0, 2)
    restored.load_state_dict(json.loads(json.dumps(base.state_dict())))
    assert [e.text for e in restored.active] == [e.text for e in base.active]
    assert restored.entries[2].status == "queued" and restored.order == base.order


def test_viewpoints_command_prints_the_timeline(tmp_path, capsys):
    base = kb(tmp_path)
    first, _ = add(base, PRECEDENCE)
    base.record_utility(first, 10, 0.03, 0.6, 0.57)
    base.distill_reset(50)
    assert viewpoints_main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "1 viewpoints (1 distilled)" in out and "U=+0.030" in out and "+0.03@10" in out
    assert "compressed into the student's weights" in out and "Q: 2+3*4=?" in out
    assert viewpoints_main([str(tmp_path / "missing")]) == 2
    assert viewpoints_main([str(tmp_path.parent)]) == 2
    assert "no viewpoints.jsonl" in capsys.readouterr().err


# --- teachers -------------------------------------------------------------------------------------------------------


def test_parse_viewpoint_reads_labelled_lines_and_rejects_noise():
    vp = parse_viewpoint("The error is in step 2.\nCausal explanation: the student added before multiplying.", "t")
    assert vp.kind == "causal explanation" and vp.text.startswith("Causal explanation: the student")
    assert parse_viewpoint(" 7", "t") is None and parse_viewpoint("", "t") is None


def test_rule_teacher_meta_learning_reweights_phrasings():
    from socratic_exp.teachers.rule import VIEWPOINTS, RuleTeacher

    teacher = RuleTeacher(min_occurrences=1)
    phrasings = VIEWPOINTS["parentheses"]
    assert teacher.phrasing_weights(phrasings) == [1.0, 1.0, 1.0]
    best = phrasings[2]
    scored = [ScoredViewpoint("Q", Attempt("x", 0.0, "wrong"), t, 0.06 if t == best else -0.03) for t in phrasings]
    stats = teacher.meta_update(scored)
    weights = teacher.phrasing_weights(phrasings)
    assert weights.index(max(weights)) == 2 and max(weights) / sum(weights) > 0.97
    assert stats["teacher_meta/updates"] == 3
    question = "Q: 2*(3+4)=?\n"
    chosen = teacher.reflect([question] * 20, [Attempt("2*3=6\n6+4=10\nA: 10\n", 0.0, "wrong")] * 20)
    assert sum(vp.text == best for vp in chosen) >= 18


def test_blackbox_meta_learning_shows_measured_exemplars():
    from socratic_exp.teachers.blackbox import BlackboxTeacher

    teacher = BlackboxTeacher(model="m", check_server=False, exemplars=1)
    assert teacher.exemplar_block() == ""
    teacher.meta_update(
        [
            ScoredViewpoint("Q", Attempt("x", 0.0, "wrong"), PRECEDENCE, 0.05),
            ScoredViewpoint("Q", Attempt("x", 0.0, "wrong"), BRACKETS, 0.01),
            ScoredViewpoint("Q", Attempt("x", 0.0, "wrong"), "Note: useless.", -0.02),
        ]
    )
    block = teacher.exemplar_block()
    assert f"- {PRECEDENCE}" in block and "- Note: useless." in block and BRACKETS not in block


def test_the_reflection_prompt_is_the_methods_unless_the_teacher_sets_its_own():
    from types import SimpleNamespace

    from socratic_exp.algorithms.socratic_rl.prompts import REFLECTION_TEMPLATE
    from socratic_exp.teachers.llm import LLMTeacher

    trace = Attempt("2+3=5\nA: 5\n", 0.0, "wrong")
    teacher, own = LLMTeacher(), LLMTeacher(reflect_template="Why {student_answer}?")
    teacher._teacher = own._teacher = SimpleNamespace(chat=True)  # attached to an instruct model
    asked = teacher.reflection_prompt("Q: 2+3=?", trace, REFLECTION_TEMPLATE)
    assert asked.startswith("You are a teacher analysing") and "Student's attempt: 2+3=5\nA: 5\n" in asked
    assert "{exemplars}" not in asked
    assert own.reflection_prompt("Q: 2+3=?", trace, REFLECTION_TEMPLATE) == "Why 2+3=5\nA: 5?"
    with pytest.raises(ConfigError, match="reflect_template"):
        teacher.reflection_prompt("Q: 2+3=?", trace)  # neither the method nor the option gives a prompt
    # a reflection as a training example of a chat teacher: the prompt as a user turn, the viewpoint as its reply
    assert own.reflection_example("Q: 2+3=?", trace, PRECEDENCE) == (
        [{"role": "user", "content": "Why 2+3=5\nA: 5?"}],
        [{"role": "assistant", "content": PRECEDENCE}],
    )


# --- on the tiny model ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(cache_dir):
    from socratic_exp.runtime.assembly import build_components

    cfg = compose("algorithm=grpo", "debug=quick_warmstart", "logger=none", f"model.cache_dir={cache_dir}")
    c = build_components(cfg, {"algorithm": "grpo"})
    return c, c.model.load(c.task), c.task.build()


def fresh_student(tiny):
    import dataclasses

    from socratic_exp.models.base import frozen_copy

    student = tiny[1]
    return dataclasses.replace(student, model=frozen_copy(student.model).requires_grad_(True).train())


def distillation_data(tiny, items: int = 32):
    from socratic_exp.distillers.base import DistillationData

    _, _, data = tiny
    rows = data["train"].select(range(items))
    return DistillationData(list(rows["prompt"]), list(rows["answer"]), [PRECEDENCE, BRACKETS])


@pytest.mark.slow  # the tiny student's warm start: about a minute on a shared CPU
def test_the_trainer_hands_generation_the_prompts_with_v_in_front(tiny, tmp_path):
    """What SocraticRLTrainer passes to TRL's generation: each prompt with the active viewpoint on the line before
    it (the testbed's prompts are plain text), and nothing else changed."""
    import dataclasses

    from trl import GRPOConfig

    from socratic_exp.algorithms.socratic_rl.loop import ViewpointLoop
    from socratic_exp.algorithms.socratic_rl.trainer import SocraticRLTrainer
    from socratic_exp.teachers.rule import RuleTeacher

    c, student, data = tiny
    c = dataclasses.replace(c, teacher=RuleTeacher())  # the loop's teacher reflects (the fixture's grpo has none)
    rows = data["train"].select(range(2))
    loop = ViewpointLoop(SocraticRL(), c, student, [], rows, tmp_path, None, 0, prompt_room=None)
    loop.kb.add(PRECEDENCE, "principle", "Q: 2+3*4=?\n", "2+3=5\n5*4=20\nA: 20\n", 1)
    args = GRPOConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=2, max_completion_length=4,
        report_to=[], use_cpu=True, bf16=False, max_steps=1, save_strategy="no", logging_steps=1,
    )  # fmt: skip
    trainer = SocraticRLTrainer(
        model=fresh_student(tiny).model,
        reward_funcs=[c.task.reward_function()],
        args=args,
        train_dataset=rows,
        processing_class=student.tokenizer,
        viewpoint_loop=loop,
    )
    handed = []

    class Stop(Exception):
        pass

    def generate(prompts):
        handed.extend(prompts)
        raise Stop

    trainer._generate = generate
    with pytest.raises(Stop):
        trainer._generate_and_score_completions([dict(row) for row in rows])
    assert handed == [f"Principle: do * before + and -.\n{row['prompt']}" for row in rows]
    assert handed[0].startswith("Principle: do * before + and -.\nQ: ") and rows[0]["prompt"].startswith("Q: ")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("option", "loss"),
    [("kl", ("distill/kl_before", "distill/kl_after")), ("dpo", ("distill/loss_before", "distill/loss_after")),
     ("sft", ("distill/loss_before", "distill/loss_after"))],
)  # fmt: skip
def test_each_distiller_lowers_its_loss_and_changes_the_weights(tiny, tmp_path, option, loss):
    import torch
    from hydra.utils import instantiate

    c, _, _ = tiny
    student = fresh_student(tiny)
    before = {k: v.clone() for k, v in student.model.state_dict().items()}
    settings = {"items": 32, "steps": 6, "learning_rate": 3e-4, "batch_size": 8}
    if option == "dpo":
        settings["require_verified"] = False  # the weak quick student seldom gives verified pairs in 32 tries
    distiller = instantiate(compose(f"distiller={option}").distiller, **settings)
    metrics = distiller.distill(student, c.task, distillation_data(tiny), tmp_path, seed=0)
    assert metrics[loss[1]] < metrics[loss[0]], metrics
    changed = [k for k, v in student.model.state_dict().items() if not torch.equal(v, before[k])]
    assert changed and metrics["distill/steps"] == 6


@pytest.mark.slow
def test_llm_teacher_meta_learning_trains_its_own_copy(tiny):
    import torch

    from socratic_exp.teachers.llm import LLMTeacher

    c, _, _ = tiny
    student = fresh_student(tiny)
    student_weights = {k: v.clone() for k, v in student.model.state_dict().items()}
    teacher = LLMTeacher()
    teacher.attach(c.task, student)
    teacher.decouple_from_student()
    dpo = TeacherDPO(teacher, SocraticRL(meta_steps=6, meta_learning_rate=3e-4, meta_batch_size=4), seed=0)
    question, trace = "Q: 2+3*4=?\n", Attempt("2+3=5\n5*4=20\nA: 20\n", 0.0, "wrong")
    scored = [
        ScoredViewpoint(question, trace, PRECEDENCE, 0.06),
        ScoredViewpoint(question, trace, "Principle: check each step before the next.", 0.0),
        ScoredViewpoint(question, trace, "Principle: add first.", -0.04),
    ]
    pairs = dpo.preference_pairs(scored)
    assert len(pairs) == 3 and pairs[0]["chosen"] == " do * before + and -.\n"
    assert pairs[0]["prompt"].endswith("A: 20\nPrinciple:")
    metrics = dpo.update(scored)
    assert metrics["teacher_meta/loss_after"] < metrics["teacher_meta/loss_before"]
    assert all(torch.equal(v, student_weights[k]) for k, v in student.model.state_dict().items())
    assert metrics["teacher_meta/pairs"] == 3.0 and metrics["teacher_meta/measured"] == 3.0


# --- end to end -----------------------------------------------------------------------------------------------------

QUICK = (
    "algorithm=socratic_rl", "debug=fast", "debug=quick_warmstart", "logger=none", "algorithm.max_steps=2",
    "algorithm.probe_every=1", "algorithm.probe_items=8", "algorithm.distill_every=2", "eval.every_steps=0",
    "eval.max_samples=4", "eval.pass_k=0", "algorithm.save_steps=2",
)  # fmt: skip
SMALL_DISTILLER = ("distiller.items=8", "distiller.steps=1", "distiller.batch_size=4")
# every pair of values of the three settings in 10 runs (the whole product takes 16): each distiller with both
# teachers and both meta-learning settings, and the four teacher x meta-learning cells with distiller=none
PAIRWISE = (
    (*SMALL_DISTILLER, "distiller=kl,dpo,sft", "teacher=rule", "algorithm.meta_learning=true"),
    (*SMALL_DISTILLER, "distiller=kl,dpo,sft", "teacher=llm", "algorithm.meta_learning=false"),
    ("distiller=none", "teacher=rule,llm", "algorithm.meta_learning=true,false"),
)


@pytest.mark.slow
def test_every_pair_of_distiller_teacher_and_meta_learning_settings_runs(run_in_process):
    for overrides in PAIRWISE:
        proc, outputs = run_in_process("-m", "hydra/launcher=basic", *QUICK, *overrides)
        assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = sorted(path.parent for path in outputs.glob("multirun/*/*/*/summary.json"))
    assert len(jobs) == 10
    seen = set()
    for job in jobs:
        summary = read_summary(job)
        assert summary["status"] == "completed" and summary["steps"] == 2, summary.get("error")
        choices, config = summary["choices"], summary["config"]
        seen.add((choices["distiller"], choices["teacher"], config["algorithm"]["meta_learning"]))
        metrics = read_metrics(job)
        assert any("socratic_rl/reflections" in m for m in metrics)
        distilled = any("distill/count" in m or "distill/skipped" in m for m in metrics)
        assert distilled == (choices["distiller"] != "none")
    pairs = {pair for cell in seen for pair in itertools.combinations(enumerate(cell), 2)}
    assert len(seen) == 10 and len(pairs) == 4 * 2 + 4 * 2 + 2 * 2  # distiller x teacher, x meta, teacher x meta


@pytest.mark.slow
def test_knowledge_base_survives_kill_and_resume(tmp_path, cache_dir):
    env = {
        **os.environ,
        "SOCRATIC_EXP_OUTPUTS": str(tmp_path / "outputs"),
        "SOCRATIC_EXP_CACHE": str(cache_dir),
        "WANDB_MODE": "offline",
    }
    overrides = [
        *QUICK,
        *SMALL_DISTILLER,
        "algorithm.max_steps=8",
        "algorithm.save_steps=2",
        "algorithm.distill_every=3",
    ]
    command = [sys.executable, "-m", "socratic_exp", *overrides]
    first = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and not list(
        (tmp_path / "outputs").glob("*/*/checkpoints/checkpoint-4/socratic_rl_state.json")
    ):
        time.sleep(0.2)
    first.send_signal(signal.SIGKILL)
    first.wait()
    [run_dir] = run_dirs(tmp_path / "outputs")
    assert read_summary(run_dir)["status"] == "running"  # killed: never marked complete
    before_resume = (run_dir / "viewpoints.jsonl").read_text().splitlines()

    resumed = subprocess.run([*command, "resume=auto"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert read_summary(run_dir)["status"] == "completed"
    lines = (run_dir / "viewpoints.jsonl").read_text().splitlines()
    records = read_jsonl(run_dir / "viewpoints.jsonl")
    checkpoint = max(int(p.name.split("-")[1]) for p in (run_dir / "checkpoints").glob("checkpoint-*"))
    assert checkpoint == 8
    # nothing lost: the lines up to the step resumed from are kept verbatim; nothing duplicated: each viewpoint is
    # created once, and the steps never go back
    resumed_from = max(r["step"] for r in records if r["step"] <= 4)
    kept = [line for line in before_resume if json.loads(line)["step"] <= resumed_from]
    assert lines[: len(kept)] == kept
    created = [r["id"] for r in records if r["event"] == "created"]
    assert created == sorted(set(created)) == list(range(len(created)))
    steps = [r["step"] for r in records]
    assert steps == sorted(steps) and steps[-1] <= 8
