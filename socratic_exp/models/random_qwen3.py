"""A randomly initialised Qwen3 built in code, saved as a model folder that ``model=qwen3_*`` loads through
``model.name=<folder>``: a student of the Qwen3 family that needs no download.

Two sizes: ``standin`` (2 layers, width 64: a paper overlay's plumbing on CPU in seconds) and ``0.6b`` (the dimensions
of Qwen3-0.6B: the memory and speed of a real-size student, for the GPU smoke test). The tokenizer is the repository's
character tokenizer with a ChatML template (Qwen3's chat format, without tools or thinking); for a vocabulary larger
than its 98 characters it is padded with placeholder tokens, so that every id the model can sample decodes.

    python -m socratic_exp.models.random_qwen3 /tmp/qwen3-standin               # the stand-in
    python -m socratic_exp.models.random_qwen3 /tmp/qwen3-0.6b --size 0.6b      # Qwen3-0.6B's dimensions
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Qwen3Config arguments per size; 0.6b: Qwen/Qwen3-0.6B's config.json (its vocabulary and tied embeddings included)
SIZES: dict[str, dict[str, Any]] = {
    "standin": dict(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, max_position_embeddings=4096, vocab_size=None,
    ),
    # the stand-in with the smallest head vLLM's CPU attention takes (32; its kernels have none of 16)
    "standin_vllm": dict(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=32, max_position_embeddings=4096, vocab_size=None,
    ),
    "0.6b": dict(
        hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
        head_dim=128, max_position_embeddings=40960, rope_theta=1_000_000.0, vocab_size=151936,
    ),
}  # fmt: skip


def build(folder: str | Path, size: str = "standin", seed: int = 0) -> int:
    """Save a random Qwen3 of ``size`` with its tokenizer to ``folder``; returns its parameter count."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    from socratic_exp.models.char_tokenizer import build_char_tokenizer

    dims = dict(SIZES[size])
    tokenizer = build_char_tokenizer()
    vocab_size = dims.pop("vocab_size") or len(tokenizer)
    if vocab_size > len(tokenizer):
        tokenizer.add_tokens([f"<extra_{i}>" for i in range(vocab_size - len(tokenizer))])
    tokenizer.chat_template = CHATML
    config = Qwen3Config(
        vocab_size=vocab_size,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        **dims,
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model.num_parameters()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m socratic_exp.models.random_qwen3", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("folder", help="where the model folder is written")
    parser.add_argument("--size", choices=sorted(SIZES), default="standin")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    parameters = build(args.folder, args.size, args.seed)
    print(f"random Qwen3 ({args.size}, {parameters:,} parameters) saved to {args.folder}")


if __name__ == "__main__":
    main()
