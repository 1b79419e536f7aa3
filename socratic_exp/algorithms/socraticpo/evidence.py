"""SocraticPO's premise and claims, as the study measures them (``socratic_exp.study``).

Premise: of the student's wrong first attempts, the share a second attempt gets right after the teacher's guidance,
after SocraticPO's fixed retry line ("w/o tg") and with no context at all (a fresh draw). Beside it, by difficulty
(the testbed's operation count), the share of rollouts that reach each attempt under the trainer's stop rule, and the
share that rollout's context cuts short (``attempt_reach``): how many of the K attempts the testbed lets happen.
Claims (Table 2): interactive rollouts beat GRPO, and each ablation ("w/o tg", "w/o rd") loses to the full method;
the composition arm (SocraticPO with the Goldilocks sampler and the entropy mask, ours) is scored here too, being
SocraticPO with two overlays.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

from socratic_exp.core.methods import Claim, Promise

if TYPE_CHECKING:
    from socratic_exp.study.premises import Bench

PROMISES = (
    Promise("socraticpo/guided_fix_rate", 0.40, "guidance corrects a substantial share of wrong first attempts"),
    Promise("socraticpo/guidance_gain", 0.20, "... clearly more than the fixed retry line does"),
)
# SocraticPO's guided interactive rollout: its settings and the teacher (against an arm with neither)
GUIDED_ROLLOUT = ("algorithm._target_", "algorithm.guidance", "algorithm.max_attempts", "algorithm.retry_prompt",
                  "algorithm.reward_decay", "algorithm.teacher_kl_every", "algorithm.reuse_cache",
                  "teacher.")  # fmt: skip
CLAIMS = (
    Claim("socraticpo>grpo", "SocraticPO, Table 1", "teacher-guided interactive rollouts beat GRPO", "socraticpo",
          "grpo", changes=GUIDED_ROLLOUT,
          differences="the backend: REINFORCE++ (backend, the KL to the initial policy in the return, advantages "
          "normalised over the batch: normalize_over, advantage_eps, baseline, whitening) for GRPO's group-normalised "
          "advantages; "
          "socraticpo>reinforce_pp changes the guided rollout alone"),
    Claim("socraticpo>without_tg", "SocraticPO, Table 2", "the teacher's guidance beats a fixed retry prompt",
          "socraticpo", "socraticpo_without_tg", changes=("algorithm.guidance",)),
    Claim("socraticpo>without_rd", "SocraticPO, Table 2", "reward decay beats full reward for late corrections",
          "socraticpo", "socraticpo_without_rd", changes=("algorithm.reward_decay",), margin=0.0567,
          margin_source="the paper's effect: 0.7624 with reward decay, 0.7057 without (Table 2, Qwen3.5-27B teacher)"),
    Claim("socraticpo>reinforce_pp", "SocraticPO, Table 1", "guided rollouts beat their Reinforce++ backend alone",
          "socraticpo", "reinforce_pp", changes=GUIDED_ROLLOUT, margin=0.0236,
          margin_source="the paper's effect: Reinforce++ 0.7388, SocraticPO 0.7624 (Table 1, Qwen3.5-27B teacher)",
          differences="none in effect: the same REINFORCE++ named by each algorithm's settings (backend; kl_coef "
          "null is REINFORCE++'s 0.01; baseline none; normalize_over attempts is responses with one attempt; "
          "whitening std is REINFORCE++'s normalisation)"),
    Claim("composition>socraticpo", "ours (no paper)", "SocraticPO + Goldilocks + entropy mask beat SocraticPO",
          "composition", "socraticpo", changes=("sampler.", "algorithm.entropy_mask.")),
    Claim("composition>grpo", "ours (no paper)", "SocraticPO + Goldilocks + entropy mask beat GRPO", "composition",
          "grpo", changes=(*GUIDED_ROLLOUT, "sampler.", "algorithm.entropy_mask."),
          differences="SocraticPO's REINFORCE++ backend (backend, normalize_over, advantage_eps, baseline, "
          "whitening), as socraticpo>grpo"),
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class RetryOutcome:
    """A wrong first attempt and the score of a second attempt after the teacher's guidance on it (``guided``), after
    the fixed retry line (``retry``) and from the bare prompt (``fresh``); ``guided_attempt`` is the guided one."""

    row: dict
    attempt: str
    guided: float
    retry: float
    fresh: float
    guided_attempt: str = ""
    guidance: str = ""


def premises(bench: Bench) -> dict[str, float]:
    outcomes = retries(bench)
    return fix_rates(outcomes, len(bench.eval_rows)) | attempt_reach(bench, outcomes)


def attempt_reach(bench: Bench, outcomes: Sequence[RetryOutcome]) -> dict[str, float]:
    """By difficulty d, of the eval questions: ``reach/attempt<k>/d<d>``, the share whose rollout makes a k-th
    attempt (k = 2, 3 within algorithm.max_attempts), and ``context_cut/d<d>``, the share whose rollout stops wrong
    before K because another guidance turn and attempt would not fit the model's context: the trainer's rule,
    context + attempt + TURN_BUDGET > max_position_embeddings - max_completion_length, on the sampled first and guided
    second attempts (token counts of the rendered text)."""
    from socratic_exp.algorithms.socraticpo.trainer import TURN_BUDGET
    from socratic_exp.models.generation import as_model_input
    from socratic_exp.teachers.base import extend_context

    student, algorithm = bench.student, bench.c.algorithm
    attempts = min(getattr(algorithm, "max_attempts", 1), 3)
    limit = getattr(student.model.config, "max_position_embeddings", None)
    room = limit - algorithm.max_completion_length if limit else None

    def fits(context: object, attempt: str) -> bool:
        text = as_model_input(student, context, bench.common["instruction"])
        used = len(student.tokenizer(text + attempt, add_special_tokens=False)["input_ids"])
        return room is None or used + TURN_BUDGET <= room

    wrong = {id(o.row): o for o in outcomes}
    reached: dict[int, list[int]] = {}  # difficulty -> the attempts each question's rollout makes
    cut: dict[int, list[bool]] = {}  # difficulty -> whether the context stopped it
    for row in bench.eval_rows:
        steps = []  # (context, attempt) before each further attempt, while the attempt before was wrong
        if (outcome := wrong.get(id(row))) is not None:
            steps.append((bench.prompt(row), outcome.attempt))
            if outcome.guided < 1.0:
                guided = extend_context(bench.prompt(row), outcome.attempt, outcome.guidance)
                steps.append((guided, outcome.guided_attempt))
        made, stopped = 1, False
        for context, attempt in steps[: attempts - 1]:
            if not fits(context, attempt):
                stopped = True
                break
            made += 1
        level = int(row.get("difficulty") or 0)
        reached.setdefault(level, []).append(made)
        cut.setdefault(level, []).append(stopped)
    figures = {}
    for level in sorted(reached):
        for k in range(2, attempts + 1):
            figures[f"socraticpo/reach/attempt{k}/d{level}"] = statistics.fmean(m >= k for m in reached[level])
        figures[f"socraticpo/context_cut/d{level}"] = statistics.fmean(cut[level])
    return figures


def fix_rates(outcomes: Sequence[RetryOutcome], questions: int) -> dict[str, float]:
    """The share of the ``questions`` whose first attempt was wrong, and of those the share each second attempt
    got right: after the guidance, after the fixed retry line, from the bare prompt."""
    if not outcomes:
        return {"socraticpo/wrong_first_attempts": 0.0}
    rates = {name: statistics.fmean(getattr(o, name) for o in outcomes) for name in ("guided", "retry", "fresh")}
    return {
        "socraticpo/wrong_first_attempts": len(outcomes) / questions,
        "socraticpo/guided_fix_rate": rates["guided"],
        "socraticpo/retry_fix_rate": rates["retry"],
        "socraticpo/fresh_fix_rate": rates["fresh"],
        "socraticpo/guidance_gain": rates["guided"] - rates["retry"],
    }


def retries(bench: Bench) -> list[RetryOutcome]:
    """Each wrong first attempt on the eval questions, with one second attempt after the teacher's guidance on it,
    after the fixed retry line and from the bare prompt."""
    from socratic_exp.teachers.base import Attempt, GuidanceRequest, extend_context

    rows = bench.eval_rows
    first = bench.sample([r["prompt"] for r in rows], salt=1)
    wrong = [(r, a) for r, a in zip(rows, first, strict=True) if bench.score(a, r) < 1.0]
    if not wrong:
        return []
    requests = []
    for row, attempt in wrong:
        verdict = bench.c.task.verify(attempt, row["answer"])
        requests.append(GuidanceRequest.for_row(row, [Attempt(attempt, verdict.score, verdict.reason)]))
    guidance = bench.teacher.guide(requests)
    retry = getattr(bench.c.algorithm, "retry_prompt", "Hint: try again.")
    contexts = (  # (second attempt, its prompts, its sampling salt)
        ("guided", [extend_context(bench.prompt(r), a, g) for (r, a), g in zip(wrong, guidance, strict=True)], 2),
        ("retry", [extend_context(bench.prompt(r), a, retry) for r, a in wrong], 3),
        ("fresh", [r["prompt"] for r, _ in wrong], 4),
    )
    seconds = {name: bench.sample(prompts, salt=salt) for name, prompts, salt in contexts}
    return [
        RetryOutcome(
            row,
            attempt,
            **{name: bench.score(seconds[name][i], row) for name in seconds},
            guided_attempt=seconds["guided"][i],
            guidance=guidance[i],
        )
        for i, (row, attempt) in enumerate(wrong)
    ]
