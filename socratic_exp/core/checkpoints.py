"""A run folder's checkpoints (``checkpoints/checkpoint-<step>``, as transformers' Trainer saves them): which one a
run resumes from, and whether a checkpoint can be read at all, checked without loading its weights."""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path
from typing import Any

from socratic_exp.core.errors import UserError

CHECKPOINT_PREFIX = "checkpoint-"  # transformers' checkpoint folders: checkpoint-<step>
SET_ASIDE_PREFIX = "damaged-"  # a damaged checkpoint set aside: out of the trainer's sight (it globs checkpoint-*)
TRAINER_STATE = "trainer_state.json"
TRACKER_POSITION = "tracker_position.json"  # the tracker's step when the checkpoint was saved (Logger.position)
WEIGHT_FILES = (  # what the trainer loads a checkpoint's model from (one of them), as transformers names them
    "model.safetensors",
    "model.safetensors.index.json",
    "adapter_model.safetensors",
    "adapter_model.bin",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
# a checkpoint's tokenizer files: saved for people, never read when a run resumes (the tokenizer comes from the model)
TOKENIZER_FILES = ("tokenizer", "special_tokens_map", "added_tokens", "vocab", "merges", "chat_template")
SAFETENSORS_MAX_HEADER = 100_000_000  # the safetensors library refuses a longer header
SAFETENSORS_DTYPE_BITS = {
    **dict.fromkeys(("BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0"), 8),
    **dict.fromkeys(("I16", "U16", "F16", "BF16"), 16),
    **dict.fromkeys(("I32", "U32", "F32"), 32),
    **dict.fromkeys(("I64", "U64", "F64", "C64"), 64),
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
}
ZIP_LOCAL_HEADER = b"PK\x03\x04"
SHOWN_DAMAGED = 6  # damaged checkpoints a refusal names one by one


def checkpoint_folder(args: Any, state: Any) -> Path:
    """The folder of the checkpoint the trainer saves (``on_save``) or loads at ``state.global_step``."""
    return Path(args.output_dir) / f"{CHECKPOINT_PREFIX}{state.global_step}"


def tracker_position(checkpoint: str | Path | None) -> int | None:
    """The tracker's step kept with ``checkpoint`` (None when it has none)."""
    path = Path(checkpoint) / TRACKER_POSITION if checkpoint else None
    if path is None or not path.is_file():
        return None
    return int(json.loads(path.read_text())["position"])


def checkpoint_step(folder: str | Path) -> int | None:
    """The step of a ``checkpoint-<step>`` folder (None for any other name)."""
    name = Path(folder).name
    digits = name.removeprefix(CHECKPOINT_PREFIX)
    return int(digits) if name.startswith(CHECKPOINT_PREFIX) and digits.isdigit() else None


def checkpoint_problem(folder: Path) -> str | None:
    """Why the checkpoint folder cannot be resumed from, as ``<file>: <what is wrong>`` (the first problem found),
    or None when it reads.

    Cheap whatever the model's size: it reads headers and directories, never the weights. ``*.safetensors``: the
    header parses and the file is exactly as long as the header's tensors say; torch files (``*.pt``, ``*.pth``,
    ``*.bin``: optimizer, scheduler, RNG states, training arguments): the zip archive's central directory reads,
    every entry's local header lies where the directory says and ends before it, and the small entries (the pickle,
    the version) match their CRC, without unpickling anything; ``*.json`` (tokenizer files aside): parses, and
    ``trainer_state.json`` is an object with its step. A checkpoint without ``trainer_state.json`` or without any
    model or adapter weights is a save that did not finish. Damage inside the tensors' bytes goes unseen (nothing
    short of reading them all finds it; loading does not either)."""
    try:
        files = sorted(p for p in folder.rglob("*") if p.is_file())
        has_subfolders = any(p.is_dir() for p in folder.iterdir())
    except OSError as err:
        return f"{folder.name}: cannot be listed ({err.strerror or err})"
    names = {p.name for p in files if p.parent == folder}
    if TRAINER_STATE not in names:
        return f"{TRAINER_STATE}: missing (the save did not finish)"
    # FSDP and DeepSpeed keep the weights in subfolders, a model with several adapters one folder an adapter
    if not names.intersection(WEIGHT_FILES) and not has_subfolders:
        return f"{WEIGHT_FILES[0]}: missing, and no other model or adapter weights (the save did not finish)"
    state = folder / TRAINER_STATE
    for path in [state, *(p for p in files if p != state)]:
        try:
            problem = _file_problem(path)
        except OSError as err:
            problem = f"cannot be read ({err.strerror or err})"
        if problem:
            return f"{path.relative_to(folder)}: {problem}"
    return None


def _file_problem(path: Path) -> str | None:
    """What is wrong with one file of a checkpoint, by its kind (None: it reads, or it is of a kind not checked)."""
    if path.suffix == ".safetensors":
        return _safetensors_problem(path)
    if path.suffix in (".pt", ".pth", ".bin"):
        return _torch_file_problem(path)
    if path.suffix == ".json" and not path.name.startswith(TOKENIZER_FILES):
        return _json_problem(path)
    return None


def _safetensors_problem(path: Path) -> str | None:
    """A safetensors file: 8 bytes of header length, the JSON header, then the tensors' bytes back to back."""
    import struct

    with path.open("rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size < 8:
            return f"truncated: {size} bytes, not even the 8 of its header's length"
        (header_length,) = struct.unpack("<Q", handle.read(8))
        if header_length > SAFETENSORS_MAX_HEADER:
            return f"not a safetensors file (its first 8 bytes announce a header of {header_length} bytes)"
        if 8 + header_length > size:
            return f"truncated: {size} of at least {8 + header_length} bytes (its header alone is {header_length})"
        raw = handle.read(header_length)
    try:
        header = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        return f"damaged header: not valid JSON ({_json_error(err)})"
    if not isinstance(header, dict):
        return "damaged header: not a JSON object"
    spans = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            begin, end = (int(offset) for offset in entry["data_offsets"])
            shape = [int(extent) for extent in entry["shape"]]
            dtype = str(entry["dtype"])
        except (TypeError, KeyError, ValueError):
            return f"damaged header: the entry of tensor {name!r} is malformed"
        if end < begin:
            return f"damaged header: tensor {name!r} ends at byte {end} of the data, before it begins ({begin})"
        bits = SAFETENSORS_DTYPE_BITS.get(dtype)  # a dtype newer than this table: its length goes unchecked
        needed = None if bits is None else (math.prod(shape) * bits + 7) // 8
        if needed is not None and end - begin != needed:
            return f"damaged header: tensor {name!r} spans {end - begin} bytes where {shape} of {dtype} takes {needed}"
        spans.append((begin, end, name))
    expected_end = 0
    for begin, end, name in sorted(spans):
        if begin != expected_end:
            return f"damaged header: tensor {name!r} starts at byte {begin} of the data, not {expected_end}"
        expected_end = end
    expected = 8 + header_length + expected_end
    if size < expected:
        return f"truncated: {size} of {expected} bytes"
    if size > expected:
        return f"{size} bytes where its header accounts for {expected}"
    return None


def _torch_file_problem(path: Path) -> str | None:
    """A file of ``torch.save``: a zip archive whose entries are a pickle and the tensors' storages."""
    import struct
    import zipfile

    size = path.stat().st_size
    if size == 0:
        return "empty (0 bytes)"
    with path.open("rb") as raw:
        magic = raw.read(4)
        if magic[:1] == b"\x80":  # torch's legacy format (a bare pickle stream): nothing to check without unpickling
            return None
        try:
            archive = zipfile.ZipFile(raw)
        except zipfile.BadZipFile as err:
            if magic == ZIP_LOCAL_HEADER:  # the archive's start is there, its end (the directory) is not
                return f"truncated: {size} bytes, the end of its zip archive (the directory) is missing"
            return f"not a torch file (not a zip archive: {err})"
        with archive:
            directory_start = getattr(archive, "start_dir", size)
            for entry in archive.infolist():
                raw.seek(entry.header_offset)
                local = raw.read(30)
                if len(local) < 30 or local[:4] != ZIP_LOCAL_HEADER:
                    return f"damaged: its entry {entry.filename} is not at byte {entry.header_offset}"
                name_length, extra_length = struct.unpack("<HH", local[26:30])
                if entry.header_offset + 30 + name_length + extra_length + entry.compress_size > directory_start:
                    return f"damaged: its entry {entry.filename} overruns the archive's directory"
            for entry in archive.infolist():  # the pickle and the small records; the storages are .../data/<n>
                if entry.filename.rpartition("/")[0].rpartition("/")[2] == "data":
                    continue
                try:
                    archive.read(entry)  # checks its CRC
                except (zipfile.BadZipFile, EOFError) as err:
                    return f"damaged: {err}"
    return None


def _json_problem(path: Path) -> str | None:
    text = path.read_bytes()
    if not text.strip():
        return f"empty ({len(text)} bytes)"
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        if _cut_short(err, text):
            return f"truncated: its JSON stops unfinished at byte {len(text)}"
        return f"not valid JSON ({_json_error(err)})"
    if path.name == TRAINER_STATE and not (isinstance(data, dict) and isinstance(data.get("global_step"), int)):
        return "damaged: not an object with an integer global_step"
    return None


def _cut_short(err: ValueError, text: bytes) -> bool:
    """Whether JSON failed to parse for want of its end (a write cut short), not for a wrong byte within."""
    if not isinstance(err, json.JSONDecodeError):
        return False
    return err.pos >= len(text.rstrip()) or err.msg.startswith("Unterminated string")


def _json_error(err: ValueError) -> str:
    if isinstance(err, json.JSONDecodeError):  # "Unterminated string starting at" ends with its own "at"
        return f"{err.msg} {'' if err.msg.endswith(' at') else 'at '}byte {err.pos}"
    return "not UTF-8 text"


def last_checkpoint(run_dir: Path, writes: bool = True) -> str | None:
    """The latest ``checkpoints/checkpoint-<step>`` folder of ``run_dir`` that can be read (``checkpoint_problem``;
    None before the first save), the one a run resumes from.

    Newer checkpoints that cannot be read are passed over, with one warning line naming each one's damaged file;
    the main process (``writes``) sets each aside as ``damaged-checkpoint-<step>``, so that nothing is lost and
    the resumed run saves that step afresh instead of into the damaged folder (the trainer, and its rotation of old
    checkpoints, only see ``checkpoint-*``). The other processes of a launch come to the same checkpoint. Raises
    ``UserError`` when there are checkpoints and none can be read (then nothing is moved)."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return None
    found = sorted((p for p in root.iterdir() if checkpoint_step(p) is not None and p.is_dir()), key=checkpoint_step)
    damaged: list[tuple[Path, str]] = []
    for folder in reversed(found):
        problem = checkpoint_problem(folder)
        if problem is None:
            if damaged:
                _pass_over(damaged, folder, writes)
            return str(folder)
        damaged.append((folder, problem))
    if not damaged:
        return None
    listed = ", ".join(f"{folder.name} ({problem})" for folder, problem in damaged[:SHOWN_DAMAGED])
    more = len(damaged) - SHOWN_DAMAGED
    raise UserError(
        f"no checkpoint of {run_dir} can be read: {listed}" + (f" and {more} more" if more > 0 else ""),
        f"restore the damaged files from a copy, or move the checkpoint folders out of {root} to train this run "
        "again from step 0",
    )


def _pass_over(damaged: list[tuple[Path, str]], chosen: Path, writes: bool) -> None:
    """The main process (``writes``) sets the damaged checkpoints newer than ``chosen`` aside and says so in one
    warning line; the others leave them to it."""
    if not writes:
        return
    kept = []
    for folder, _ in damaged:
        aside = folder.with_name(SET_ASIDE_PREFIX + folder.name)
        attempt = 1
        while aside.exists():  # an earlier resume set one of that step aside too
            attempt += 1
            aside = folder.with_name(f"{SET_ASIDE_PREFIX}{folder.name}.{attempt}")
        try:
            folder.rename(aside)
        except FileNotFoundError:  # gone meanwhile: nothing left to keep
            continue
        except OSError as err:
            raise UserError(
                f"{folder.name} cannot be read and cannot be set aside as {aside.name} ({err.strerror or err})",
                f"move {folder} out of {folder.parent}, then resume again",
            ) from None
        kept.append(f"{folder.name} is kept as {aside.name}")
    unreadable = "; ".join(f"{folder.name} cannot be read ({problem})" for folder, problem in damaged)
    note = f" ({', '.join(kept)})" if kept else ""
    logging.getLogger("socratic_exp").warning(
        "%s; resuming from %s, the latest readable one%s", unreadable, chosen.name, note
    )
