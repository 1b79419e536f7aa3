"""``python -m socratic_exp.premises``: each paper's precondition, measured on the student before any training.

A method can only show its paper's effect where the paper's premise holds, so a negative result means little until
the premise is measured. Every figure below is read from the composed config's student and task (the embedded
testbed by default; any ``model=`` / ``task=`` / ``teacher=`` override works), with sampling at temperature 1 from a
fixed seed, as the training rollouts are drawn:

- **SocraticPO**: of the student's wrong first attempts, the share a second attempt gets right after the teacher's
  guidance, after SocraticPO's fixed retry line ("w/o tg"), and with no context at all (a fresh draw).
- **SDPO / VPD**, per feedback source (sibling solution, environment verdict, teacher critique): the accuracy of the
  student conditioned on that feedback (the self-teacher) against the student's own on the same failed rollouts,
  and the implicit reward margin: how much more the feedback raises the log-likelihood of a correct solution (the
  task's reference solution; where a task has none, a successful rollout of the same question) than of the failed
  rollout itself (nats per sequence).
- **80/20**: the share of completion tokens with entropy above ``HIGH_ENTROPY`` nats, the share of the total entropy
  those tokens' top 20% carry, and how much more often the top-20% tokens stand at a decision (the first token of a
  reasoning line, where the student picks the next operation) than tokens do on average.
- **Goldilocks**: the share of prompts whose group of rollouts is all right or all wrong (zero variance, no GRPO
  signal), and how well the student's own prompt features predict a prompt's p(1 - p) on held-out prompts (the
  correlation of a ridge fit: a learnable difficulty signal).
- **Socratic-RL**: the utility U(v) (accuracy with v in context minus without, on the probe split) of the viewpoints
  the teacher reflects from failed traces: their mean and the best one.

``PROMISES`` states the level each figure must reach on the embedded testbed (``tests/test_premises.py`` holds the
shipped students' manifests to it: ``models/tiny/shipped.py``). Results go to the console and to ``premises.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from socratic_exp.components import Components
    from socratic_exp.models.base import Student

HIGH_ENTROPY = 0.5  # nats: above this a character-level choice is open (two options near-even at ln 2 = 0.69)
GROUP_SIZE = 8  # rollouts per prompt, as the default GRPO config draws them
FEEDBACK_SOURCES = ("sibling", "environment", "teacher")


@dataclasses.dataclass(frozen=True)
class Promise:
    """A premise figure and the level the embedded testbed's design promises for it."""

    key: str
    at_least: float
    why: str


PROMISES = (
    Promise("socraticpo/guided_fix_rate", 0.40, "guidance corrects a substantial share of wrong first attempts"),
    Promise("socraticpo/guidance_gain", 0.20, "... clearly more than the fixed retry line does"),
    Promise("sdpo/teacher/accuracy_gain", 0.20, "the student reading a teacher's critique answers better"),
    Promise("sdpo/sibling/accuracy_gain", 0.20, "the student reading a sibling's solution answers better"),
    Promise("sdpo/environment/accuracy_gain", 0.05, "the student told its answer is wrong answers better"),
    Promise("sdpo/teacher/margin", 0.5, "the critique favours a correct solution over the failed rollout (nats)"),
    Promise("sdpo/sibling/margin", 0.5, "the sibling's solution favours a correct solution (nats)"),
    Promise("sdpo/environment/margin", 0.0, "the verdict favours a correct solution over the failed rollout (nats)"),
    Promise("entropy/decision_enrichment", 2.0, "the top-20% entropy tokens sit at decisions, not spread evenly"),
    Promise("entropy/minority_share", 0.70, "1 - the share of high-entropy tokens: they are a minority"),
    Promise("goldilocks/zero_variance_share", 0.30, "uniform sampling wastes many groups on zero variance"),
    Promise("goldilocks/signal_r", 0.30, "a prompt's difficulty can be learned from the student's features"),
    Promise("socratic_rl/best_utility", 0.05, "a viewpoint in context lifts accuracy"),
)


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


# --- measuring ------------------------------------------------------------------------------------------------
class Premises:
    """The measurements, sharing one student, task and teacher."""

    def __init__(self, components: Components, student: Student, questions: int, seed: int):
        self.c = components
        self.student = student
        self.seed = seed
        rows = components.task.build()
        self.eval_rows = rows["eval"].to_list()[:questions]
        self.train_rows = rows["train"].to_list()[:questions]
        self.probe_rows = rows["probe"].to_list() if "probe" in rows else self.train_rows[-100:]
        self.teacher = components.teacher
        self.teacher.attach(components.task, student)
        settings = components.eval
        self.common = {"max_new_tokens": settings.max_new_tokens, "batch_size": settings.batch_size,
                       "instruction": components.task.instruction()}  # fmt: skip
        self.stage = ""  # the measurement under way: its generation shows a progress bar under this name

    # generation helpers
    def sample(self, prompts: Sequence[Any], n: int = 1, salt: int = 0) -> list[str]:
        from socratic_exp.models.generation import generate

        return generate(
            self.student,
            list(prompts),
            sample=True,
            num_return_sequences=n,
            seed=self.seed + salt,
            progress=f"premises: {self.stage}",
            **self.common,
        )

    def prompt(self, row: dict) -> Any:
        """A row's prompt as a context is built on it: for a chat model the trainers' messages (the instruction as the
        system turn), so that an attempt becomes the assistant's turn and feedback a user turn, as in training; plain
        text otherwise, to which generation adds the instruction."""
        from socratic_exp.tasks.base import render_prompt

        return render_prompt(row["prompt"], self.common["instruction"], True) if self.student.chat else row["prompt"]

    def greedy(self, prompts: Sequence[Any]) -> list[str]:
        from socratic_exp.models.generation import generate

        return generate(self.student, list(prompts), progress=f"premises: {self.stage}", **self.common)

    def score(self, completion: str, row: dict) -> float:
        return self.c.task.score(completion, row["answer"])

    # SocraticPO
    def retries(self) -> list[RetryOutcome]:
        """Each wrong first attempt on the eval questions, with one second attempt after the teacher's guidance on it,
        after the fixed retry line and from the bare prompt."""
        from socratic_exp.teachers.base import Attempt, GuidanceRequest, extend_context

        rows = self.eval_rows
        first = self.sample([r["prompt"] for r in rows], salt=1)
        wrong = [(r, a) for r, a in zip(rows, first, strict=True) if self.score(a, r) < 1.0]
        if not wrong:
            return []
        requests = []
        for row, attempt in wrong:
            verdict = self.c.task.verify(attempt, row["answer"])
            requests.append(GuidanceRequest.for_row(row, [Attempt(attempt, verdict.score, verdict.reason)]))
        guidance = self.teacher.guide(requests)
        retry = getattr(self.c.algorithm, "retry_prompt", "Hint: try again.")
        contexts = (  # (second attempt, its prompts, its sampling salt)
            ("guided", [extend_context(self.prompt(r), a, g) for (r, a), g in zip(wrong, guidance, strict=True)], 2),
            ("retry", [extend_context(self.prompt(r), a, retry) for r, a in wrong], 3),
            ("fresh", [r["prompt"] for r, _ in wrong], 4),
        )
        seconds = {name: self.sample(prompts, salt=salt) for name, prompts, salt in contexts}
        return [
            RetryOutcome(
                row,
                attempt,
                **{name: self.score(seconds[name][i], row) for name in seconds},
                guided_attempt=seconds["guided"][i],
            )
            for i, (row, attempt) in enumerate(wrong)
        ]

    def socraticpo(self) -> dict[str, float]:
        outcomes = self.retries()
        if not outcomes:
            return {"socraticpo/wrong_first_attempts": 0.0}
        rates = {name: statistics.fmean(getattr(o, name) for o in outcomes) for name in ("guided", "retry", "fresh")}
        return {
            "socraticpo/wrong_first_attempts": len(outcomes) / len(self.eval_rows),
            "socraticpo/guided_fix_rate": rates["guided"],
            "socraticpo/retry_fix_rate": rates["retry"],
            "socraticpo/fresh_fix_rate": rates["fresh"],
            "socraticpo/guidance_gain": rates["guided"] - rates["retry"],
        }

    # SDPO / VPD
    def self_teacher(self) -> dict[str, float]:
        from socratic_exp.algorithms.sdpo.contexts import (
            PLAIN_TEMPLATES,
            SDPO_TEMPLATES,
            ContextSettings,
            Rollout,
            build_contexts,
        )
        from socratic_exp.teachers.base import Attempt, GuidanceRequest

        rows = self.eval_rows[: max(1, len(self.eval_rows) // 4)]
        completions = self.sample([r["prompt"] for r in rows], n=GROUP_SIZE, salt=5)
        rollouts = []
        for i, completion in enumerate(completions):
            row = rows[i // GROUP_SIZE]
            verdict = self.c.task.verify(completion, row["answer"])
            rollouts.append(Rollout(self.prompt(row), completion, verdict.score, verdict.reason, verdict.extracted))
        per_question = [statistics.fmean(r.score for r in rollouts[q * GROUP_SIZE : (q + 1) * GROUP_SIZE])
                        for q in range(len(rows))]  # fmt: skip

        def critic(indices: list[int]) -> list[str]:
            requests = [
                GuidanceRequest.for_row(
                    rows[i // GROUP_SIZE], [Attempt(rollouts[i].completion, rollouts[i].score, rollouts[i].reason)]
                )
                for i in indices
            ]
            return self.teacher.guide(requests)

        def correct_solution(index: int) -> str | None:
            """The row's reference solution; on a task without one, a successful rollout of the same question."""
            question = index // GROUP_SIZE
            group = rollouts[question * GROUP_SIZE : (question + 1) * GROUP_SIZE]
            return rows[question].get("reference") or next((r.completion for r in group if r.score >= 1.0), None)

        # the templates an SDPO / VPD run of this student uses (context_style=auto: SDPO's in a chat's user turn)
        chat = self.student.chat
        run_settings = getattr(self.c.algorithm, "context_settings", None)
        templates = run_settings(chat).templates if run_settings else (SDPO_TEMPLATES if chat else PLAIN_TEMPLATES)
        figures: dict[str, float] = {}
        for source in FEEDBACK_SOURCES:
            settings = ContextSettings(sources=(source,), templates=templates)
            contexts = build_contexts(rollouts, GROUP_SIZE, settings, critic)
            failed = [i for i, ctx in enumerate(contexts) if ctx.usable and rollouts[i].score < 1.0]
            if not failed:
                continue
            answers = self.sample([contexts[i].prompt for i in failed], salt=6)
            teacher_acc = statistics.fmean(
                self.score(a, rows[i // GROUP_SIZE]) for i, a in zip(failed, answers, strict=True)
            )
            student_acc = statistics.fmean(per_question[i // GROUP_SIZE] for i in failed)
            figures |= {
                f"sdpo/{source}/contexts": float(len(failed)),
                f"sdpo/{source}/teacher_accuracy": teacher_acc,
                f"sdpo/{source}/student_accuracy": student_acc,
                f"sdpo/{source}/accuracy_gain": teacher_acc - student_acc,
            }
            scored = [(i, correct) for i in failed if (correct := correct_solution(i)) is not None]
            if not scored:  # no reference solution and no successful sibling: no margin to measure
                continue
            bare = [rollouts[i].prompt for i, _ in scored]
            with_feedback = [contexts[i].prompt for i, _ in scored]
            own = [rollouts[i].completion for i, _ in scored]
            correct = [solution for _, solution in scored]
            lift_correct = _mean_diff(self.logps(with_feedback, correct), self.logps(bare, correct))
            lift_failed = _mean_diff(self.logps(with_feedback, own), self.logps(bare, own))
            figures |= {
                f"sdpo/{source}/lift_correct": lift_correct,
                f"sdpo/{source}/lift_failed": lift_failed,
                f"sdpo/{source}/margin": lift_correct - lift_failed,
            }
        return figures

    def logps(self, prompts: Sequence[Any], completions: Sequence[str]) -> list[float]:
        """Sum of the completion's token log-probabilities under the student given each prompt."""
        return [float(t.sum()) for t, _ in self.token_stats(prompts, completions)]

    def token_stats(self, prompts: Sequence[Any], completions: Sequence[str], batch: int = 64) -> list[tuple[Any, Any]]:
        """(log-probabilities, entropies) of each completion's tokens, teacher-forced after its prompt."""
        import torch

        from socratic_exp.models.generation import as_model_input

        tokenizer, model = self.student.tokenizer, self.student.model
        instruction = self.c.task.instruction()
        out: list[tuple[Any, Any]] = []
        model.eval()
        for start in range(0, len(prompts), batch):
            pairs = []
            for prompt, completion in zip(prompts[start : start + batch], completions[start : start + batch],
                                          strict=True):  # fmt: skip
                context = tokenizer(as_model_input(self.student, prompt, instruction), add_special_tokens=False)
                answer = tokenizer(completion, add_special_tokens=False)
                pairs.append((context["input_ids"], answer["input_ids"]))
            width = max(len(p) + len(a) for p, a in pairs)
            ids = torch.full((len(pairs), width), tokenizer.pad_token_id)
            mask = torch.zeros((len(pairs), width), dtype=torch.long)
            for row, (p, a) in enumerate(pairs):  # right padding: positions stay those of an unpadded input
                ids[row, : len(p) + len(a)] = torch.tensor(p + a)
                mask[row, : len(p) + len(a)] = 1
            with torch.inference_mode():
                logits = model(input_ids=ids.to(model.device), attention_mask=mask.to(model.device)).logits.float()
            logp = torch.log_softmax(logits, dim=-1)
            entropy = -(logp.exp() * logp).sum(-1)
            for row, (p, a) in enumerate(pairs):
                positions = torch.arange(len(p) - 1, len(p) + len(a) - 1)
                targets = torch.tensor(a, device=logp.device)
                out.append((logp[row, positions, targets].cpu(), entropy[row, positions].cpu()))
        return out

    # 80/20
    def entropy(self) -> dict[str, float]:
        import torch

        rows = self.eval_rows
        completions = self.sample([r["prompt"] for r in rows], salt=7)
        stats = self.token_stats([r["prompt"] for r in rows], completions)
        entropies, decisions = [], []
        tokenizer = self.student.tokenizer
        for (_, entropy), completion in zip(stats, completions, strict=True):
            pieces = tokenizer.convert_ids_to_tokens(tokenizer(completion, add_special_tokens=False)["input_ids"])
            starts = _line_starts(pieces)
            entropies.append(entropy)
            decisions.append(torch.tensor(starts[: len(entropy)], dtype=torch.bool))
        values, at_decision = torch.cat(entropies), torch.cat(decisions)
        if values.numel() == 0:
            return {}
        top = values >= torch.quantile(values, 0.8)
        base_rate = float(at_decision.float().mean())
        top_rate = float(at_decision[top].float().mean())
        high = values > HIGH_ENTROPY
        return {
            "entropy/high_entropy_share": float(high.float().mean()),
            "entropy/minority_share": 1.0 - float(high.float().mean()),
            "entropy/top20_entropy_mass": float(values[top].sum() / values.sum().clamp_min(1e-12)),
            "entropy/decision_share": base_rate,
            "entropy/top20_decision_share": top_rate,
            "entropy/decision_enrichment": top_rate / base_rate if base_rate else 0.0,
            "entropy/mean_at_decision": float(values[at_decision].mean()) if at_decision.any() else 0.0,
            "entropy/mean_elsewhere": float(values[~at_decision].mean()) if (~at_decision).any() else 0.0,
        }

    # Goldilocks
    def goldilocks(self) -> dict[str, float]:
        import torch

        rows = self.train_rows
        completions = self.sample([r["prompt"] for r in rows], n=GROUP_SIZE, salt=8)
        rates = [
            statistics.fmean(self.score(c, row) for c in completions[q * GROUP_SIZE : (q + 1) * GROUP_SIZE])
            for q, row in enumerate(rows)
        ]
        target = torch.tensor([p * (1 - p) for p in rates])
        features = self.prompt_features([r["prompt"] for r in rows])
        order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(self.seed))
        fit, held = order[: len(rows) // 2], order[len(rows) // 2 :]
        prediction = _ridge(features[fit], target[fit], features[held])
        return {
            "goldilocks/zero_variance_share": sum(p in (0.0, 1.0) for p in rates) / len(rates),
            "goldilocks/mean_pass_rate": statistics.fmean(rates),
            "goldilocks/signal_r": _pearson(prediction, target[held]),
        }

    def prompt_features(self, prompts: Sequence[str], batch: int = 128) -> Any:
        """The student's mean last hidden state over each prompt (what ``sampler.features=student`` reads)."""
        import torch

        from socratic_exp.models.generation import as_model_input

        tokenizer, model = self.student.tokenizer, self.student.model
        rows = []
        for start in range(0, len(prompts), batch):
            texts = [as_model_input(self.student, p, self.c.task.instruction()) for p in prompts[start : start + batch]]
            encoded = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
            with torch.inference_mode():
                hidden = model(**encoded, output_hidden_states=True).hidden_states[-1].float()
            mask = encoded["attention_mask"].unsqueeze(-1).float()
            rows.append(((hidden * mask).sum(1) / mask.sum(1)).cpu())
        return torch.cat(rows)

    # Socratic-RL
    def socratic_rl(self) -> dict[str, float]:
        from socratic_exp.algorithms.socratic_rl.prompts import REFLECTION_TEMPLATE
        from socratic_exp.tasks.base import with_context
        from socratic_exp.teachers.base import Attempt

        rows = self.train_rows
        answers = self.greedy([r["prompt"] for r in rows])
        failed = [(r["prompt"], a) for r, a in zip(rows, answers, strict=True) if self.score(a, r) < 1.0]
        attempts = [Attempt(a, 0.0, "wrong") for _, a in failed]
        viewpoints = self.teacher.reflect([q for q, _ in failed], attempts, REFLECTION_TEMPLATE)
        texts = sorted({v.text for v in viewpoints if v is not None})
        if not texts:
            return {"socratic_rl/viewpoints": 0.0}
        probe = self.probe_rows
        base = statistics.fmean(self.score(a, r) for r, a in zip(probe, self.greedy([r["prompt"] for r in probe]),
                                                                 strict=True))  # fmt: skip
        utilities = []
        for text in texts:
            answers = self.greedy([with_context(r["prompt"], text) for r in probe])
            utilities.append(statistics.fmean(self.score(a, r) for r, a in zip(probe, answers, strict=True)) - base)
        return {
            "socratic_rl/viewpoints": float(len(texts)),
            "socratic_rl/probe_accuracy": base,
            "socratic_rl/mean_utility": statistics.fmean(utilities),
            "socratic_rl/best_utility": max(utilities),
        }


def _line_starts(pieces: Sequence[str]) -> list[bool]:
    """Whether each token opens a line of the completion (its first token, or the one after a newline)."""
    starts, fresh = [], True
    for piece in pieces:
        starts.append(fresh and piece not in ("\n", "Ċ"))
        fresh = piece.endswith(("\n", "Ċ")) or (fresh and piece in ("\n", "Ċ"))
    return starts


def _mean_diff(a: Sequence[float], b: Sequence[float]) -> float:
    return statistics.fmean(x - y for x, y in zip(a, b, strict=True))


def _ridge(x: Any, y: Any, x_new: Any, penalty: float = 1.0) -> Any:
    import torch

    mean, std = x.mean(0), x.std(0).clamp_min(1e-6)
    x, x_new = (x - mean) / std, (x_new - mean) / std
    gram = x.T @ x + penalty * len(x) * torch.eye(x.shape[1])
    weights = torch.linalg.solve(gram, x.T @ (y - y.mean()))
    return x_new @ weights + y.mean()


def _pearson(a: Any, b: Any) -> float:
    a, b = a - a.mean(), b - b.mean()
    denominator = float((a.norm() * b.norm()).clamp_min(1e-12))
    return float((a * b).sum()) / denominator


# --- the command ----------------------------------------------------------------------------------------------
def measure(components: Components, questions: int = 400, seed: int = 0) -> dict[str, float]:
    """Every premise figure for the composed config's student (loading, and if needed warm-starting, it first)."""
    from transformers import set_seed

    set_seed(seed)
    student = components.model.load(components.task)
    premises = Premises(components, student, questions, seed)
    parts = {"SocraticPO": premises.socraticpo, "SDPO / VPD": premises.self_teacher, "80/20": premises.entropy,
             "Goldilocks": premises.goldilocks, "Socratic-RL": premises.socratic_rl}  # fmt: skip
    figures: dict[str, float] = {}
    for number, (name, part) in enumerate(parts.items(), 1):
        premises.stage = name  # a live bar per generation on a terminal; this line in a log file
        print(f"premises {number}/{len(parts)}: {name}", file=sys.stderr, flush=True)
        figures |= part()
    return figures


def verdicts(figures: dict[str, float]) -> list[tuple[Promise, float | None, bool]]:
    return [(p, figures.get(p.key), figures.get(p.key, float("-inf")) >= p.at_least) for p in PROMISES]


def question_count(text: str) -> int:
    value = int(text)
    if value < 8:  # a quarter of them go to the SDPO / VPD measurement, and half the rest to the ridge fit
        raise argparse.ArgumentTypeError(f"{value}: give at least 8 questions")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m socratic_exp.premises", description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="*", help="config overrides, as for python -m socratic_exp")
    parser.add_argument("--questions", type=question_count, default=400, help="questions per measurement (default 400)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    parser.add_argument("--out", type=Path, default=Path("premises.json"), help="where the figures go")
    args = parser.parse_args(argv)

    from socratic_exp.components import build_components
    from socratic_exp.console import configure
    from socratic_exp.errors import or_exit_code
    from socratic_exp.hydra_support import compose

    configure()
    started = time.perf_counter()
    figures = or_exit_code(
        lambda: measure(build_components(compose("algorithm=socraticpo", *args.overrides)), args.questions, args.seed)
    )
    if isinstance(figures, int):
        return figures
    width = max(map(len, figures))
    for key, value in figures.items():
        print(f"{key:<{width}}  {value:8.3f}")
    print()
    for promise, value, held in verdicts(figures):
        shown = "   n/a" if value is None else f"{value:6.3f}"
        print(f"{'holds ' if held else 'FAILS '} {promise.key:<{width}} {shown} >= {promise.at_least:<5} {promise.why}")
    seconds = time.perf_counter() - started
    record = {"overrides": args.overrides, "questions": args.questions, "seed": args.seed, "seconds": seconds,
              "figures": figures}  # fmt: skip
    args.out.write_text(json.dumps(record, indent=2))
    print(f"\nwritten: {args.out} ({seconds:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
