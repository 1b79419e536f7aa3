"""The documentation pages (docs/*.md) speak to users about the software as it is; the research record is
docs/history.md, the one history page.

(a) No issue numbers ("issue 36", "issues #12") and no testbed version labels ("v4", "testbed v5", "v5's students",
    "design step 10") on any page but docs/history.md, and no record of a working session ("this session",
    "yesterday", "today's lines", "the issue's report"), code blocks included. An issue number is "issue(s)",
    "PR" or "pull request" before a number (a bare ``#3`` is a sweep's job number on the console, not an issue). A
    label is a bare ``v`` and a number standing alone: not touching a letter, a digit, ``_``, ``-``, ``.`` or ``/``
    on either side. So a result file's name such as ``premises_v4.json`` or ``evidence_v4_one_student/`` (cited
    as a path in the results index, docs/research.md) is not a label and needs no exemption for text in
    backticks; nor does an API path (``http://127.0.0.1:8001/v1``); and a dotted version of another tool
    ("transformers v4.2") is that tool's version, not a testbed label, so it passes too.
    The regexes are checked on literal examples below.
(b) Every default figure a page quotes (steps, evaluation interval and size, batch, generations, learning rate,
    token caps of the default run and of the presets) is the composed config's: FIGURES is a hand-written table of
    (page, anchor, phrase, overrides, key, expected); the phrase must stand in the same paragraph or table row as
    the anchor, and the config composed with the overrides must give the expected value at the key (a dotted key,
    or a small expression over the config's sections, e.g. the completions of a step, batch x accumulation).
(c) Images are stored once: the PNGs the pages show live under research/results/, and docs/research/results/
    holds relative symbolic links to them (mkdocs needs the files inside docs/); no binary file under docs/ is a
    second real copy of a result file.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from conftest import ROOT

DOCS = ROOT / "docs"
RESULTS = ROOT / "research" / "results"
HISTORY = DOCS / "history.md"
PAGES = sorted(p for p in DOCS.glob("*.md") if p != HISTORY)

# --- (a) no issue numbers, no version labels, no session record ----------------------------------------------------
ISSUE = re.compile(r"\b(?:issues?|PR|pull request)\s+#?\d+", re.IGNORECASE)
LABEL = re.compile(r"(?<![\w./-])v[1-9]\d*(?![\w.-])|\bdesign steps?\s+\d+|\btestbed\s+v\d", re.IGNORECASE)
SESSION = re.compile(r"\bthis session\b|\byesterday\b|\btoday\b|\bthe issue\b", re.IGNORECASE)


def offences(text: str) -> list[str]:
    """Each issue number, version label or session record in ``text``, with its line number."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for pattern in (ISSUE, LABEL, SESSION):
            found += [f"{number}: {m.group(0)!r} in {line.strip()[:100]!r}" for m in pattern.finditer(line)]
    return found


@pytest.mark.parametrize(
    "text",
    ["see issue 36", "Issue #12 says", "issues 3 and 4", "fixed in PR #41", "on testbed v4", "v5's students",
     "(v1)", "the v2 scoreboard", "design step 10", "design steps 6 to 8", "v12 of the corpus",
     "as this session measured", "today's lines", "the issue's report"],
)  # fmt: skip
def test_the_checks_catch_issue_numbers_labels_and_session_records(text):
    assert offences(text), text


@pytest.mark.parametrize(
    "text",
    ["`results/premises_v4.json`", "`results/evidence_v4_one_student/`", "`evidence_v4/scoreboard.png`",
     "`http://127.0.0.1:8001/v1`", "https://api.openai.com/v1", "transformers v4.2", "rev1", "kv1 cache",
     "`uv1-2`", "the step-1 evaluation", "Step 10 of 30", "a design that steps 10 ways", "color #fff",
     "a job line `#3 : seed=1`"],
)  # fmt: skip
def test_the_checks_pass_paths_urls_versions_and_code(text):
    assert offences(text) == [], text


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_no_issue_numbers_version_labels_or_session_records_outside_the_history_page(page):
    found = offences(page.read_text())
    assert not found, f"{page.name}: history belongs on docs/history.md:\n  " + "\n  ".join(found)


def test_the_history_page_is_linked_from_the_evidence_page():
    assert HISTORY.is_file()
    assert re.search(r"\]\(history\.md(#[\w-]+)?\)", (DOCS / "evidence.md").read_text())


# --- (b) the default figures the pages quote are the composed config's ----------------------------------------------
class Figure(NamedTuple):
    page: str  # a page under docs/
    anchor: str  # text of the paragraph or table row the figure stands in
    phrase: str  # the figure as the page writes it (whitespace collapsed)
    overrides: tuple[str, ...]  # what the page's command composes
    key: str  # a dotted config key, or an expression over the config's sections
    expected: Any


def figures(page: str, anchor: str, overrides: tuple[str, ...], *rows: tuple[str, str, Any]) -> list[Figure]:
    return [Figure(page, anchor, phrase, overrides, key, expected) for phrase, key, expected in rows]


STEP = "algorithm.batch_size * algorithm.gradient_accumulation_steps"
GENERATED = "algorithm.batch_size * algorithm.steps_per_generation * 8"  # a generation batch, across 8 GPUs
REFILL = "algorithm.steps_per_generation // algorithm.gradient_accumulation_steps"  # optimizer steps per generation
DAPO, SPARSE = (
    ("experiment=entropy_masked_dapo_qwen3",),
    ("+sweep=evidence_sparse", "+evidence_arm=socraticpo"),
)  # completions per optimizer step, per device
EVALUATIONS = "len({0, algorithm.max_steps, *range(0, algorithm.max_steps, eval.every_steps)})"  # and at the end
QUESTIONS = "eval.max_samples or task.eval_size"  # null: the whole eval split
DEFAULT: tuple[str, ...] = ()
SMOL, SMOL_MATH = ("experiment=smollm2_cpu",), ("experiment=smollm2_cpu_math",)

FIGURES = [
    # Getting started: the default run, and the table of how long a run takes
    *figures("index.md", "the first run needs no warm-start", DEFAULT,
             ("30 SocraticPO steps of 64 rollouts", "algorithm.max_steps", 30),
             ("30 SocraticPO steps of 64 rollouts", "algorithm.batch_size", 64),
             ("30 SocraticPO steps", "algorithm._target_.rsplit('.', 1)[-1]", "SocraticPO")),
    *figures("index.md", "| default (tiny model, SocraticPO) |", DEFAULT,
             ("200 questions: greedy, 4 samples, assisted", "eval.max_samples", 200),
             ("200 questions: greedy, 4 samples, assisted", "eval.pass_k", 4),
             ("64 completions of up to 48 tokens, up to 3 attempts", STEP, 64),
             ("64 completions of up to 48 tokens, up to 3 attempts", "algorithm.max_completion_length", 48),
             ("64 completions of up to 48 tokens, up to 3 attempts", "algorithm.max_attempts", 3),
             ("30 steps, 3 evaluations (before training, at step 20, at the end)", "algorithm.max_steps", 30),
             ("30 steps, 3 evaluations (before training, at step 20, at the end)", "eval.every_steps", 20),
             ("30 steps, 3 evaluations", EVALUATIONS, 3)),
    *figures("index.md", "| `experiment=smollm2_cpu` (SocraticPO) |", SMOL,
             ("100 questions of up to 128 tokens, greedy", "eval.max_samples", 100),
             ("100 questions of up to 128 tokens, greedy", "eval.max_new_tokens", 128),
             ("100 questions of up to 128 tokens, greedy", "eval.pass_k", 0),
             ("8 completions, up to 3 attempts of 128 tokens", STEP, 8),
             ("8 completions, up to 3 attempts of 128 tokens", "algorithm.max_attempts", 3),
             ("8 completions, up to 3 attempts of 128 tokens", "algorithm.max_completion_length", 128),
             ("30 steps, 3 evaluations", "algorithm.max_steps", 30),
             ("30 steps, 3 evaluations", EVALUATIONS, 3)),
    *figures("index.md", "| `experiment=smollm2_cpu_math` (SocraticPO) |", SMOL_MATH,
             ("43 s before training (32 questions, greedy)", "eval.max_samples", 32),
             ("43 s before training (32 questions, greedy)", "eval.assisted_before_training", False),
             ("4 completions, up to 3 attempts of 256 tokens", STEP, 4),
             ("4 completions, up to 3 attempts of 256 tokens", "algorithm.max_completion_length", 256),
             ("100 steps; the 5 evaluations", "algorithm.max_steps", 100),
             ("100 steps; the 5 evaluations", EVALUATIONS, 5)),
    *figures("index.md", "| `experiment=smollm2_cpu_math algorithm=grpo` |", (*SMOL_MATH, "algorithm=grpo"),
             ("32 questions, greedy; no teacher", "eval.max_samples", 32),
             ("4 completions, one attempt", STEP, 4)),
    # Paper reproductions: the work of each overlay's step and evaluation
    *figures("reproductions.md", "| `experiment=arithmetic_long` |", ("experiment=arithmetic_long",),
             ("tiny, arithmetic, 1200 steps", "algorithm.max_steps", 1200),
             ("40x the default run's 30 steps", "algorithm.max_steps / 30", 40),
             ("64 completions of up to 48 tokens (3 attempts)", STEP, 64),
             ("64 completions of up to 48 tokens (3 attempts)", "algorithm.max_completion_length", 48),
             ("64 completions of up to 48 tokens (3 attempts)", "algorithm.max_attempts", 3),
             ("every 200 steps, 400 questions", "eval.every_steps", 200),
             ("every 200 steps, 400 questions", QUESTIONS, 400),
             ("greedy, 4 samples and assisted, up to 64", "eval.pass_k", 4),
             ("greedy, 4 samples and assisted, up to 64", "eval.max_new_tokens", 64)),
    *figures("reproductions.md", "| `experiment=arithmetic_long` |", DEFAULT,
             ("40x the default run's 30 steps", "algorithm.max_steps", 30)),
    *figures("reproductions.md", "| `experiment=qwen3_arithmetic` |", ("experiment=qwen3_arithmetic",),
             ("64 completions of up to 256 tokens (3 attempts)", STEP, 64),
             ("64 completions of up to 256 tokens (3 attempts)", "algorithm.max_completion_length", 256),
             ("64 completions of up to 256 tokens (3 attempts)", "algorithm.max_attempts", 3),
             ("every 20 steps, 200 questions", "eval.every_steps", 20),
             ("every 20 steps, 200 questions", QUESTIONS, 200),
             ("greedy, 4 samples and assisted, up to 256", "eval.pass_k", 4),
             ("greedy, 4 samples and assisted, up to 256", "eval.max_new_tokens", 256)),
    *figures("reproductions.md", "| `experiment=smollm2_cpu_flexible` |", ("experiment=smollm2_cpu_flexible",),
             ("read flexibly with a format reward, 15 steps", "algorithm.max_steps", 15),
             ("read flexibly with a format reward", "task.answer_parser", "flexible"),
             ("8 completions of up to 128 tokens", STEP, 8),
             ("every 8 steps, 100 questions", "eval.every_steps", 8),
             ("every 8 steps, 100 questions", QUESTIONS, 100)),
    *figures("reproductions.md", "| `experiment=smollm2_cpu` |", SMOL,
             ("SmolLM2-135M-Instruct, arithmetic, 30 steps", "algorithm.max_steps", 30),
             ("8 completions of up to 128 tokens", STEP, 8),
             ("8 completions of up to 128 tokens", "algorithm.max_completion_length", 128),
             ("every 15 steps, 100 questions", "eval.every_steps", 15),
             ("every 15 steps, 100 questions", QUESTIONS, 100),
             ("greedy (+ assisted after training starts), up to 128", "eval.assisted_before_training", False),
             ("greedy (+ assisted after training starts), up to 128", "eval.max_new_tokens", 128)),
    *figures("reproductions.md", "| `experiment=smollm2_cpu_math` |", SMOL_MATH,
             ("4 completions of up to 256 tokens", STEP, 4),
             ("4 completions of up to 256 tokens", "algorithm.max_completion_length", 256),
             ("32 questions, greedy (+ assisted after training starts), up to 256", QUESTIONS, 32),
             ("32 questions, greedy (+ assisted after training starts), up to 256", "eval.max_new_tokens", 256),
             ("32 questions, greedy (+ assisted after training starts)", "eval.assisted_before_training", False)),
    *figures("reproductions.md", "| `experiment=entropy_masked_dapo_qwen3` |", DAPO,
             ("64 completions of up to 20,480 tokens a step", STEP, 64),
             ("64 completions of up to 20,480 tokens a step", "algorithm.max_completion_length", 20480),
             ("generated 8,192 at a time (across the 8)", GENERATED, 8192),
             ("(across the 8) every 16 steps", REFILL, 16),
             ("every 80 steps, 200 problems", "eval.every_steps", 80),
             ("every 80 steps, 200 problems", QUESTIONS, 200),
             ("greedy and 16 samples, up to 20,480", "eval.pass_k", 16),
             ("greedy and 16 samples, up to 20,480", "eval.max_new_tokens", 20480)),
    *figures("reproductions.md", "| `experiment=socraticpo_sciknoweval` |", ("experiment=socraticpo_sciknoweval",),
             ("128 rollouts of up to 3 attempts of up to 1,024 tokens", STEP, 128),
             ("128 rollouts of up to 3 attempts of up to 1,024 tokens", "algorithm.max_attempts", 3),
             ("128 rollouts of up to 3 attempts of up to 1,024 tokens", "algorithm.max_completion_length", 1024),
             ("every 50 steps, the held-out split", "eval.every_steps", 50),
             ("every 50 steps, the held-out split", "eval.max_samples", None),
             ("greedy and assisted, up to 1,024", "eval.max_new_tokens", 1024)),
    *figures("reproductions.md", "| `experiment=goldilocks_openmath` |", ("experiment=goldilocks_openmath",),
             ("128 completions of up to 2,048 tokens", STEP, 128),
             ("128 completions of up to 2,048 tokens", "algorithm.max_completion_length", 2048),
             ("every 50 steps, 500 held-out problems", "eval.every_steps", 50),
             ("every 50 steps, 500 held-out problems", "task.holdout_size", 500),
             ("every 50 steps, 500 held-out problems", "eval.max_samples", None),
             ("greedy, up to 2,048", "eval.max_new_tokens", 2048)),
    *figures("reproductions.md", "| `experiment=sdpo_sciknoweval` |", ("experiment=sdpo_sciknoweval",),
             ("32 completions of up to 2,048 tokens", STEP, 32),
             ("32 completions of up to 2,048 tokens", "algorithm.max_completion_length", 2048),
             ("every 25 steps, the held-out split", "eval.every_steps", 25),
             ("every 25 steps, the held-out split", "eval.max_samples", None),
             ("greedy, up to 2,048", "eval.max_new_tokens", 2048)),
    *figures("reproductions.md", "| `experiment=vpd_sciknoweval` |", ("experiment=vpd_sciknoweval",),
             ("as SDPO's", STEP, 32),
             ("as SDPO's", "algorithm.max_completion_length", 2048),
             ("as SDPO's", "eval.every_steps", 25)),
    *figures("reproductions.md", "| `experiment=socratic_rl_gsm8k` |", ("experiment=socratic_rl_gsm8k",),
             ("128 completions of up to 1,024 tokens", STEP, 128),
             ("128 completions of up to 1,024 tokens", "algorithm.max_completion_length", 1024),
             ("every 100 steps, GSM8K's test set", "eval.every_steps", 100),
             ("greedy and assisted (2 attempts), up to 1,024", "eval.assisted_attempts", 2),
             ("greedy and assisted (2 attempts), up to 1,024", "eval.max_new_tokens", 1024)),
    # SocraticPO: the default run and its settings
    *figures("socraticpo.md", "The default run (`python -m socratic_exp`:", DEFAULT,
             ("30 steps of 64 rollouts", "algorithm.max_steps", 30),
             ("30 steps of 64 rollouts", STEP, 64),
             ("K=3", "algorithm.max_attempts", 3),
             ("the rule teacher", "teacher._target_.rsplit('.', 1)[-1]", "RuleTeacher"),
             ("KL coefficient 0.01", "make(algorithm).reward_kl_coef", 0.01),
             ("200 questions before training, every 20 steps", "eval.max_samples", 200),
             ("200 questions before training, every 20 steps", "eval.every_steps", 20)),
    *figures("socraticpo.md", "beta (`algorithm.kl_coef`) defaults to 0.01", DEFAULT,
             ("defaults to 0.01", "make(algorithm).reward_kl_coef", 0.01)),
    *figures("socraticpo.md", "| B prompts, one rollout each (Algorithm 1) |", DEFAULT,
             ("`num_generations` (8) rollouts per prompt", "algorithm.num_generations", 8)),
    # The embedded testbed
    *figures("testbed.md", "`task=arithmetic` generates expressions", DEFAULT,
             ("over 1-9", "task.max_operand", 9),
             ("1-3 operations (the difficulty, `task.max_ops`)", "(task.min_ops, task.max_ops)", (1, 3)),
             ("within +-30 (`task.max_value`)", "task.max_value", 30),
             ("half of them with an order of operations", "task.order_sensitive_share", 0.5)),
    *figures("testbed.md", "`model=tiny` is a Qwen2 decoder", DEFAULT,
             ("128 wide, 4 layers", "model.hidden_size", 128),
             ("128 wide, 4 layers", "model.num_layers", 4),
             ("1,100 steps of 64 traces", "model.warmstart_steps", 1100),
             ("1,100 steps of 64 traces", "model.warmstart_batch_size", 64)),
    *figures("testbed.md", "**Misconceptions to correct.**", DEFAULT,
             ("half of the plain traces ignore operator precedence", "task.misconception_rates.precedence", 0.5),
             ("or parentheses, and 3% contain an arithmetic slip", "task.misconception_rates.parentheses", 0.5),
             ("3% contain an arithmetic slip", "task.slip_rate", 0.03)),
    *figures("testbed.md", "**Contexts to act on**", DEFAULT,
             ("a corrected attempt (25%", "task.context_shares.retry", 0.25),
             ("(10%, Socratic-RL's viewpoints)", "task.context_shares.principle", 0.1),
             ("a teacher's critique of an earlier attempt (10%)", "task.context_shares.critique", 0.1),
             ("`... 11 is correct.`, 10%)", "task.context_shares.verdict", 0.1),
             ("(`Note: a correct solution is ...`, 10%)", "task.context_shares.solution", 0.1),
             ("a fresh draw of the student (5%)", "task.context_shares.fixed_retry", 0.05)),
    *figures("testbed.md", "The traces are packed several to a row", DEFAULT,
             ("a row of 256 characters", "model.max_length", 256)),
    *figures("testbed.md", "The same students on harder questions", ("task=arithmetic_sparse",),
             ("`task.rl_ops=[3, 4]`", "list(task.rl_ops)", [3, 4])),
    *figures("testbed.md", "One premise does not hold on the default student", DEFAULT,
             ("the default student (1,100 warm-start steps)", "model.warmstart_steps", 1100)),
    *figures("testbed.md", "**The default run** (`python -m socratic_exp`)", DEFAULT,
             ("with SocraticPO for 30 steps of 64 rollouts", "algorithm.max_steps", 30),
             ("with SocraticPO for 30 steps of 64 rollouts", STEP, 64),
             ("(8 prompts x 8, up to 3 attempts each", "algorithm.num_generations", 8),
             ("(8 prompts x 8, up to 3 attempts each", "algorithm.batch_size // algorithm.num_generations", 8),
             ("(8 prompts x 8, up to 3 attempts each", "algorithm.max_attempts", 3),
             ("at a constant learning rate of 1e-4", "algorithm.learning_rate", 1e-4),
             ("at a constant learning rate of 1e-4", "algorithm.lr_scheduler_type", "constant"),
             ("evaluates 200 held-out questions before training, every 20 steps", "eval.max_samples", 200),
             ("evaluates 200 held-out questions before training, every 20 steps", "eval.every_steps", 20),
             ("4 samples for pass@4", "eval.pass_k", 4)),
    *[
        Figure("testbed.md", "The RL learning rate of every method on the tiny model is 1e-4",
               "The RL learning rate of every method on the tiny model is 1e-4", (f"algorithm={name}",),
               "algorithm.learning_rate", 1e-4)
        for name in ("grpo", "socraticpo", "reinforce_pp", "entropy_masked", "socratic_rl", "sdpo", "vpd")
    ],
    # Real models on CPU
    *figures("real-models.md", "`experiment=smollm2_cpu` trains SmolLM2", SMOL,
             ("8 completions of up to 128 tokens per step (2 prompts x 4)", STEP, 8),
             ("8 completions of up to 128 tokens per step (2 prompts x 4)", "algorithm.num_generations", 4),
             ("8 completions of up to 128 tokens per step", "algorithm.max_completion_length", 128),
             ("a learning rate of 1e-5", "algorithm.learning_rate", 1e-5),
             ("1e-5, 30 steps", "algorithm.max_steps", 30),
             ("100 held-out questions before training, at step 15 and at the end", "eval.max_samples", 100),
             ("100 held-out questions before training, at step 15 and at the end", "eval.every_steps", 15)),
    *[
        figure
        for key, phrase, default, smol in [
            ("algorithm.max_completion_length", "| 48 | 256 |", 48, 256),
            ("eval.max_new_tokens", "| 64 | 256 |", 64, 256),
            ("algorithm.batch_size", "| 64 | 4 |", 64, 4),
            ("eval.max_samples", "| 200 | 32 |", 200, 32),
            ("eval.assisted_before_training", "| true | false |", True, False),
            ("eval.batch_size", "| 200 | 32 |", 200, 32),
            ("algorithm.learning_rate", "| 1e-4 | 2e-6 |", 1e-4, 2e-6),
            ("eval.pass_k", "| 4 | 0 |", 4, 0),
        ]
        for figure in (Figure("real-models.md", f"| `{key}` |", phrase, DEFAULT, key, default),
                       Figure("real-models.md", f"| `{key}` |", phrase, SMOL_MATH, key, smol))
    ],
    *figures("real-models.md", "| the evaluation before training |", SMOL_MATH,
             ("43 s: 32 questions of up to 256 tokens, greedy", "eval.max_samples", 32),
             ("43 s: 32 questions of up to 256 tokens, greedy", "eval.max_new_tokens", 256)),
    *figures("real-models.md", "| a training step |", SMOL_MATH,
             ("90-122 s (4 completions)", STEP, 4)),
    *figures("real-models.md", "| the whole run (100 steps, 5 evaluations) |", SMOL_MATH,
             ("the whole run (100 steps, 5 evaluations)", "algorithm.max_steps", 100),
             ("the whole run (100 steps, 5 evaluations)", EVALUATIONS, 5)),
    # Teachers, the methods' pages and Evidence
    *figures("teachers.md", "teacher also gives the assisted evaluation", ("algorithm=grpo", "teacher=rule"),
             ("(`eval.assisted_attempts`: 2 attempts in all", "eval.assisted_attempts", 2)),
    *figures("teachers.md", "teacher also gives the assisted evaluation", DEFAULT,
             ("with `algorithm=socraticpo` its `algorithm.max_attempts`, 3)", "eval.assisted_attempts", 3)),
    *figures("socratic-rl.md", "python -m socratic_exp algorithm=socratic_rl ", ("algorithm=socratic_rl",),
             ("rule teacher, KL distillation every 50 steps", "algorithm.distill_every", 50),
             ("rule teacher, KL distillation every 50 steps", "distiller._target_.rsplit('.', 1)[-1]", "KLDistiller"),
             ("rule teacher, KL distillation every 50 steps", "teacher._target_.rsplit('.', 1)[-1]", "RuleTeacher")),
    *figures("socratic-rl.md", "The default budget is 1 on the testbed", ("algorithm=socratic_rl",),
             ("The default budget is 1 on the testbed", "algorithm.viewpoint_budget", 1)),
    *figures("entropy-masking.md", "`algorithm.rho` (default 0.2)", ("algorithm=entropy_masked",),
             ("`algorithm.rho` (default 0.2)", "algorithm.rho", 0.2)),
    *figures("entropy-masking.md", "**Step time** (`step-time`", ("algorithm=entropy_masked",),
             ("default batch of 64 completions", STEP, 64)),
    *figures("dynamic-sampling.md", "the shipped default student, 64 completions per step", ("algorithm=grpo",),
             ("64 completions per step, 8 per prompt", STEP, 64),
             ("64 completions per step, 8 per prompt", "algorithm.num_generations", 8)),
    *figures("goldilocks.md", "**Overhead** (`overhead`", ("algorithm=grpo", "sampler=goldilocks"),
             ("8 prompts per batch from 4 candidates each, 4000 questions",
              "algorithm.batch_size // algorithm.num_generations", 8),
             ("8 prompts per batch from 4 candidates each, 4000 questions", "sampler.candidates", 4),
             ("8 prompts per batch from 4 candidates each, 4000 questions", "task.train_size", 4000)),
    *figures("sdpo-vpd.md", "100 steps of 4 prompts x 8 rollouts", ("algorithm=sdpo",),
             ("not the default 400 x 64", "algorithm.max_steps", 400),
             ("not the default 400 x 64", STEP, 64)),
    *figures("sdpo-vpd.md", "**Step time** (`benchmarks/vpd.py step-time", ("algorithm=vpd",),
             ("the default batch of 64 rollouts, 8 prompts x 8", STEP, 64),
             ("the default batch of 64 rollouts, 8 prompts x 8", "algorithm.num_generations", 8)),
    *figures("evidence.md", "trains every arm on the same budget", ("+sweep=evidence", "+evidence_arm=socraticpo"),
             ("60 optimizer steps of 64 rollouts (8 prompts x 8)", "algorithm.max_steps", 60),
             ("60 optimizer steps of 64 rollouts (8 prompts x 8)", STEP, 64),
             ("60 optimizer steps of 64 rollouts (8 prompts x 8)", "algorithm.num_generations", 8),
             ("constant learning rate 1e-4", "algorithm.learning_rate", 1e-4),
             ("constant learning rate 1e-4", "algorithm.lr_scheduler_type", "constant"),
             ("held-out greedy accuracy every 20 steps", "eval.every_steps", 20),
             ("held-out greedy accuracy every 20 steps", "eval.pass_k", 0)),
    *figures("evidence.md", "trains every arm on the same budget", ("+sweep=evidence", "+evidence_arm=grpo"),
             ("only the GRPO arm runs 240 steps", "algorithm.max_steps", 240)),
    *figures("evidence.md", "What it says (the students start at 0.694 greedy on the 400 questions",
             ("+sweep=evidence", "+evidence_arm=grpo"),
             ("on the 400 questions", "eval.max_samples", 400)),
    *figures("evidence.md", "**Budget and rules, both regimes**", SPARSE,
             ("60 optimizer steps of 64 rollouts", "algorithm.max_steps", 60),
             ("GRPO 240 steps for its equal-time point", "evidence.grpo_max_steps", 240),
             ("held-out greedy accuracy every 20 steps", "eval.every_steps", 20)),
]  # fmt: skip


def units(text: str) -> list[str]:
    """The page's paragraphs, each table row on its own, whitespace collapsed."""
    found = []
    for block in re.split(r"\n\s*\n", text):
        lines = block.splitlines()
        rows = [line for line in lines if line.lstrip().startswith("|")]
        found += rows if rows and len(rows) == len(lines) else [block]
    return [" ".join(unit.split()) for unit in found]


@functools.cache
def composed(overrides: tuple[str, ...]):
    """The config the app composes for ``overrides``."""
    from socratic_exp.core.config import compose

    return compose(*overrides)


def value(overrides: tuple[str, ...], key: str) -> Any:
    """``key`` of the composed config: a dotted key, or an expression over its sections (``make(node)`` builds a
    settings dataclass from its node, for a value the dataclass derives)."""
    cfg = composed(overrides)
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    names = {name: cfg[name] for name in cfg}
    names["make"] = lambda node: instantiate(node, _convert_="all")
    names.update(len=len, list=list, range=range, tuple=tuple)
    result = eval(key, {"__builtins__": {}}, names)  # a hand-written expression of this file
    return OmegaConf.to_container(result) if OmegaConf.is_config(result) else result


def test_the_figures_table_catches_a_figure_that_is_not_the_configs():
    assert value(DEFAULT, "algorithm.max_steps") == 30 != 150
    assert value(("experiment=arithmetic_long",), "algorithm.max_steps / 30") == 40 != 8
    assert value(DEFAULT, STEP) == 64 and value(("experiment=qwen3_arithmetic",), STEP) == 16 * 4
    assert value(("experiment=arithmetic_long",), QUESTIONS) == 400
    assert "at step 15 and at the end" in units("before training, at step 15 and\n  at the end")[0]
    assert units("a\n\n| x | 1 |\n| y | 2 |\n\nb") == ["a", "| x | 1 |", "| y | 2 |", "b"]


@pytest.mark.parametrize("figure", FIGURES, ids=[f"{f.page}:{f.phrase[:40]}:{f.key}" for f in FIGURES])
def test_every_default_figure_a_page_quotes_is_the_composed_configs(figure: Figure):
    text = (DOCS / figure.page).read_text()
    anchor, phrase = " ".join(figure.anchor.split()), " ".join(figure.phrase.split())
    where = [unit for unit in units(text) if anchor in unit]
    assert where, f"{figure.page}: no paragraph or table row holds {anchor!r}"
    assert any(phrase in unit for unit in where), f"{figure.page}: {phrase!r} is not next to {anchor!r}"
    got = value(figure.overrides, figure.key)
    assert got == figure.expected, (
        f"{figure.page} says {phrase!r}, but {' '.join(figure.overrides) or 'the default config'} composes "
        f"{figure.key} = {got!r}"
    )


def test_the_figures_table_covers_the_pages_that_quote_defaults():
    covered = {figure.page for figure in FIGURES}
    assert {"index.md", "socraticpo.md", "reproductions.md", "real-models.md", "testbed.md", "evidence.md"} <= covered


# --- (c) images stored once ------------------------------------------------------------------------------------------
BINARY = (".png", ".jpg", ".jpeg", ".gif", ".svg", ".pdf", ".webp")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_docs_results_hold_relative_links_into_benchmarks_results_only():
    folder = DOCS / "research" / "results"
    entries = [p for p in folder.rglob("*") if p.is_symlink() or p.is_file()]
    assert entries, "the pages' result images are linked under docs/research/results/"
    for path in entries:
        name = path.relative_to(ROOT)
        assert path.is_symlink(), f"{name} is a copy: replace it by a relative link into research/results/"
        target = os.readlink(path)
        assert not os.path.isabs(target), f"{name} -> {target}: an absolute link breaks in another checkout"
        resolved = path.resolve()
        assert resolved.is_file(), f"{name} -> {target}: nothing there"
        assert resolved.is_relative_to(RESULTS.resolve()), f"{name} -> {target}: not a result file"
        assert resolved.relative_to(RESULTS.resolve()) == path.relative_to(folder), f"{name} -> {target}: another name"


def test_no_binary_file_is_stored_twice():
    results = {digest(p): p for p in RESULTS.rglob("*") if p.is_file() and not p.is_symlink()}
    copies = [
        f"{p.relative_to(ROOT)} = {results[digest(p)].relative_to(ROOT)}"
        for p in DOCS.rglob("*")
        if p.suffix.lower() in BINARY and p.is_file() and not p.is_symlink() and digest(p) in results
    ]
    assert not copies, "stored twice (link the docs copy to the result instead):\n  " + "\n  ".join(copies)


def test_every_image_a_page_shows_is_a_result_file_linked_once():
    for page in DOCS.glob("*.md"):
        for image in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", page.read_text()):
            path = DOCS / image
            assert path.is_file(), f"{page.name}: {image} does not exist"
            if image.startswith("research/results/"):
                assert path.is_symlink(), f"{page.name}: {image} is a copy, not a link to the result"
