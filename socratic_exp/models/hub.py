"""Hugging Face Hub models (``model=qwen3_*`` presets, or any ``model.name``): loaded with ``from_pretrained``.

Offline, a model that is not in the local cache fails with one line that says how to get it. ``model.name`` may
also be a ``.gguf`` file, converted once into a cached transformers folder (``models/gguf.py``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from socratic_exp.core.component import setting
from socratic_exp.core.errors import UserError
from socratic_exp.models.base import ModelSpec, Student

if TYPE_CHECKING:
    from socratic_exp.tasks.base import Task


@dataclasses.dataclass(kw_only=True)
class HubModel(ModelSpec):
    name: str = setting(
        help="a Hugging Face Hub model name, a local folder (the HF cache serves it offline) or a .gguf file"
    )
    chat: bool = True
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = setting(
        "auto", "weights' dtype (auto: bfloat16 on GPUs that support it, else float32)"
    )
    attn_implementation: str | None = setting(
        None, "transformers' attention kernel, e.g. sdpa or flash_attention_2 (null: transformers' choice)"
    )
    revision: str | None = setting(None, "the Hub revision (branch, tag or commit) to load (null: main)")
    trust_remote_code: bool = setting(False, "run the model repository's own Python code (only for repos you trust)")
    enable_thinking: bool | None = setting(
        False, "Qwen3 chat-template switch for a thinking block (null: pass nothing to the template)"
    )
    cache_dir: str | None = setting(
        None, "where .gguf files are converted to (null: $SOCRATIC_EXP_CACHE or ~/.cache/socratic_exp)"
    )
    decode_dtype: Literal["bfloat16", "auto"] | None = setting(
        None,
        "generation (evaluations, rollouts) with the weights cast to this dtype, training in `dtype`: bfloat16 halves "
        "what a token step reads on a CPU with native bfloat16 (AVX512-BF16, AMX) | auto: bfloat16 on such a CPU, "
        "else `dtype` | null: decode in `dtype`",
    )

    def validate(self) -> None:
        self.check("name", bool(self.name.strip()), "must name a Hub model, a local folder or a .gguf file")
        if self.decode_dtype == "bfloat16":
            from socratic_exp.core.run_folder import native_bf16

            self.check(
                "decode_dtype",
                native_bf16() or _has_gpu(),
                "needs a CPU with native bfloat16 (avx512_bf16 or amx_bf16), which this one lacks: there bfloat16 "
                "decoding is slower than float32",
                "remove model.decode_dtype",
            )

    def decoding_dtype(self) -> str | None:
        """``decode_dtype`` resolved: ``auto`` is bfloat16 on a CPU with native bfloat16, else None (``dtype``; on a
        GPU ``dtype: auto`` already loads bfloat16 where the GPU has it)."""
        if self.decode_dtype != "auto":
            return self.decode_dtype
        from socratic_exp.core.run_folder import native_bf16

        return "bfloat16" if native_bf16() and not _has_gpu() else None

    def resolve(self) -> str:
        """What ``from_pretrained`` loads: the name itself, or the cached conversion of a ``.gguf`` file."""
        if self.name.lower().endswith(".gguf"):
            from socratic_exp.models.gguf import gguf_folder

            return str(gguf_folder(self.name, key="model.name", cache_dir=self.cache_dir))
        return self.name

    def load(self, task: Task) -> Student:
        path = self.resolve()
        model, tokenizer, dtype = load_pretrained(
            path,
            key="model.name",
            dtype=self.dtype,
            revision=self.revision,
            trust_remote_code=self.trust_remote_code,
            attn_implementation=self.attn_implementation,
        )
        template_kwargs = {} if self.enable_thinking is None else {"enable_thinking": self.enable_thinking}
        decode_dtype = self.decoding_dtype()
        if decode_dtype is not None and decode_dtype != dtype:
            from socratic_exp.models.generation import decode_in

            decode_in(model, decode_dtype)
        return Student(
            model=model,
            tokenizer=tokenizer,
            path=path,
            chat=self.chat,
            chat_template_kwargs=template_kwargs,
            info={
                "name": self.name,
                "path": path,
                "dtype": dtype,
                "decode_dtype": decode_dtype or dtype,
                "parameters": model.num_parameters(),
            },
        )


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def load_pretrained(
    name: str,
    *,
    key: str,
    dtype: str = "auto",
    revision: str | None = None,
    trust_remote_code: bool = False,
    attn_implementation: str | None = None,
) -> tuple[Any, Any, str]:
    """Model, left-padding tokenizer and the dtype chosen; a model that cannot be loaded is one clear line
    naming ``key`` (the config key that chose it)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if dtype == "auto":
        dtype = "bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "float32"
    common = {"revision": revision, "trust_remote_code": trust_remote_code}
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, padding_side="left", **common)
        model = AutoModelForCausalLM.from_pretrained(
            name, dtype=getattr(torch, dtype), attn_implementation=attn_implementation, **common
        )
    except OSError as err:
        where = "local folder" if Path(name).exists() else "Hugging Face Hub model"
        raise UserError(
            f"{key}={name}: the {where} could not be loaded ({str(err).splitlines()[0][:160]})",
            f"download it where there is network (`hf download {name}`) into the HF cache, "
            f"or set {key} to a local folder",
        ) from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer, dtype
