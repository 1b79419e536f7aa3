"""Answer verifiers shared by the benchmark tasks: integers, math expressions, option letters, yes/no.

Every verifier returns a :class:`Verdict` whose ``reason`` is one of :data:`REASONS` (machine-readable: teachers
and environment feedback read it), and whose ``extracted`` answer is ``None`` exactly when no answer could be read
(``format`` / ``empty`` / ``truncated``), which is what evaluation reports as ``eval/no_answer``.

Three readings of an answer (``task.answer_parser``): ``strict``, the task's own format (each task's
``verify_strict``); ``flexible``, the way lm-evaluation-harness's "flexible-extract" reads GSM8K (``flexible``
below); ``math_verify``, math-verify's own extraction from the whole completion (``verify_with_math_verify``).

Nothing here executes model text. Only the tail of a completion is searched (answers come last), extracted
answers are capped in length, numbers are compared as exact fractions, and LaTeX goes to ``math-verify`` with its
own parsing and comparison timeouts (which need the main thread; elsewhere a normalised string comparison is used).
"""

from __future__ import annotations

import dataclasses
import functools
import re
import threading
from fractions import Fraction


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The verifier's judgement: a score in [0, 1], a short reason, and the answer it extracted (if any)."""

    score: float
    reason: str
    extracted: str | None = None


STRICT, FLEXIBLE, MATH_VERIFY = "strict", "flexible", "math_verify"  # task.answer_parser: how answers are read

CORRECT, WRONG, FORMAT, EMPTY, TRUNCATED = "correct", "wrong", "format", "empty", "truncated"
REASONS = (CORRECT, WRONG, FORMAT, EMPTY, TRUNCATED)
NO_ANSWER_REASONS = frozenset({FORMAT, EMPTY, TRUNCATED})
READ = ""  # the extraction helpers' reason when an answer was read (the verifier then compares it)
ALL_PARSERS = (STRICT, FLEXIBLE, MATH_VERIFY)  # the readings of numbers and math answers (choices: strict alone)
FINAL_ANSWER_FORMS = "a final answer in \\boxed{}, <answer> tags, a '####' or 'Answer:' line, or 'the answer is'"

TAIL_CHARS = 20_000  # answers come last; searching only the tail bounds the work on huge completions
MAX_ANSWER_CHARS = 1_000  # a longer "answer" is not an answer (and would be slow to parse)
MAX_DIGITS = 60
MATH_TIMEOUT_S = 2  # math-verify's own (SIGALRM) timeouts, per parse and per comparison

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*")
_ANSWER_OPEN = re.compile(r"<answer>", re.IGNORECASE)
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)
_REASONING_OPEN = re.compile(r"<reasoning>", re.IGNORECASE)
_REASONING_CLOSE = re.compile(r"</reasoning>", re.IGNORECASE)
_HASHES = re.compile(r"####[ \t]*([^\n]*)")
_ANSWER_LINE = re.compile(r"(?:^|\n)[ \t*]*(?:final )?answer[ \t*]*:[ \t*]*([^\n]*)", re.IGNORECASE)
_ANSWER_IS = re.compile(r"answer is[ \t:]*([^\n]*)", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:/\d+)?")
_PLAIN_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_LETTER = re.compile(r"^[\s*(\[{'\"]*(?:option\s+|choice\s+)?([A-Z])(?![A-Za-z])", re.IGNORECASE)
_YES_NO = {"yes": "Yes", "true": "Yes", "no": "No", "false": "No"}


def _tail(completion: object) -> str:
    text = completion if isinstance(completion, str) else str(completion)
    return text[-TAIL_CHARS:]


# --- extraction --------------------------------------------------------------------------------------------------
def last_boxed(text: str) -> tuple[str | None, bool]:
    """The content of the last ``\\boxed{...}`` and whether one was opened but never closed (truncated)."""
    matches = list(_BOXED.finditer(text))
    if not matches:
        return None, False
    start = matches[-1].end()
    if start >= len(text):
        return None, True
    if text[start] != "{":  # \boxed 5
        token = re.match(r"[^\s$]+", text[start:])
        return (token.group(0) if token else None), False
    depth = 0
    for pos in range(start, len(text)):
        char = text[pos]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : pos], False
    return None, True


def last_answer_tag(text: str) -> tuple[str | None, bool]:
    """The content of the last ``<answer>...</answer>`` and whether an ``<answer>`` was left open (truncated)."""
    matches = list(_ANSWER_TAG.finditer(text))
    opened = list(_ANSWER_OPEN.finditer(text))
    if opened and (not matches or opened[-1].start() > matches[-1].start()):
        return None, True
    return (matches[-1].group(1) if matches else None), False


def final_answer(completion: object) -> tuple[str | None, str]:
    """The final answer of a free-form solution, or ``(None, reason)``.

    Looked for in this order: the last ``\\boxed{}``, the last ``<answer>`` tag, a ``#### N`` line (GSM8K's own
    format), an ``Answer: ...`` line (DAPO's), ``... answer is X``.
    """
    text = _tail(completion)
    if not text.strip():
        return None, EMPTY
    boxed, boxed_open = last_boxed(text)
    if boxed is not None:
        return _capped(boxed)
    tagged, tag_open = last_answer_tag(text)
    if tagged is not None:
        inner, _ = last_boxed(tagged)
        return _capped(inner if inner is not None else tagged)
    if boxed_open or tag_open:
        return None, TRUNCATED
    for pattern in (_HASHES, _ANSWER_LINE, _ANSWER_IS):
        found = pattern.findall(text)
        if found and found[-1].strip():
            return _capped(found[-1].strip().rstrip(".").strip())
    return None, FORMAT


def _capped(answer: str) -> tuple[str | None, str]:
    answer = answer.strip()
    if not answer:
        return None, FORMAT
    if len(answer) > MAX_ANSWER_CHARS:
        return None, FORMAT
    return answer, READ


# --- numbers -----------------------------------------------------------------------------------------------------
def parse_number(text: str) -> Fraction | None:
    """The last number in ``text`` as an exact fraction (``1,000`` and ``$18.50`` included), else None."""
    cleaned = _THOUSANDS.sub("", text)
    cleaned = cleaned.replace("\\!", "").replace("\\,", "").replace("{,}", "")
    found = _NUMBER.findall(cleaned)
    if not found or len(found[-1]) > MAX_DIGITS:
        return None
    try:
        return Fraction(found[-1])
    except (ValueError, ZeroDivisionError):
        return None


def gold_number(answer: str) -> Fraction | None:
    """A gold answer as a number: ``18``, ``1,000``, ``27.0``, GSM8K's whole solution ending in ``#### 18``."""
    text = str(answer)
    if "####" in text:
        text = text.rsplit("####", 1)[1]
    return parse_number(text)


def verify_number(completion: object, answer: str) -> Verdict:
    """Numeric answers (GSM8K, MultiArith): the final answer's last number equals the gold value exactly."""
    extracted, reason = final_answer(completion)
    if extracted is None:
        return Verdict(0.0, reason)
    got = parse_number(extracted)
    return Verdict(0.0, FORMAT) if got is None else _compared(got, gold_number(answer))


def verify_flexible(completion: object, answer: str, strict: Verdict) -> Verdict:
    """Numbers read leniently, given the strict parser's verdict: the strict reading where it read one; else, in
    this order, the last ``\\boxed{}``, the last "the answer is N", the last number anywhere in the completion
    (lm-evaluation-harness's flexible extract for GSM8K takes the last number alone; strict first is our reading,
    so that the two agree wherever the format is followed). ``no answer`` only for a completion without a number."""
    if strict.extracted is not None or strict.reason == EMPTY:
        return strict
    text = _tail(completion)
    boxed, _ = last_boxed(text)
    said = _ANSWER_IS.findall(text)
    said_number = _NUMBER.search(_THOUSANDS.sub("", said[-1])) if said else None  # the first number after "is"
    for candidate in (boxed, said_number.group(0) if said_number else None, text):
        got = parse_number(candidate) if candidate else None
        if got is not None:
            return _compared(got, gold_number(answer))
    return Verdict(0.0, FORMAT)


def _compared(got: Fraction, want: Fraction | None) -> Verdict:
    shown = str(got.numerator) if got.denominator == 1 else f"{float(got):g}"
    return Verdict(1.0, CORRECT, shown) if want is not None and got == want else Verdict(0.0, WRONG, shown)


# --- math expressions --------------------------------------------------------------------------------------------
def verify_math(completion: object, answer: str) -> Verdict:
    """LaTeX / math answers (MATH-500, AIME, AMC, DAPO, OpenMath) compared with ``math-verify``."""
    extracted, reason = final_answer(completion)
    if extracted is None:
        return Verdict(0.0, reason)
    return Verdict(1.0, CORRECT, extracted) if math_equal(str(answer), extracted) else Verdict(0.0, WRONG, extracted)


def verify_math_flexible(completion: object, answer: str, strict: Verdict) -> Verdict:
    """Math answers read leniently: the strict reading where it read one, else the last number of the completion
    compared as math (``verify_flexible``'s last resort; LaTeX beyond a number is math-verify's to read)."""
    if strict.extracted is not None or strict.reason == EMPTY:
        return strict
    found = _NUMBER.findall(_THOUSANDS.sub("", _tail(completion)))
    if not found or len(found[-1]) > MAX_DIGITS:
        return Verdict(0.0, FORMAT)
    return Verdict(1.0, CORRECT, found[-1]) if math_equal(str(answer), found[-1]) else Verdict(0.0, WRONG, found[-1])


def verify_with_math_verify(completion: object, answer: str) -> Verdict:
    """math-verify end to end: its extraction from the whole completion (the last ``\\boxed{}``, LaTeX or plain
    expression, as math-verify finds it) compared with the gold answer by its ``verify``. Outside the main thread
    (math-verify's timeouts need it) the flexible reading of a number stands in."""
    text = _tail(completion)
    if not text.strip():
        return Verdict(0.0, EMPTY)
    gold = str(answer).rsplit("####", 1)[-1].strip()  # GSM8K's whole solution, or the answer itself
    if threading.current_thread() is not threading.main_thread():
        return verify_flexible(text, gold, Verdict(0.0, FORMAT))
    from math_verify import parse, verify

    try:
        parsed = parse(text, parsing_timeout=MATH_TIMEOUT_S)
    except Exception:  # math-verify reports what it cannot parse as []; anything else is not an answer either
        parsed = []
    if not parsed:
        return Verdict(0.0, FORMAT)
    shown = str(parsed[-1])[:MAX_ANSWER_CHARS]
    parsed_gold = _parse_math(gold)
    try:
        correct = bool(parsed_gold) and bool(verify(list(parsed_gold), parsed, timeout_seconds=MATH_TIMEOUT_S))
    except Exception:
        correct = False
    return Verdict(1.0, CORRECT, shown) if correct else Verdict(0.0, WRONG, shown)


def math_equal(gold: str, predicted: str) -> bool:
    gold, predicted = gold.strip(), predicted.strip()
    plain = _THOUSANDS.sub("", predicted)
    if _PLAIN_NUMBER.fullmatch(gold) and _PLAIN_NUMBER.fullmatch(plain) and max(len(gold), len(plain)) <= MAX_DIGITS:
        return Fraction(gold) == Fraction(plain)  # the common case, exact and without sympy ("025" is 25)
    if _normalised(gold) == _normalised(predicted):
        return True
    if threading.current_thread() is not threading.main_thread():
        return False  # math-verify's timeouts use SIGALRM (main thread only): never parse untimed
    from math_verify import verify

    parsed_gold = _parse_math(gold)
    parsed = _parse_math(predicted)
    if not parsed_gold or not parsed:
        return False
    try:
        return bool(verify(list(parsed_gold), list(parsed), timeout_seconds=MATH_TIMEOUT_S))
    except Exception:  # math-verify reports its own failures as False; anything else is not a match either
        return False


@functools.lru_cache(maxsize=8192)  # gold answers repeat across a group's completions
def _parse_math(expression: str) -> tuple:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    config = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    try:
        return tuple(parse("\\boxed{" + expression + "}", extraction_config=config, parsing_timeout=MATH_TIMEOUT_S))
    except Exception:
        return ()


def _normalised(expression: str) -> str:
    text = re.sub(r"\\(?:left|right|displaystyle|!|,|;|:)|\s|\$", "", expression)
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    text = re.sub(r"\\text\{([^{}]*)\}", r"\1", text)
    return text.rstrip(".")


# --- option letters and yes/no ----------------------------------------------------------------------------------
def tagged_answer(completion: object) -> tuple[str | None, str]:
    """The content of the last ``<answer>`` tag, or ``(None, reason)``: the format the choice tasks ask for."""
    text = _tail(completion)
    if not text.strip():
        return None, EMPTY
    tagged, tag_open = last_answer_tag(text)
    if tagged is not None:
        return _capped(tagged)
    unclosed_reasoning = len(_REASONING_OPEN.findall(text)) > len(_REASONING_CLOSE.findall(text))
    return None, TRUNCATED if tag_open or unclosed_reasoning else FORMAT


def verify_choice(completion: object, answer: str) -> Verdict:
    """Multiple choice: the option letter in the last ``<answer>`` tag (``B``, ``(B)``, ``B. text``)."""
    extracted, reason = tagged_answer(completion)
    if extracted is None:
        return Verdict(0.0, reason)
    match = _LETTER.match(extracted)
    if not match:
        return Verdict(0.0, FORMAT)
    letter = match.group(1).upper()
    return Verdict(1.0, CORRECT, letter) if letter == answer.strip().upper() else Verdict(0.0, WRONG, letter)


_ANSWER_BLOCK = re.compile(r"<answer>\n([ABCD])\n</answer>")


def verify_choice_block(completion: object, answer: str) -> Verdict:
    """Multiple choice as SocraticPO's authors grade it (``reward_score/sci_eval.py``): the letter of the last exact
    ``<answer>\nX\n</answer>`` block, X one of A-D in upper case (line endings normalised first)."""
    text = _tail(completion).replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        return Verdict(0.0, EMPTY)
    matches = _ANSWER_BLOCK.findall(text)
    if not matches:
        return Verdict(0.0, FORMAT)
    letter = matches[-1]
    return Verdict(1.0, CORRECT, letter) if letter == answer.strip().upper() else Verdict(0.0, WRONG, letter)


def yes_no(word: str) -> str | None:
    """``Yes`` / ``No`` for yes / true / no / false (any case), else None."""
    return _YES_NO.get(word.strip().lower())


def verify_yes_no(completion: object, answer: str) -> Verdict:
    """Yes/no questions: ``Yes`` / ``No`` (or true / false) in the last ``<answer>`` tag."""
    extracted, reason = tagged_answer(completion)
    if extracted is None:
        return Verdict(0.0, reason)
    word = re.match(r"[\s*\"'(]*([A-Za-z]+)", extracted)
    got = yes_no(word.group(1)) if word else None
    if got is None:
        return Verdict(0.0, FORMAT)
    return Verdict(1.0, CORRECT, got) if got == yes_no(answer) else Verdict(0.0, WRONG, got)
