"""A character-level tokenizer built in code: printable ASCII and newline, one token per character."""

from __future__ import annotations

from typing import Any

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
CHARACTERS = [chr(code) for code in range(32, 127)] + ["\n"]


def build_char_tokenizer() -> Any:
    """A ``PreTrainedTokenizerFast`` that keeps every space and newline (decoding fuses tokens back verbatim).

    Reload a saved copy with ``PreTrainedTokenizerFast.from_pretrained`` (or ``load_char_tokenizer``): loading it
    through a model-specific tokenizer class would normalise whitespace away.
    """
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate([PAD, EOS, UNK, *CHARACTERS])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    backend.pre_tokenizer = _one_token_per_character()
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token=PAD, eos_token=EOS, unk_token=UNK, padding_side="left"
    )


def load_char_tokenizer(path: str) -> Any:
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast.from_pretrained(path, padding_side="left")
    tokenizer.backend_tokenizer.pre_tokenizer = _one_token_per_character()  # copies saved before the newline fix
    return tokenizer


def _one_token_per_character() -> Any:
    """Every character its own piece, newlines included (``.`` alone skips them: "\n\n" became one unknown token)."""
    from tokenizers import Regex, pre_tokenizers

    return pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
