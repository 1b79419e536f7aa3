"""Frozen question features for the Goldilocks utility predictor (``sampler=goldilocks``; ours: the paper's teacher
reads the question text itself with a language model).

- ``student``: the mean of the student's last hidden states over the prompt's tokens, as the student reads the
  prompt (chat template included), computed once with the weights it has when training starts.
- ``embedding_model``: the same mean over a separate encoder's last hidden states (any ``AutoModel`` folder or
  cached Hub name, e.g. a sentence-embedding model), read from the question text.
- ``prior_column``: a numeric row column in [0, 1] such as OpenMathReasoning's ``prior_pass_rate``: the value p,
  sqrt(p (1 - p)) and a missing flag (missing values count as p = 0.5).

Wide hidden states are cut to ``projection_dim`` by a fixed random Gaussian projection (distances are roughly
kept, Johnson-Lindenstrauss), then every column is standardised. The matrix is written once to the run's
checkpoint folder: a resumed run reads it back instead of embedding with the resumed (already trained) weights.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from socratic_exp.core.errors import ConfigError
from socratic_exp.tasks.base import question_text

if TYPE_CHECKING:
    import torch

    from socratic_exp.samplers.goldilocks.config import GoldilocksSampler

log = logging.getLogger("socratic_exp")
FEATURES_FILE = "goldilocks_features.pt"
MAX_TOKENS = 512  # longer prompts are embedded from their first tokens: the cost stays bounded


def question_features(settings: GoldilocksSampler, trainer: Any, dataset: Any, seed: int) -> torch.Tensor:
    """The [rows, dims] feature matrix of ``dataset``, read from the checkpoint folder when a run resumes."""
    import torch

    cache = Path(trainer.args.output_dir) / FEATURES_FILE
    key = {
        "rows": len(dataset),
        "features": settings.features,
        "embedding_model": settings.embedding_model,
        "projection_dim": settings.projection_dim,
        "prior_column": settings.prior_column,
    }
    if cache.is_file():
        stored = torch.load(cache, weights_only=True)
        if stored["key"] == key:
            log.info("goldilocks: question features read from %s", cache)
            return stored["features"]
    parts = []
    if settings.features == "student":
        model = trainer.accelerator.unwrap_model(trainer.model)
        texts = [_as_text(p, trainer.processing_class, trainer) for p in dataset["prompt"]]
        parts.append(mean_hidden_states(model, trainer.processing_class, texts, settings.embedding_batch_size))
    elif settings.features == "embedding_model":
        model, tokenizer = load_encoder(settings.embedding_model)
        texts = [question_text(p) for p in dataset["prompt"]]
        parts.append(mean_hidden_states(model, tokenizer, texts, settings.embedding_batch_size))
    if parts:
        parts[0] = random_projection(parts[0], settings.projection_dim, seed)
    if settings.prior_column:
        if settings.prior_column not in dataset.column_names:
            raise ConfigError(
                "sampler.prior_column",
                settings.prior_column,
                f"is not a column of the training split (columns: {', '.join(dataset.column_names)})",
                "name a numeric column in [0, 1], e.g. prior_pass_rate of task=openmath, or set it to null",
            )
        parts.append(prior_features(dataset[settings.prior_column]))
    features = standardized(torch.cat(parts, dim=1))
    if trainer.accelerator.is_main_process:
        cache.parent.mkdir(parents=True, exist_ok=True)
        partial = cache.with_suffix(f".{os.getpid()}.tmp")
        torch.save({"key": key, "features": features}, partial)
        os.replace(partial, cache)  # other processes never read a half-written file
    return features


def mean_hidden_states(model: Any, tokenizer: Any, texts: Sequence[str], batch_size: int) -> torch.Tensor:
    """The mean last hidden state over each text's tokens (float32, on CPU), in batches, without gradients."""
    import torch
    from tqdm.auto import tqdm

    # The decoder alone: TRL patches a causal LM's forward (its fused LM head) and the head is not needed here.
    body = model.get_decoder() if hasattr(model, "get_decoder") else model
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    rows = []
    try:
        with torch.no_grad():
            batches = range(0, len(texts), batch_size)
            for start in tqdm(batches, desc="goldilocks: question features", disable=len(batches) < 8):
                encoded = tokenizer(
                    list(texts[start : start + batch_size]),
                    return_tensors="pt",
                    padding=True,
                    padding_side="right",  # real tokens keep their positions
                    truncation=True,
                    max_length=MAX_TOKENS,
                ).to(device)
                hidden = body(input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"])
                mask = encoded["attention_mask"].unsqueeze(-1).to(hidden.last_hidden_state.dtype)
                pooled = (hidden.last_hidden_state * mask).sum(1) / mask.sum(1).clamp(min=1.0)
                rows.append(pooled.float().cpu())
    finally:
        model.train(was_training)
    return torch.cat(rows)


def load_encoder(name: str | None) -> tuple[Any, Any]:
    from transformers import AutoModel, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(name)
        model = AutoModel.from_pretrained(name)
    except OSError as err:
        raise ConfigError(
            "sampler.embedding_model",
            name,
            f"could not be loaded ({str(err).splitlines()[0][:160]})",
            f"download it first (hf download {name}) or point it at a local folder; or use sampler.features=student",
        ) from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    return model, tokenizer


def prior_features(values: Sequence[Any]) -> torch.Tensor:
    """[p, sqrt(p (1 - p)), missing] per row; a value outside [0, 1] or absent counts as missing (p = 0.5)."""
    import torch

    rows = []
    for value in values:
        p = float(value) if isinstance(value, int | float) and 0.0 <= float(value) <= 1.0 else None
        rows.append([0.5, 0.5, 1.0] if p is None else [p, math.sqrt(p * (1.0 - p)), 0.0])
    return torch.tensor(rows, dtype=torch.float32)


def random_projection(features: torch.Tensor, dims: int, seed: int) -> torch.Tensor:
    """``features`` unchanged when at most ``dims`` wide, else times a fixed Gaussian matrix [width, dims]."""
    import torch

    if features.size(1) <= dims:
        return features
    generator = torch.Generator().manual_seed(seed)
    matrix = torch.randn(features.size(1), dims, generator=generator) / math.sqrt(dims)
    return features @ matrix


def standardized(features: torch.Tensor) -> torch.Tensor:
    """Each column to mean 0 and standard deviation 1 (constant columns to 0)."""
    import torch

    mean, std = features.mean(0), features.std(0)
    return (features - mean) / torch.where(std > 1e-8, std, torch.ones_like(std))


def _as_text(prompt: Any, tokenizer: Any, trainer: Any) -> str:
    """The prompt as the student reads it: chat messages through its chat template (TRL's own rendering)."""
    if isinstance(prompt, str):
        return prompt
    kwargs = getattr(trainer, "chat_template_kwargs", None) or {}
    return tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False, **kwargs)
