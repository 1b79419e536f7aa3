"""Benchmark records from local files or the Hugging Face Hub, with one-line errors that say what to fix.

Local files are read directly (JSON Lines, a JSON array, or parquet with only the needed columns), so that a
malformed row is reported with its ``file:line`` and nothing is copied into a cache. Hub datasets are loaded with
``datasets.load_dataset(<usual name>)``; offline without a cached copy that is one line naming the dataset and
the ``task.data_files`` key to set instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from socratic_exp.errors import UserError

Record = dict[str, Any]
Located = tuple[str, Record]  # (where: "file:line" or "hub[split] row i", record)

FILE_FORMATS = (".jsonl", ".json", ".parquet")


def read_file(path: str, columns: Sequence[str] | None = None) -> list[Located]:
    """Every record of a local file, each with where it came from."""
    suffix = Path(path).suffix.lower()
    if not Path(path).is_file():
        raise UserError(f"data file {path!r} does not exist", "point task.data_files at an existing file")
    if suffix == ".parquet":
        return _read_parquet(path, columns)
    if suffix in (".jsonl", ".json"):
        return list(_read_json(path))
    raise UserError(f"data file {path!r}: unsupported format {suffix!r}", f"use one of {', '.join(FILE_FORMATS)}")


def _read_json(path: str) -> Iterator[Located]:
    with open(path, encoding="utf-8") as handle:
        head = handle.read(4096).lstrip()[:1]
        handle.seek(0)
        if head == "[":  # a JSON array of records
            try:
                records = json.load(handle)
            except json.JSONDecodeError as err:
                raise UserError(
                    f"{path}:{err.lineno}: not valid JSON ({err.msg})", "fix the file or write it as JSON Lines"
                ) from None
            for i, record in enumerate(records):
                yield _checked(f"{path}: item {i}", record)
            return
        for line_no, line in enumerate(handle, 1):
            if not line.strip():
                continue
            where = f"{path}:{line_no}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise UserError(
                    f"{where}: not valid JSON ({err.msg})", "each line must be one JSON object (JSON Lines)"
                ) from None
            yield _checked(where, record)


def _checked(where: str, record: Any) -> Located:
    if not isinstance(record, dict):
        raise UserError(f"{where}: a {type(record).__name__}, not a JSON object", "each row must be a JSON object")
    return where, record


def _read_parquet(path: str, columns: Sequence[str] | None) -> list[Located]:
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
        wanted = [c for c in columns if c in schema.names] if columns else None
        rows = pq.read_table(path, columns=wanted).to_pylist()
    except Exception as err:  # pyarrow raises several types for a file that is not parquet
        raise UserError(f"data file {path!r}: not readable as parquet ({first_line(err)})") from None
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


def field(record: Record, where: str, option: str, *names: str) -> Any:
    """The first present (non-null) field among ``names``, else a one-line error naming the row."""
    for name in names:
        value = record.get(name)
        if value is not None:
            return value
    shown = " / ".join(repr(n) for n in names)
    raise UserError(
        f"{where}: malformed {option} row: no {shown} field (has {', '.join(sorted(record)) or 'nothing'})",
        f"each row needs {shown}; check that the file is a {option} file",
    )


def text(record: Record, where: str, option: str, *names: str) -> str:
    """A required text field (numbers are accepted and written as text, e.g. AIME's integer answers)."""
    value = field(record, where, option, *names)
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise UserError(
            f"{where}: malformed {option} row: {names[0]!r} is a {type(value).__name__}, not text",
            f"write {names[0]!r} as a string",
        )
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # AMC23 stores 27.0
    return str(value)
