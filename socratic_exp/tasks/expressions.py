"""Integer arithmetic expressions: generation, a safe parser, and step-by-step traces.

Nothing here ever calls ``eval``: model text is only tokenised by a small regular-expression lexer and parsed
by a bounded recursive-descent parser. The traces are the testbed's chain of thought, one ``a op b=c`` line
per operation, and come in a correct flavour and in the two misconceptions the warm-start teaches
(ignoring operator precedence, ignoring parentheses).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

OPERATORS = ("+", "-", "*")
_PRECEDENCE = {"+": 1, "-": 1, "*": 2}
_TOKEN = re.compile(r"\s*(\d{1,12}|[-+*()])")
MAX_EXPRESSION_CHARS = 256


@dataclass(frozen=True)
class Num:
    value: int


@dataclass(frozen=True)
class BinOp:
    op: str
    left: Num | BinOp
    right: Num | BinOp


Expr = Num | BinOp


@dataclass(frozen=True)
class Step:
    """One line of a trace: ``left op right = result``."""

    left: int
    op: str
    right: int
    result: int

    def __str__(self) -> str:
        return f"{self.left}{self.op}{self.right}={self.result}"


def apply(op: str, left: int, right: int) -> int:
    if op == "+":
        return left + right
    if op == "-":
        return left - right
    if op == "*":
        return left * right
    raise ValueError(f"unknown operator {op!r}")


def evaluate(expr: Expr) -> int:
    if isinstance(expr, Num):
        return expr.value
    return apply(expr.op, evaluate(expr.left), evaluate(expr.right))


def count_ops(expr: Expr) -> int:
    return 0 if isinstance(expr, Num) else 1 + count_ops(expr.left) + count_ops(expr.right)


def _needs_parens(parent: BinOp, child: Expr, side: str) -> bool:
    """Whether ``child`` must be wrapped to keep the tree under usual precedence and left associativity."""
    if isinstance(child, Num):
        return False
    parent_prec, child_prec = _PRECEDENCE[parent.op], _PRECEDENCE[child.op]
    return child_prec < parent_prec if side == "left" else child_prec <= parent_prec


def render(expr: Expr) -> str:
    if isinstance(expr, Num):
        return str(expr.value)
    left, right = render(expr.left), render(expr.right)
    if _needs_parens(expr, expr.left, "left"):
        left = f"({left})"
    if _needs_parens(expr, expr.right, "right"):
        right = f"({right})"
    return f"{left}{expr.op}{right}"


def random_expression(rng: random.Random, num_ops: int, max_operand: int = 9) -> Expr:
    """A uniformly shaped random tree with ``num_ops`` operators and operands in 1..max_operand."""
    if num_ops == 0:
        return Num(rng.randint(1, max_operand))
    left_ops = rng.randint(0, num_ops - 1)
    return BinOp(
        rng.choice(OPERATORS),
        random_expression(rng, left_ops, max_operand),
        random_expression(rng, num_ops - 1 - left_ops, max_operand),
    )


class ParseError(ValueError):
    pass


def tokenize(text: str) -> list[str]:
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ParseError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    tokens, pos, text = [], 0, text.rstrip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise ParseError(f"unexpected character {text[pos]!r} at {pos}")
        tokens.append(match.group(1))
        pos = match.end()
    return tokens


def parse(text: str) -> Expr:
    """Parse ``text`` (digits, + - *, parentheses) into a tree; raises ParseError on anything else."""
    tokens = tokenize(text)
    expr, rest = _parse_sum(tokens, 0, depth=0)
    if rest != len(tokens):
        raise ParseError(f"unexpected token {tokens[rest]!r}")
    return expr


def _parse_sum(tokens: list[str], i: int, depth: int) -> tuple[Expr, int]:
    left, i = _parse_product(tokens, i, depth)
    while i < len(tokens) and tokens[i] in "+-":
        op = tokens[i]
        right, i = _parse_product(tokens, i + 1, depth)
        left = BinOp(op, left, right)
    return left, i


def _parse_product(tokens: list[str], i: int, depth: int) -> tuple[Expr, int]:
    left, i = _parse_atom(tokens, i, depth)
    while i < len(tokens) and tokens[i] == "*":
        right, i = _parse_atom(tokens, i + 1, depth)
        left = BinOp("*", left, right)
    return left, i


def _parse_atom(tokens: list[str], i: int, depth: int) -> tuple[Expr, int]:
    if depth > 32:
        raise ParseError("parentheses nested too deeply")
    if i >= len(tokens):
        raise ParseError("expression ends early")
    token = tokens[i]
    if token == "(":
        expr, i = _parse_sum(tokens, i + 1, depth + 1)
        if i >= len(tokens) or tokens[i] != ")":
            raise ParseError("missing ')'")
        return expr, i + 1
    if token.isdigit():
        return Num(int(token)), i + 1
    raise ParseError(f"unexpected token {token!r}")


# --- traces -------------------------------------------------------------------------------------------------


def correct_steps(
    expr: Expr, slip_at: int | None = None, slip_by: int = 0, miscopy: tuple[str, int] | None = None
) -> list[Step]:
    """The textbook order: innermost-leftmost parentheses first, then * before + and -, left to right.

    Step ``slip_at`` (0-based) can go wrong, and the error carries forward: off by ``slip_by`` (an arithmetic slip),
    or reading ``miscopy = (side, number)``, a wrong number for its left or right operand (a copy error).
    """
    steps: list[Step] = []
    _reduce(expr, steps, slip_at, slip_by, miscopy)
    return steps


def _reduce(expr: Expr, steps: list[Step], slip_at: int | None, slip_by: int, miscopy: tuple[str, int] | None) -> int:
    # A post-order walk of the precedence-respecting tree visits operations in exactly the textbook order.
    if isinstance(expr, Num):
        return expr.value
    left = _reduce(expr.left, steps, slip_at, slip_by, miscopy)
    right = _reduce(expr.right, steps, slip_at, slip_by, miscopy)
    if len(steps) == slip_at and miscopy is not None:
        left, right = (miscopy[1], right) if miscopy[0] == "left" else (left, miscopy[1])
    result = apply(expr.op, left, right) + (slip_by if len(steps) == slip_at else 0)
    steps.append(Step(left, expr.op, right, result))
    return result


def _flat(expr: Expr, keep_parens: bool) -> list:
    """Flatten to a token list; parenthesised subtrees stay nested lists when ``keep_parens``."""
    if isinstance(expr, Num):
        return [expr.value]
    left, right = _flat(expr.left, keep_parens), _flat(expr.right, keep_parens)
    if keep_parens and _needs_parens(expr, expr.left, "left"):
        left = [left]
    if keep_parens and _needs_parens(expr, expr.right, "right"):
        right = [right]
    return [*left, expr.op, *right]


def _fold_left(tokens: list, steps: list[Step]) -> int:
    """Evaluate a flat token list strictly left to right; a nested list (parentheses) is worked out on reaching it."""

    def value(token: int | list) -> int:
        return _fold_left(token, steps) if isinstance(token, list) else token

    acc = value(tokens[0])
    for op, token in zip(tokens[1::2], tokens[2::2], strict=True):
        right = value(token)
        result = apply(op, acc, right)
        steps.append(Step(acc, op, right, result))
        acc = result
    return acc


def _with_precedence(tokens: list, steps: list[Step]) -> int:
    """Evaluate a flat token list with * first (used once parentheses have been dropped)."""
    values = list(tokens)
    i = 1
    while i < len(values):
        if values[i] == "*":
            result = apply("*", values[i - 1], values[i + 1])
            steps.append(Step(values[i - 1], "*", values[i + 1], result))
            values[i - 1 : i + 2] = [result]
        else:
            i += 2
    return _fold_left(values, steps)


def precedence_ignored_steps(expr: Expr) -> list[Step]:
    """Misconception 1: respect parentheses but evaluate everything else strictly left to right."""
    steps: list[Step] = []
    _fold_left(_flat(expr, keep_parens=True), steps)
    return steps


def parentheses_ignored_steps(expr: Expr) -> list[Step]:
    """Misconception 2: drop the parentheses, then apply the usual precedence."""
    steps: list[Step] = []
    _with_precedence(_flat(expr, keep_parens=False), steps)
    return steps


MISCONCEPTIONS = {"precedence": precedence_ignored_steps, "parentheses": parentheses_ignored_steps}


def format_trace(steps: list[Step]) -> str:
    """The chain of thought the student writes: one step per line, then the answer line."""
    lines = [str(step) for step in steps]
    lines.append(f"A: {steps[-1].result}" if steps else "A: ")
    return "\n".join(lines) + "\n"
