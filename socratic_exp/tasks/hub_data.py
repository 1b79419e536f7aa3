"""Benchmark records from local files or the Hugging Face Hub, with one-line errors that say what to fix.

Local files are read directly (JSON Lines, a JSON array, or parquet with only the needed columns), so that a
malformed row is reported with its ``file:line`` and nothing is copied into a cache. Hub datasets are loaded with
``datasets.load_dataset(<usual name>)``; offline without a cached copy that is one line naming the dataset and
the ``task.data_files`` key to set instead.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from socratic_exp.core.errors import UserError

Record = dict[str, Any]
Located = tuple[str, Record]  # (where: "file:line" or "hub[split] row i", record)

FILE_FORMATS = (".jsonl", ".json", ".parquet")


def read_file(path: str, columns: Sequence[str] | None = None) -> list[Located]:
    """Every record of a local file, each with where it came from."""
    suffix = Path(path).suffix.lower()
    if suffix in (".jsonl", ".json"):
        return read_json(path)
    check_is_file(path)
    if suffix == ".parquet":
        return _read_parquet(path, columns)
    raise UserError(f"data file {path!r}: unsupported format {suffix!r}", f"use one of {', '.join(FILE_FORMATS)}")


def read_json(path: str, option: str | None = None) -> list[Located]:
    """Every record of a JSON Lines file or a JSON array of objects, each with its ``file:line``. A line that is not
    UTF-8, not JSON or not an object is one error naming the file and the line (a malformed ``option`` row where
    ``option`` is given)."""
    check_is_file(path)
    try:
        with open(path, "rb") as handle:  # bytes: a line that is not UTF-8 is named exactly
            is_array = handle.read(4096).lstrip()[:1] == b"["
            handle.seek(0)
            records = _array_records(path, handle.read(), option) if is_array else _line_records(path, handle, option)
            return list(records)
    except OSError as err:
        raise UserError(
            f"data file {path!r} cannot be read ({err.strerror or err})", "check the file and its permissions"
        ) from None


def check_is_file(path: str) -> None:
    """A data file that is there and is a file, else one line saying what it is."""
    from socratic_exp.tasks.base import file_problem

    problem = file_problem(path)
    if problem is not None:
        raise UserError(
            f"data file {path!r} {problem}", "point task.data_files at an existing JSON Lines, JSON or parquet file"
        )


def _malformed(where: str, option: str | None, problem: str) -> str:
    return f"{where}: malformed {option} row: {problem}" if option else f"{where}: {problem}"


def _not_utf8(path: str, line_no: int, option: str | None) -> UserError:
    problem = _malformed(f"{path}:{line_no}", option, "not a text file (not UTF-8)")
    return UserError(problem, "give a JSON Lines, JSON or parquet file")


def _line_records(path: str, lines: Iterable[bytes], option: str | None) -> Iterator[Located]:
    for line_no, raw in enumerate(lines, 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _not_utf8(path, line_no, option) from None
        if not line.strip():
            continue
        where = f"{path}:{line_no}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise UserError(
                _malformed(where, option, f"not valid JSON ({err.msg})"),
                "each line must be one JSON object (JSON Lines)",
            ) from None
        yield _checked(where, record, option)


def _array_records(path: str, data: bytes, option: str | None) -> Iterator[Located]:
    """The objects of a JSON array, each named by the line it starts on."""
    try:
        content = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise _not_utf8(path, data.count(b"\n", 0, err.start) + 1, option) from None
    try:
        records = json.loads(content)
    except json.JSONDecodeError as err:
        raise UserError(
            _malformed(f"{path}:{err.lineno}", option, f"not valid JSON ({err.msg})"),
            "fix the file or write it as JSON Lines",
        ) from None
    # the file parsed: each item's start, found again by decoding item after item, gives its line
    decoder = json.JSONDecoder()
    position = content.index("[") + 1
    line_no, counted = 1, 0  # the line of content[counted]
    for i, record in enumerate(records):
        start = _SEPARATOR.match(content, position).end()
        line_no, counted = line_no + content.count("\n", counted, start), start
        _, position = decoder.raw_decode(content, start)
        yield _checked(f"{path}:{line_no} (item {i})", record, option)


_SEPARATOR = re.compile(r"[\s,]*")  # between a JSON array's items


def _checked(where: str, record: Any, option: str | None = None) -> Located:
    if not isinstance(record, dict):
        raise UserError(
            _malformed(where, option, f"{json_type(record)}, not a JSON object"), "each row must be a JSON object"
        )
    return where, record


def json_type(value: Any) -> str:
    """What a value is, as a row's author knows it: ``null``, ``a list``, ``an object``, ``a string``, ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    names = {dict: "an object", list: "a list", tuple: "a list", str: "a string", int: "a number", float: "a number"}
    return next((name for kind, name in names.items() if isinstance(value, kind)), f"a {type(value).__name__}")


def _read_parquet(path: str, columns: Sequence[str] | None) -> list[Located]:
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
        wanted = [c for c in columns if c in schema.names] if columns else None
        rows = pq.read_table(path, columns=wanted).to_pylist()
    except Exception as err:  # pyarrow raises several types for a file that is not parquet
        raise UserError(
            f"data file {path!r}: not readable as parquet ({first_line(err)})",
            "give a valid parquet or JSON Lines file",
        ) from None
    return [(f"{path}: row {i}", row) for i, row in enumerate(rows)]


def read_hub(
    name: str,
    config: str | None,
    split: str,
    *,
    option: str,
    data_key: str,
    stream_limit: int | None = None,
    **load_kwargs: Any,
) -> list[Located]:
    """A Hub dataset split (from the HF cache when offline). ``stream_limit`` streams only the first rows;
    ``load_kwargs`` go to ``load_dataset`` (e.g. ``columns=[...]`` for parquet datasets)."""
    from datasets import load_dataset

    label = f"{name}" + (f" ({config})" if config else "") + f" split {split!r}"
    try:
        if stream_limit is not None:
            stream = load_dataset(name, config, split=split, streaming=True, **load_kwargs)
            rows = [row for _, row in zip(range(stream_limit), stream, strict=False)]
        else:
            rows = load_dataset(name, config, split=split, **load_kwargs).to_list()
    except Exception as err:  # offline, missing, gated, renamed: all end in the same fix
        raise UserError(
            f"task={option}: the Hugging Face Hub dataset {label} could not be loaded ({first_line(err)})",
            f"load it once with network to fill the HF cache (or `hf download --repo-type dataset {name}`), "
            f"or set {data_key}=<local file>",
        ) from None
    return [(f"{name}[{split}] row {i}", row) for i, row in enumerate(rows)]


def first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0][:200]


def present(record: Record, where: str, option: str, *names: str) -> tuple[str, Any]:
    """The first field among ``names`` (spellings of one field) that holds a value, with its name; else a one-line
    error naming the row and what is wrong: the field is missing, or null."""
    for name in names:
        if record.get(name) is not None:
            return name, record[name]
    shown = " / ".join(repr(n) for n in names)
    nulls = [repr(n) for n in names if n in record]
    if nulls:
        problem = f"{' / '.join(nulls)} {'is' if len(nulls) == 1 else 'are'} null"
        fix = f"give {names[0]!r} a value in every row (or leave such rows out)"
    else:
        keys = sorted(record)
        has = ", ".join(keys[:12]) + (", ..." if len(keys) > 12 else "")
        problem = f"no {shown} field (has {has or 'nothing'})"
        fix = f"each row needs {shown}; check that the file is a {option} file"
    raise UserError(f"{where}: malformed {option} row: {problem}", fix)


def field(record: Record, where: str, option: str, *names: str) -> Any:
    """The first field among ``names`` that holds a value (see ``present``)."""
    return present(record, where, option, *names)[1]


def text(record: Record, where: str, option: str, *names: str) -> str:
    """A required text field (numbers are accepted and written as text, e.g. AIME's integer answers): a one-line error
    names the row when it is missing, null, neither a string nor a number, or empty."""
    name, value = present(record, where, option, *names)
    return as_text(value, where, option, name)


def optional_text(record: Record, where: str, option: str, name: str) -> str | None:
    """An optional text field: None when it is missing or null (it is not given), else as ``text`` checks it (an
    empty string is returned as it is)."""
    value = record.get(name)
    return None if value is None else as_text(value, where, option, name, empty=True)


def as_text(value: Any, where: str, option: str, name: str, *, empty: bool = False) -> str:
    """``value`` of the row's field ``name`` as text: a string, or a finite number (``27.0`` reads ``27``); else a
    one-line error naming the row, the field and what is wrong with it."""
    problem = None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        problem = f"{json_type(value)}, not a string or a number"
    elif isinstance(value, float) and not math.isfinite(value):
        problem = f"{value}, not a finite number"
    elif isinstance(value, str) and not value.strip() and not empty:
        problem = "empty"
    if problem:
        raise UserError(
            f"{where}: malformed {option} row: {name!r} is {problem}", f"write {name!r} as text (or a number)"
        )
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # AMC23 stores 27.0
    return str(value)
