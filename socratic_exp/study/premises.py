"""``python -m socratic_exp.study.premises``: each paper's precondition, measured on the student before any training.

A method can only show its paper's effect where the paper's premise holds, so a negative result means little until
the premise is measured. Every figure is read from the composed config's student and task (the embedded testbed by
default; any ``model=`` / ``task=`` / ``teacher=`` override works), with sampling at temperature 1 from a fixed
seed, as the training rollouts are drawn. What each paper presumes, and how it is measured, is the method's own
(``premises`` in its folder's ``evidence.py``, see ``socratic_exp.core.methods``); ``Bench`` gives them one student,
task and teacher, and the generation and scoring they share.

Each method's ``PROMISES`` states the level its figures must reach on the embedded testbed (``tests/test_premises.py``
holds the shipped students' manifests to them: ``models/tiny/shipped.py``). Results go to the console and to
``premises.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from socratic_exp.core.methods import Promise, in_order
from socratic_exp.runtime.methods import declared_methods

if TYPE_CHECKING:
    from socratic_exp.models.base import Student
    from socratic_exp.runtime.assembly import Components

GROUP_SIZE = 8  # rollouts per prompt, as the default GRPO config draws them


# --- measuring ------------------------------------------------------------------------------------------------
class Bench:
    """What the methods' premise measurements share: one student, task and teacher, the questions, generation."""

    def __init__(self, components: Components, student: Student, questions: int, seed: int):
        self.c = components
        self.student = student
        self.seed = seed
        self.group_size = GROUP_SIZE
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

    def logps(self, prompts: Sequence[Any], completions: Sequence[str]) -> list[float]:
        """Sum of the completion's token log-probabilities under the student given each prompt."""
        return [float(t.sum()) for t, _ in self.token_stats(prompts, completions)]

    def token_stats(self, prompts: Sequence[Any], completions: Sequence[str], batch: int = 64) -> list[tuple[Any, Any]]:
        """(log-probabilities, entropies) of each completion's tokens, teacher-forced after its prompt."""
        import torch

        out: list[tuple[Any, Any]] = []
        self.student.model.eval()
        for start in range(0, len(prompts), batch):
            with torch.inference_mode():
                logp, spans, targets = self._teacher_forced(prompts[start : start + batch],
                                                            completions[start : start + batch])  # fmt: skip
            entropy = -(logp.exp() * logp).sum(-1)
            for row, (positions, target) in enumerate(zip(spans, targets, strict=True)):
                out.append((logp[row, positions, target].cpu(), entropy[row, positions].cpu()))
        return out

    def logp_gradient(self, prompts: Sequence[Any], completions: Sequence[str], weights: Sequence[Any],
                      batch: int = 64) -> Any:  # fmt: skip
        """The gradient over the student's parameters, flattened, of the sum over completions and their tokens of
        ``weights[i][t] * log p(token t of completion i)``, teacher-forced as ``token_stats``: a policy gradient
        when the weights are advantages, restricted to the tokens whose weight is not zero."""
        import torch

        model = self.student.model
        parameters = [p for p in model.parameters() if p.requires_grad]
        total = [torch.zeros_like(p) for p in parameters]
        model.eval()  # no dropout: the same function token_stats reads
        for start in range(0, len(prompts), batch):
            logp, spans, targets = self._teacher_forced(prompts[start : start + batch],
                                                        completions[start : start + batch])  # fmt: skip
            rows = zip(spans, targets, weights[start : start + batch], strict=True)
            objective = sum(
                (logp[row, positions, target] * torch.as_tensor(weight, device=logp.device)).sum()
                for row, (positions, target, weight) in enumerate(rows)
            )
            for into, grad in zip(total, torch.autograd.grad(objective, parameters, allow_unused=True), strict=True):
                if grad is not None:
                    into += grad
        return torch.cat([g.flatten() for g in total])

    def _teacher_forced(self, prompts: Sequence[Any], completions: Sequence[str]) -> tuple[Any, list[Any], list[Any]]:
        """The log-softmax over one padded batch of prompt + completion, each row's completion positions (the
        logits that predict its tokens) and its tokens."""
        import torch

        from socratic_exp.models.generation import as_model_input

        tokenizer, model = self.student.tokenizer, self.student.model
        instruction = self.c.task.instruction()
        pairs = []
        for prompt, completion in zip(prompts, completions, strict=True):
            context = tokenizer(as_model_input(self.student, prompt, instruction), add_special_tokens=False)
            answer = tokenizer(completion, add_special_tokens=False)
            pairs.append((context["input_ids"], answer["input_ids"]))
        width = max(len(p) + len(a) for p, a in pairs)
        ids = torch.full((len(pairs), width), tokenizer.pad_token_id)
        mask = torch.zeros((len(pairs), width), dtype=torch.long)
        for row, (p, a) in enumerate(pairs):  # right padding: positions stay those of an unpadded input
            ids[row, : len(p) + len(a)] = torch.tensor(p + a)
            mask[row, : len(p) + len(a)] = 1
        logits = model(input_ids=ids.to(model.device), attention_mask=mask.to(model.device)).logits.float()
        spans = [torch.arange(len(p) - 1, len(p) + len(a) - 1) for p, a in pairs]
        targets = [torch.tensor(a, dtype=torch.long, device=logits.device) for _, a in pairs]
        return torch.log_softmax(logits, dim=-1), spans, targets

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


# --- the command ----------------------------------------------------------------------------------------------
def measure(components: Components, questions: int = 400, seed: int = 0) -> dict[str, float]:
    """Every premise figure for the composed config's student (loading, and if needed warm-starting, it first)."""
    from transformers import set_seed

    set_seed(seed)
    student = components.model.load(components.task)
    bench = Bench(components, student, questions, seed)
    methods = [m for m in in_order(declared_methods()) if m.premises is not None]  # see core/methods.py
    figures: dict[str, float] = {}
    for number, method in enumerate(methods, 1):
        bench.stage = method.paper  # a live bar per generation on a terminal; this line in a log file
        print(f"premises {number}/{len(methods)}: {method.paper}", file=sys.stderr, flush=True)
        figures |= method.premises(bench)
    return figures


def promises() -> tuple[Promise, ...]:
    """Every method's promises: the levels its premise figures must reach on the embedded testbed."""
    return tuple(promise for method in in_order(declared_methods()) for promise in method.promises)


def verdicts(figures: dict[str, float]) -> list[tuple[Promise, float | None, bool]]:
    return [(p, figures.get(p.key), figures.get(p.key, float("-inf")) >= p.at_least) for p in promises()]


def question_count(text: str) -> int:
    value = int(text)
    if value < 8:  # a quarter of them go to the SDPO / VPD measurement, and half the rest to the ridge fit
        raise argparse.ArgumentTypeError(f"{value}: give at least 8 questions")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m socratic_exp.study.premises", description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="*", help="config overrides, as for python -m socratic_exp")
    parser.add_argument("--questions", type=question_count, default=400, help="questions per measurement (default 400)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    parser.add_argument("--out", type=Path, default=Path("premises.json"), help="where the figures go")
    args = parser.parse_args(argv)

    from socratic_exp.core.config import compose
    from socratic_exp.core.console import PROGRESS_LOG, configure, route, show_live_bars
    from socratic_exp.core.errors import or_exit_code
    from socratic_exp.runtime.assembly import build_components

    configure()
    live = sys.stderr.isatty()  # a live bar per generation on a terminal; elsewhere plain lines every tenth
    show_live_bars(live)
    route(PROGRESS_LOG, to_console=not live)
    started = time.perf_counter()
    figures = or_exit_code(lambda: measure(build_components(compose(*args.overrides)), args.questions, args.seed))
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
