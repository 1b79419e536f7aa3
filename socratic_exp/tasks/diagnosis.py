"""Diagnosing an arithmetic chain of thought: the first wrong step and the kind of error.

The student's trace is one ``a op b=c`` line per operation and a final ``A: n`` line. The diagnosis replays it
against the expression: each step must combine two numbers that the current (partly reduced) expression really
combines next, in any order that respects precedence and parentheses, and must compute the right value. The
first step that does not is classified:

- ``precedence``: it combines neighbouring numbers in the wrong order (``2+3*4`` -> ``2+3``; or right-to-left);
- ``parentheses``: it combines numbers across a bracket (``2*(3+4)`` -> ``2*3``);
- ``slip``: a legal operation with a wrong result (``3*4=13``);
- ``copy``: numbers that are not in the expression, or an ``A:`` line that differs from the last step's result;
- ``no_answer``: no final ``A:`` line;
- ``format``: nothing that reads as a trace.

Nothing is evaluated from model text except integers matched by bounded regular expressions.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Literal

from socratic_exp.tasks import expressions as ex

ErrorClass = Literal["precedence", "parentheses", "slip", "copy", "no_answer", "format"]

_STEP = re.compile(r"^\s*(-?\d{1,12})\s*([-+*])\s*(-?\d{1,12})\s*=\s*(-?\d{1,24})\s*$")
_ANSWER = re.compile(r"^\s*A:\s*(-?\d{1,40})?\s*$")
MAX_TRACE_CHARS = 4096
MAX_STEPS = 64


@dataclasses.dataclass(frozen=True)
class Diagnosis:
    """``error`` is None for a right trace; ``step`` is the 1-based index of the first wrong step line (None
    when the error is not in a step line)."""

    error: ErrorClass | None
    step: int | None = None
    wrote: ex.Step | None = None  # the student's wrong step
    expected: ex.Step | None = None  # the operation it should have done there (for slips and miscopies)
    order_only: bool = False  # a precedence error between + and - (left-to-right order), not around *
    last_step: bool = False  # a slip in the expression's last operation, whose right value is the answer


def diagnose(expr: ex.Expr, completion: str) -> Diagnosis:
    steps, answer, has_answer_line, unreadable = _read_trace(completion)
    if not steps and not has_answer_line:
        return Diagnosis("format")
    state: ex.Expr = expr
    for number, step in enumerate(steps, 1):
        if isinstance(state, ex.Num):
            return Diagnosis("format", number, step)  # more steps than operations
        legal = _reducible(state)
        same = [node for node in legal if _same_operation(node, step)]
        if same:
            value = ex.apply(step.op, step.left, step.right)
            if step.result != value:
                expected = ex.Step(step.left, step.op, step.right, value)
                return Diagnosis("slip", number, step, expected, last_step=same[0] is state)
            state = _replace(state, same[0], ex.Num(value))
            continue
        for left, op, right, crosses in _neighbours(state):
            if (left, op, right) == (step.left, step.op, step.right):
                if crosses:
                    return Diagnosis("parentheses", number, step)
                return Diagnosis("precedence", number, step, order_only="*" not in _ops_near(state, step))
        expected = next((n for n in legal if n.op == step.op), legal[0])
        target = ex.Step(expected.left.value, expected.op, expected.right.value, ex.evaluate(expected))
        return Diagnosis("copy", number, step, target)
    final = state.value if isinstance(state, ex.Num) else None
    if not has_answer_line:
        return Diagnosis("no_answer")
    if final is None:
        # Stopped early (or skipped writing steps): the trace does not reach one number.
        return Diagnosis("format" if unreadable or not steps else "copy", len(steps) or None)
    return Diagnosis("copy" if answer != final else None)


def _read_trace(completion: str) -> tuple[list[ex.Step], int | None, bool, bool]:
    """Step lines up to the last ``A:`` line (the verifier reads the last one too), that line's value, whether
    there was one, and whether unreadable lines were skipped."""
    lines = completion[:MAX_TRACE_CHARS].splitlines()
    answer_at = max((i for i, line in enumerate(lines) if _ANSWER.match(line)), default=None)
    body = lines if answer_at is None else lines[:answer_at]
    steps, unreadable = [], False
    for line in body:
        match = _STEP.match(line)
        if match:
            left, op, right, result = match.groups()
            steps.append(ex.Step(int(left), op, int(right), int(result)))
        elif line.strip():
            unreadable = True
    answer = None
    if answer_at is not None:
        value = _ANSWER.match(lines[answer_at]).group(1)  # type: ignore[union-attr]
        answer = int(value) if value else None
    return steps[:MAX_STEPS], answer, answer_at is not None, unreadable


def _same_operation(node: ex.BinOp, step: ex.Step) -> bool:
    """The step computes this node (the operands of + and * in either order)."""
    left, right = node.left.value, node.right.value  # type: ignore[union-attr]
    if node.op != step.op:
        return False
    return (step.left, step.right) == (left, right) or (node.op != "-" and (step.right, step.left) == (left, right))


def _reducible(expr: ex.Expr) -> list[ex.BinOp]:
    """Operations whose two operands are already numbers: the legal next steps."""
    if isinstance(expr, ex.Num):
        return []
    if isinstance(expr.left, ex.Num) and isinstance(expr.right, ex.Num):
        return [expr]
    return _reducible(expr.left) + _reducible(expr.right)


def _replace(expr: ex.Expr, target: ex.BinOp, new: ex.Num) -> ex.Expr:
    if expr is target:
        return new
    if isinstance(expr, ex.Num):
        return expr
    left = _replace(expr.left, target, new)
    if left is not expr.left:
        return ex.BinOp(expr.op, left, expr.right)
    right = _replace(expr.right, target, new)
    return expr if right is expr.right else ex.BinOp(expr.op, left, right)


def _tokens(expr: ex.Expr) -> list[int | str]:
    """The expression as written: numbers, operators and brackets."""
    if isinstance(expr, ex.Num):
        return [expr.value]
    left, right = _tokens(expr.left), _tokens(expr.right)
    if ex._needs_parens(expr, expr.left, "left"):
        left = ["(", *left, ")"]
    if ex._needs_parens(expr, expr.right, "right"):
        right = ["(", *right, ")"]
    return [*left, expr.op, *right]


def _neighbours(expr: ex.Expr) -> list[tuple[int, str, int, bool]]:
    """Every ``number op number`` written next to each other, and whether a bracket stands between them."""
    tokens = _tokens(expr)
    found = []
    for i, token in enumerate(tokens):
        if not isinstance(token, int):
            continue
        j, crosses = i + 1, False
        while j < len(tokens) and tokens[j] in ("(", ")"):
            crosses, j = True, j + 1
        if j >= len(tokens):
            continue
        op, j = tokens[j], j + 1
        while j < len(tokens) and tokens[j] in ("(", ")"):
            crosses, j = True, j + 1
        if j < len(tokens) and isinstance(tokens[j], int):
            found.append((token, str(op), tokens[j], crosses))
    return found


def _ops_near(expr: ex.Expr, step: ex.Step) -> set[str]:
    """The operators written right beside the student's pair (what it should have respected)."""
    tokens = [t for t in _tokens(expr) if t not in ("(", ")")]
    near: set[str] = set()
    for i in range(0, len(tokens) - 2, 2):
        if (tokens[i], tokens[i + 1], tokens[i + 2]) == (step.left, step.op, step.right):
            near.update(str(tokens[j]) for j in (i - 1, i + 3) if 0 <= j < len(tokens))
    return near
