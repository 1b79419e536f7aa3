"""``task=arithmetic``: the embedded testbed, multi-step integer arithmetic (Socratic-RL, Section 7, Phase 1).

Prompts are ``Q: 3+4*2=?``; the student answers with one ``a op b=c`` line per operation and a final ``A: n``
line. Difficulty is the number of operations. The same module writes the warm-start corpus of the tiny model,
which is where the student's known misconceptions come from: on a share of the questions where it matters, the
traces ignore operator precedence or parentheses, and some examples show a hint line (a principle before the
question, or guidance after a wrong attempt) followed by a correct attempt, so that the student learns to use
hints in its context.
"""

from __future__ import annotations

import dataclasses
import random
import re
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from socratic_exp.core.component import setting
from socratic_exp.core.errors import UserError
from socratic_exp.tasks import expressions as ex
from socratic_exp.tasks.base import PLAIN_SOLUTION_NOTE, Task, Verdict, WarmstartExample, environment_feedback
from socratic_exp.tasks.diagnosis import diagnose
from socratic_exp.tasks.hub_data import optional_text, read_file, read_json, text
from socratic_exp.tasks.verifiers import ALL_PARSERS

if TYPE_CHECKING:
    from datasets import DatasetDict

# The corpus's contexts (model=tiny's warm-start), each a share of the traces; the rest are plain.
CONTEXT_SHARES = {
    "retry": 0.25,  # wrong attempt -> teacher's hint -> corrected attempt (a SocraticPO rollout)
    "fixed_retry": 0.05,  # wrong attempt -> FIXED_RETRY -> a fresh attempt (SocraticPO's "w/o tg" line says nothing)
    "principle": 0.10,  # a principle line before the question (Socratic-RL's viewpoints)
    "critique": 0.10,  # a teacher's hint on an earlier attempt before the question (SDPO / VPD teacher feedback)
    "verdict": 0.10,  # the environment's verdict on an earlier answer (SDPO / VPD environment feedback)
    "solution": 0.10,  # a correct solution before the question, to be copied (SDPO's sibling demonstration)
}
FIXED_RETRY = "Hint: try again."  # SocraticPO's default retry_prompt
_ANSWER = re.compile(r"A:[ \t]*(-?\d{1,40})(?!\d)")
_MAX_SAMPLING_TRIES = 200

# Context lines. Principles stand before the question (viewpoints); guidance follows a wrong attempt.
PRINCIPLES: dict[str, tuple[str, ...]] = {
    "precedence": (
        "Principle: do * before + and -.",
        "Note: multiply first, then add or subtract.",
        "Heuristic: * binds tighter than + and -.",
    ),
    "parentheses": (
        "Principle: work out the brackets first.",
        "Note: evaluate the parentheses before the operation outside them.",
        "Heuristic: a bracket is one number; compute it first.",
    ),
    "slip": ("Note: recheck every product and sum.", "Principle: check each step before the next."),
}
GUIDANCE: dict[str, tuple[str, ...]] = {
    "precedence": (
        "Hint: do * before + and -.",
        "Hint: step {n} ignores that * comes before {op}.",
        "Hint: multiply first, then add or subtract.",
    ),
    "parentheses": (
        "Hint: work out the brackets first.",
        "Hint: step {n} ignores the brackets.",
        "Hint: compute ({inner}) first.",
    ),
    "slip": ("Hint: recheck {wrote}.", "Hint: step {n} is wrong: {left}{op}{right} is {value}, not {result}."),
    "copy": (
        "Hint: step {n} uses {wrote} but the expression has {expected}.",
        "Hint: copy the numbers of step {n} exactly: {expected}.",
    ),
}
# A slip's hint gives the step's right value ("the next step or correction they should try", SocraticPO's teaching
# protocol) except in the last step, whose value is the answer: there it names the wrong step only.
SLIP_IN_LAST_STEP = "Hint: step {n} is wrong: {left}{op}{right} is not {result}."
# The wrong attempts of the corpus's contexts, drawn evenly among the misconceptions that change the answer and the
# two errors the warm-started student makes on its own: an arithmetic slip, and a miscopied number (the most common
# wrong first attempt of the sampling student). Each is an error class the rule teacher diagnoses and hints at.
OWN_ERRORS = ("slip", "copy")


def prompt_for(expression: str, context: str | None = None) -> str:
    """The student's prompt, optionally preceded by context lines (viewpoints, principles)."""
    question = f"Q: {expression}=?\n"
    return f"{context.rstrip()}\n{question}" if context else question


_QUESTION = re.compile(r"Q:[ \t]*([0-9+\-*() \t]{1,256})=\?")


def expression_in(prompt: str) -> str | None:
    """The expression of the (last) question in a prompt, or None."""
    matches = _QUESTION.findall(prompt)
    return matches[-1].strip() if matches else None


def extract_answer(completion: str) -> str | None:
    matches = _ANSWER.findall(completion)
    return str(int(matches[-1])) if matches else None


@dataclasses.dataclass(kw_only=True)
class ArithmeticTask(Task):
    """Seeded generator of expressions over 1..``max_operand`` with + - * and parentheses."""

    min_ops: int = setting(1, "fewest operations per expression (difficulty = number of operations)", ge=1)
    max_ops: int = setting(3, "most operations per expression (>= min_ops)", ge=1, le=12)
    max_operand: int = setting(9, "operands are drawn from 1..max_operand", ge=1, le=99)
    max_value: int = setting(30, "every intermediate value stays within +-max_value (>= max_operand)", ge=1)
    order_sensitive_share: float | None = setting(
        0.5,
        "share of questions whose answer changes when precedence or parentheses are ignored (null: as drawn, 0.29 at "
        "the default sizes; order-sensitive questions have 2+ operations)",
        ge=0.0,
        le=1.0,
    )
    train_size: int = setting(4000, "generated training problems", ge=1)
    eval_size: int = setting(400, "generated held-out problems", ge=1)
    probe_size: int = setting(100, "generated probe problems (Socratic-RL's viewpoint utility), never trained on", ge=0)
    misconception_rates: dict[str, float] = setting(
        default_factory=lambda: {"precedence": 0.5, "parentheses": 0.5},
        help="warm-start corpus: share of traces with each misconception (precedence, parentheses), each in [0, 1]",
    )
    slip_rate: float = setting(0.03, "warm-start corpus: share of traces with an arithmetic slip", ge=0.0, le=1.0)
    context_shares: dict[str, float] = setting(
        default_factory=lambda: dict(CONTEXT_SHARES),
        help="warm-start corpus: share of traces with each kind of context (" + ", ".join(CONTEXT_SHARES) + "), "
        "summing to at most 1; the rest are plain traces",
    )
    system_prompt: str | None = setting(
        None, "an answer instruction for pretrained models (system turn / preamble); null: none (the tiny model's)"
    )
    rl_ops: list[int] | None = setting(
        None,
        "the operation counts of the questions trained and evaluated on, in equal shares, where they differ from the "
        "warm-start corpus's min_ops..max_ops (which stays, and with it the student); held-out questions of a count "
        "the corpus has are its own held-out ones, longer ones are new; null: the corpus's",
    )

    name: ClassVar[str] = "arithmetic"
    answer_parsers: ClassVar[tuple[str, ...]] = ALL_PARSERS
    answer_format: ClassVar[str | None] = "a final line 'A: <integer>'"
    fits_tiny_model: ClassVar[bool] = True

    def validate(self) -> None:
        super().validate()
        self.check("max_ops", self.max_ops >= self.min_ops, f"must be >= task.min_ops ({self.min_ops})")
        self.check_range("max_value", ge=self.max_operand)
        self.check("order_sensitive_share", not self.order_sensitive_share or self.max_ops >= 2,
                   "needs task.max_ops >= 2 (one operation has no order to get wrong)")  # fmt: skip
        if self.rl_ops is not None:
            ops = self.rl_ops
            distinct = bool(ops) and len(set(ops)) == len(ops) and all(1 <= c <= 12 for c in ops)
            self.check("rl_ops", distinct, "must be distinct counts in 1..12, at least one")
            ordered = not self.order_sensitive_share or max(ops) >= 2
            self.check("rl_ops", ordered, "needs a count >= 2 while task.order_sensitive_share > 0 (one has no order)")
        unknown = sorted(set(self.context_shares) - set(CONTEXT_SHARES))
        self.check("context_shares", not unknown, f"unknown kind(s) {unknown}; known: {', '.join(CONTEXT_SHARES)}")
        shares = self.context_shares.values()
        self.check("context_shares", all(v >= 0 for v in shares) and sum(shares) <= 1.0,
                   f"shares must be >= 0 and sum to at most 1 (they sum to {sum(shares):g})")  # fmt: skip
        for kind, rate in self.misconception_rates.items():
            self.check(
                "misconception_rates",
                kind in ex.MISCONCEPTIONS and 0.0 <= rate <= 1.0,
                f"{kind}={rate} is not a misconception in {sorted(ex.MISCONCEPTIONS)} with a rate in [0, 1]",
            )

    def instruction(self) -> str:
        """None by default: the tiny model learnt the format from its warm-start, and a preamble it never saw would
        only confuse it. A pretrained chat model has to be told the ``A: n`` format (see qwen3_arithmetic)."""
        return self.system_prompt or ""

    def warmstart_fingerprint(self) -> dict:
        # the instruction is prompt rendering, not warm-start data: the cached student stays valid when it changes
        # rl_ops changes the RL questions only (the corpus is drawn from min_ops..max_ops and its own held-out splits)
        excluded = ("train_size", "system_prompt", "rl_ops")
        return {k: v for k, v in super().warmstart_fingerprint().items() if k not in excluded}

    # --- splits -----------------------------------------------------------------------------------------------
    def build(self) -> DatasetDict:
        from datasets import Dataset, DatasetDict

        from_files = self._rows_from_files()  # read first: a malformed file is refused before anything is generated
        rows = self._generated_rows() | from_files  # files replace the splits they name
        return DatasetDict({split: Dataset.from_list(split_rows) for split, split_rows in rows.items() if split_rows})

    def _generated_rows(self) -> dict[str, list[dict]]:
        corpus_rows = self._corpus_rows()
        return corpus_rows if self.rl_ops is None else self._rl_rows(corpus_rows)

    def _corpus_rows(self) -> dict[str, list[dict]]:
        # Held-out splits are drawn first, each without repeats, and the training split never contains their
        # expressions. The training split may repeat an expression: there are only 243 one-operation questions,
        # and without repeats the easy levels would be nearly absent from training.
        held_out: set[str] = set()
        rows = {}
        for offset, (split, size) in enumerate((("eval", self.eval_size), ("probe", self.probe_size))):
            rng = random.Random(f"{self.seed}-{split}-{offset}")
            rows[split] = [self.row(expr, i) for i, expr in enumerate(self._unique_expressions(rng, size, held_out))]
        rng = random.Random(f"{self.seed}-train-2")
        train = []
        while len(train) < self.train_size:
            expr = self.random_expression(rng)
            if ex.render(expr) not in held_out:
                train.append(self.row(expr, len(train)))
        return {"train": train, **rows}

    def _rl_rows(self, corpus_rows: dict[str, list[dict]]) -> dict[str, list[dict]]:
        """The splits of ``rl_ops``: each count in an equal share. A held-out question of a count within
        min_ops..max_ops is one of the corpus's held-out questions (the warm-start never saw it); a longer one is new
        (no warm-start trace has that many operations). Training questions avoid every held-out one."""
        ops = self.rl_ops or []
        held_out = {row["expression"] for split in ("eval", "probe") for row in corpus_rows[split]}
        rows: dict[str, list[dict]] = {}
        for split, size in (("eval", self.eval_size), ("probe", self.probe_size)):
            rng = random.Random(f"{self.seed}-{split}-rl-{ops}")
            known = {c: [r for r in corpus_rows[split] if r["difficulty"] == c] for c in ops if c <= self.max_ops}
            per_count = min([size // len(ops), *map(len, known.values())])
            chosen = [row for c in ops if c in known for row in known[c][:per_count]]
            for count in (c for c in ops if c not in known):
                new = self._unique_expressions(rng, per_count, held_out, ops=count)
                chosen += [self.row(expr, 0) for expr in new]
            rng.shuffle(chosen)
            rows[split] = [{**row, "index": i} for i, row in enumerate(chosen)]
        held_out |= {row["expression"] for split in rows.values() for row in split}
        rng = random.Random(f"{self.seed}-train-rl-{ops}")
        train: list[dict] = []
        while len(train) < self.train_size:
            expr = self.random_expression(rng, ops=rng.choice(ops))
            if ex.render(expr) not in held_out:
                train.append(self.row(expr, len(train)))
        return {"train": train, **rows}

    def _unique_expressions(
        self, rng: random.Random, size: int, seen: set[str], ops: int | None = None
    ) -> list[ex.Expr]:
        found: list[ex.Expr] = []
        tries = 0
        while len(found) < size and tries < size * _MAX_SAMPLING_TRIES:
            tries += 1
            expr = self.random_expression(rng, ops)
            text = ex.render(expr)
            if text not in seen:
                seen.add(text)
                found.append(expr)
        if len(found) < size:
            raise UserError(
                f"task.arithmetic: only {len(found)} distinct held-out expressions for the requested sizes",
                "lower task.eval_size / probe_size, raise task.max_ops or set task.order_sensitive_share=null",
            )
        return found

    def random_expression(self, rng: random.Random, ops: int | None = None) -> ex.Expr:
        """An expression whose every intermediate value (also under the misconceptions) stays within ``max_value``:
        the testbed is about the order of operations, not about multi-digit multiplication. A share
        ``order_sensitive_share`` of them has an order of operations that decides the answer (as drawn, only 29% do:
        a third of the questions are single operations, and most others read the same in any order). ``ops`` fixes
        the number of operations (else drawn from min_ops..max_ops at every try)."""
        share = self.order_sensitive_share
        sensitive = None if share is None else rng.random() < share
        for _ in range(_MAX_SAMPLING_TRIES * 500):
            count = rng.randint(self.min_ops, self.max_ops) if ops is None else ops
            expr = ex.random_expression(rng, count, self.max_operand)
            traces = [ex.correct_steps(expr), *(steps(expr) for steps in ex.MISCONCEPTIONS.values())]
            if any(abs(step.result) > self.max_value for trace in traces for step in trace):
                continue
            decided_by_order = any(trace[-1].result != traces[0][-1].result for trace in traces[1:])
            if sensitive is None or sensitive == decided_by_order:  # as misconception_of, from the traces at hand
                return expr
        raise UserError(
            f"task.arithmetic: no {'order-sensitive ' if sensitive else ''}expression of {self.min_ops}-{self.max_ops} "
            f"operations keeps every value within +-{self.max_value} in {_MAX_SAMPLING_TRIES * 500} draws",
            "raise task.max_value, lower task.min_ops, or set task.order_sensitive_share=null",
        )

    def row(self, expr: ex.Expr, index: int) -> dict:
        text = ex.render(expr)
        return {
            "prompt": prompt_for(text),
            "answer": str(ex.evaluate(expr)),
            "reference": ex.format_trace(ex.correct_steps(expr)),
            "difficulty": ex.count_ops(expr),
            "expression": text,
            "index": index,
        }

    def _rows_from_files(self) -> dict[str, list[dict]]:
        rows: dict[str, list[dict]] = {split: [] for split in self.data_files or {}}
        for split, path in (self.data_files or {}).items():
            # JSON Lines (any suffix) or a JSON array, or parquet: each bad row named by its file and line
            located = read_file(path) if Path(path).suffix.lower() == ".parquet" else read_json(path, "arithmetic")
            for where, record in located:
                rows[split].append(self.row(self._parse_row(record, where), len(rows[split])))
        return rows

    @staticmethod
    def _parse_row(record: dict, where: str) -> ex.Expr:
        """The row's expression; its ``answer``, where given (not null), must be the expression's value."""
        expression = text(record, where, "arithmetic", "expression")
        try:
            expr = ex.parse(expression)
        except ex.ParseError as err:
            raise UserError(
                f"{where}: malformed arithmetic row: 'expression' {expression!r} does not parse ({err})",
                'each line must be a JSON object like {"expression": "3+4*2"} (digits, + - *, parentheses)',
            ) from None
        answer = optional_text(record, where, "arithmetic", "answer")
        if answer is not None and answer.strip() != str(ex.evaluate(expr)):
            raise UserError(
                f"{where}: answer {answer!r} does not equal {ex.render(expr)} = {ex.evaluate(expr)}",
                "fix or drop the row's answer field",
            )
        return expr

    # --- verifier ---------------------------------------------------------------------------------------------
    def verify_strict(self, completion: str, answer: str) -> Verdict:
        got = extract_answer(completion if isinstance(completion, str) else str(completion))
        if got is None:
            return Verdict(0.0, "format")  # no final 'A: <integer>' line
        if got == answer.strip():
            return Verdict(1.0, "correct", got)
        return Verdict(0.0, "wrong", got)

    # --- warm-start corpus ------------------------------------------------------------------------------------
    def misconception_of(self, expr: ex.Expr) -> list[str]:
        """The misconceptions that change this expression's answer."""
        value = ex.evaluate(expr)
        return [kind for kind, steps in ex.MISCONCEPTIONS.items() if steps(expr)[-1].result != value]

    def warmstart_examples(self, size: int, seed: int) -> list[WarmstartExample]:
        rng = random.Random(f"{self.seed}-warmstart-{seed}")
        generated = self._corpus_rows()  # not rl_ops: the corpus, and so the student, stay
        held_out = {row["expression"] for split in ("eval", "probe") for row in generated[split]}
        kinds, shares = zip(*self.context_shares.items(), strict=True) if self.context_shares else ((), ())
        examples = []
        while len(examples) < size:
            expr = self.random_expression(rng)
            text = ex.render(expr)
            if text in held_out:
                continue
            draw, kind = rng.random(), "plain"
            for candidate, share in zip(kinds, shares, strict=True):
                if draw < share:
                    kind = candidate
                    break
                draw -= share
            examples.append(self._example(kind, expr, text, rng))
        return examples

    def _example(self, kind: str, expr: ex.Expr, text: str, rng: random.Random) -> WarmstartExample:
        """One trace of the corpus. Context segments (prompt, hints, a wrong attempt) are masked from the loss; the
        student's own attempt is trained. Every context but the uninformative retry line is followed by a correct
        attempt: the student learns to act on what the context says, not to write contexts."""
        right = ex.format_trace(ex.correct_steps(expr))
        if kind == "plain":
            return [(prompt_for(text), False), (self._student_trace(expr, rng), True)]
        if kind in ("retry", "fixed_retry"):
            wrong_kind, wrong = self._wrong_steps(expr, rng)
            if kind == "retry":
                line, second = guidance_for(wrong_kind, wrong, ex.correct_steps(expr), expr, rng), right
            else:  # a line that says nothing: the second attempt is a fresh draw of the student
                line, second = FIXED_RETRY, self._student_trace(expr, rng)
            return [(prompt_for(text), False), (ex.format_trace(wrong), False), (line + "\n", False), (second, True)]
        return [(prompt_for(text, self._context_line(kind, expr, right, rng)), False), (right, True)]

    def _context_line(self, kind: str, expr: ex.Expr, right: str, rng: random.Random) -> str:
        """The context before the question: a principle (Socratic-RL's viewpoint), a teacher's critique of an
        earlier (unseen) attempt, the environment's verdict on one, or a correct solution (SDPO / VPD's feedback
        sources in their plain layout)."""
        if kind == "principle":
            return rng.choice(PRINCIPLES[rng.choice(self.misconception_of(expr) or list(PRINCIPLES))])
        if kind == "solution":
            return PLAIN_SOLUTION_NOTE.format(successful_previous_attempt=right.rstrip("\n"))
        wrong_kind, wrong = self._wrong_steps(expr, rng)
        if kind == "critique":
            return guidance_for(wrong_kind, wrong, ex.correct_steps(expr), expr, rng)
        if rng.random() < 0.5:  # kind == "verdict": VPD also tells a successful attempt that it is correct
            return environment_feedback("correct", str(ex.evaluate(expr)))
        return environment_feedback("wrong", str(wrong[-1].result))

    def _wrong_steps(self, expr: ex.Expr, rng: random.Random) -> tuple[str, list[ex.Step]]:
        """A wrong attempt the student makes: a misconception that changes the answer, a slip or a miscopy."""
        kind = rng.choice([*self.misconception_of(expr), *OWN_ERRORS])
        if kind in ex.MISCONCEPTIONS:
            return kind, ex.MISCONCEPTIONS[kind](expr)
        if kind == "copy":
            miscopied = self._copy_steps(expr, rng)
            if miscopied is not None:
                return kind, miscopied
        return "slip", self._slip_steps(expr, rng)

    def _copy_steps(self, expr: ex.Expr, rng: random.Random) -> list[ex.Step] | None:
        """A trace with one miscopied operand (another number of the expression, or one off by 1 or 2) and the error
        carried forward, or None when no such trace reads as a copy error within ``max_value``."""
        at = rng.randrange(ex.count_ops(expr))
        right = ex.correct_steps(expr)[at]
        side = rng.choice(("left", "right"))
        meant = right.left if side == "left" else right.right
        numbers = {int(n) for n in re.findall(r"\d+", ex.render(expr))} | {meant + d for d in (-2, -1, 1, 2)}
        candidates = sorted(numbers - {meant})
        for number in rng.sample(candidates, k=len(candidates)):
            steps = ex.correct_steps(expr, slip_at=at, miscopy=(side, number))
            within = all(abs(step.result) <= self.max_value for step in steps)
            if within and diagnose(expr, ex.format_trace(steps)).error == "copy":
                return steps
        return None

    def _student_trace(self, expr: ex.Expr, rng: random.Random) -> str:
        """What the warm-started student writes without help: sometimes a misconception, rarely a slip."""
        for kind in self.misconception_of(expr):
            if rng.random() < self.misconception_rates.get(kind, 0.0):
                return ex.format_trace(ex.MISCONCEPTIONS[kind](expr))
        if rng.random() < self.slip_rate:
            return ex.format_trace(self._slip_steps(expr, rng))
        return ex.format_trace(ex.correct_steps(expr))

    @staticmethod
    def _slip_steps(expr: ex.Expr, rng: random.Random) -> list[ex.Step]:
        return ex.correct_steps(expr, slip_at=rng.randrange(ex.count_ops(expr)), slip_by=rng.choice((-2, -1, 1, 2)))


def guidance_for(kind: str, wrong: list[ex.Step], right: list[ex.Step], expr: ex.Expr, rng: random.Random) -> str:
    """A guidance line for a wrong trace, pointing at its first step that differs from the correct one (for a copy
    error, at the operation the teacher's diagnosis expects there, as the rule teacher's hint does)."""
    first = next((i for i, (w, r) in enumerate(zip(wrong, right, strict=False)) if w != r), 0)
    step, expected = wrong[first], right[first]
    if kind == "copy":
        diagnosis = diagnose(expr, ex.format_trace(wrong))
        expected = diagnosis.expected or expected
        if diagnosis.step is not None:
            first = diagnosis.step - 1
            step = wrong[first]
    inner = _first_parenthesised(expr) or ex.render(expr)
    template = rng.choice(GUIDANCE[kind])
    if template == GUIDANCE["slip"][1] and first == len(right) - 1:
        template = SLIP_IN_LAST_STEP
    return template.format(
        value=ex.apply(step.op, step.left, step.right),
        n=first + 1,
        op=step.op,
        wrote=f"{step.left}{step.op}{step.right}",
        expected=f"{expected.left}{expected.op}{expected.right}",
        left=step.left,
        right=step.right,
        result=step.result,
        inner=inner,
    )


def _first_parenthesised(expr: ex.Expr) -> str | None:
    match = re.search(r"\(([^()]*)\)", ex.render(expr))
    return match.group(1) if match else None
